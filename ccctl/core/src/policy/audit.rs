//! The policy's audit log: one JSON line per change (`policy apply`,
//! `rollback` by hand or by the daemon's judge, `clear`, `load --replace`),
//! appended to a file opened `O_APPEND` (one `write` per line, so lines of
//! concurrent writers never interleave).
//!
//! Where: `--audit FILE` on the command, else `$CCCTL_AUDIT`, else the
//! daemon config's `audit = "FILE"` (the daemon), else
//! [`DEFAULT_AUDIT_PATH`]. A failed write is an error of the command.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::judge::Decision;
use super::Rule;

/// Where the log goes when nothing else says.
pub const DEFAULT_AUDIT_PATH: &str = "/var/lib/ccctl/audit.jsonl";
/// The environment variable naming the log (below `--audit`).
pub const AUDIT_ENV: &str = "CCCTL_AUDIT";

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit log {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("audit log: encoding the record: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Apply,
    Rollback,
    /// A rollback the daemon's canary judge decided.
    AutoRollback,
    /// The daemon measured a rule's baseline and started its canary.
    CanaryStart,
    Clear,
    Replace,
}

/// Who did it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    pub uid: u32,
    /// From /etc/passwd, if the uid is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `SUDO_USER`, when run through sudo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo_user: Option<String>,
    pub pid: u32,
    /// The command line (argv).
    pub command: Vec<String>,
}

impl Who {
    /// This process.
    pub fn this_process() -> Who {
        let uid = rustix::process::getuid().as_raw();
        Who {
            uid,
            user: user_name(uid),
            sudo_user: std::env::var("SUDO_USER").ok(),
            pid: std::process::id(),
            command: std::env::args().collect(),
        }
    }
}

/// The name of `uid` in /etc/passwd.
pub fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd_name(&text, uid)
}

fn passwd_name(text: &str, uid: u32) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id: u32 = f.nth(1)?.parse().ok()?;
        (id == uid).then(|| name.to_string())
    })
}

/// A rule as the record names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleRecord {
    pub name: String,
    pub algorithm: String,
    /// The registration its connections get (`modest_bbr_p1`).
    pub kernel_name: String,
    /// What it matches, as `ccctl policy show` says it (`remote
    /// fd00:ccc::/48, remote_port 443`; `every connection`). Absent in
    /// lines written before it was recorded.
    #[serde(default, rename = "match", skip_serializing_if = "String::is_empty")]
    pub matches: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, f64>,
    pub share: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
}

impl From<&Rule> for RuleRecord {
    fn from(r: &Rule) -> RuleRecord {
        RuleRecord {
            name: r.name.clone(),
            algorithm: r.algorithm.name.clone(),
            kernel_name: r.algorithm.kernel_name.clone(),
            matches: r.describe_match(),
            params: r.algorithm.param_values.clone(),
            share: r.share,
            control: r.control.as_ref().map(|c| c.kernel_name.clone()),
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// RFC 3339, UTC (`2026-11-25T18:30:00Z`).
    pub at: String,
    pub action: Action,
    pub who: Who,
    /// The rules concerned (apply: all of the policy; rollback: the one).
    #[serde(default)]
    pub rules: Vec<RuleRecord>,
    /// `--why`, or what the command was.
    pub why: String,
    /// The judge's numbers (automatic rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// What the change did (the command's report), free form.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub outcome: serde_json::Value,
}

impl Record {
    /// A record stamped now, by this process.
    pub fn now(action: Action, why: impl Into<String>) -> Record {
        Record {
            at: rfc3339(super::kernel::now_unix()),
            action,
            who: Who::this_process(),
            rules: Vec::new(),
            why: why.into(),
            decision: None,
            outcome: serde_json::Value::Null,
        }
    }
}

/// `2026-11-25T18:30:00Z`.
pub fn rfc3339(unix_s: u64) -> String {
    crate::units::utc(unix_s, "-", "T", ":", "Z")
}

/// The log to write: `explicit`, else `$CCCTL_AUDIT`, else `configured`,
/// else [`DEFAULT_AUDIT_PATH`].
pub fn resolve(explicit: Option<&Path>, configured: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os(AUDIT_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    configured
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_AUDIT_PATH))
}

/// The log, opened `O_APPEND` (created 0640 with its directory if missing).
/// Commands open it before they change anything, so a log that cannot be
/// written refuses the change instead of leaving it unrecorded.
pub struct Log {
    path: PathBuf,
    file: std::fs::File,
}

impl Log {
    pub fn open(path: &Path) -> Result<Log, AuditError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |what| {
            let path = path.to_path_buf();
            move |source| AuditError::Io { path, what, source }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err("creating its directory"))?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)
            .map_err(err("opening for append"))?;
        Ok(Log {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `rec` as one line, one write, synced.
    pub fn append(&mut self, rec: &Record) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(rec)?;
        line.push(b'\n');
        let err = |what| {
            let path = self.path.clone();
            move |source| AuditError::Io { path, what, source }
        };
        self.file.write_all(&line).map_err(err("writing"))?;
        self.file.sync_data().map_err(err("syncing"))?;
        Ok(())
    }
}

/// Open `path` and append `rec`.
pub fn append(path: &Path, rec: &Record) -> Result<(), AuditError> {
    Log::open(path)?.append(rec)
}

/// Every record of the log at `path` (tests, tools).
pub fn read(path: &Path) -> Result<Vec<Record>, AuditError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuditError::Io {
        path: path.to_path_buf(),
        what: "reading",
        source,
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(AuditError::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::judge::{Breach, GroupSample, Thresholds};
    use super::*;

    #[test]
    fn rfc3339_is_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_631_400), "2026-11-25T18:30:00Z");
    }

    #[test]
    fn passwd_lookup() {
        let t = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(passwd_name(t, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(t, 1000).as_deref(), Some("alice"));
        assert_eq!(passwd_name(t, 7), None);
    }

    fn sample(goodput: f64, rtt: f64, retrans: f64) -> GroupSample {
        GroupSample {
            flows: 4,
            goodput_bps: goodput,
            rtt_ms: rtt,
            retrans_ratio: retrans,
        }
    }

    #[test]
    fn record_is_one_json_line_and_reads_back() {
        let dir = crate::sys::scratch_dir("audit-test").expect("scratch dir");
        let path = dir.join("sub").join("audit.jsonl");
        let mut rec = Record::now(Action::AutoRollback, "canary judge: retransmissions");
        rec.rules.push(RuleRecord {
            name: "web".into(),
            algorithm: "bbr".into(),
            kernel_name: "bbr".into(),
            matches: "remote fd00:ccc::/48, remote_port 443".into(),
            params: BTreeMap::new(),
            share: 0.5,
            control: Some("cubic".into()),
        });
        rec.decision = Some(Decision {
            thresholds: Thresholds {
                max_rtt_ratio: 1.5,
                max_retrans_ratio: 3.0,
                min_goodput_ratio: 0.5,
                max_goodput_ratio: Some(2.5),
                hold_s: 3.0,
                interval_s: 1.0,
                min_flows: 1,
                baseline_s: Some(30.0),
                max_control_harm: Some(0.3),
            },
            held_s: 3.2,
            breaches: vec![Breach::RetransRatio {
                measured: 7.5,
                limit: 3.0,
            }],
            canary: sample(2e7, 14.0, 0.03),
            control: sample(1e7, 13.0, 0.004),
            rtt_ratio: 14.0 / 13.0,
            retrans_ratio: 7.5,
            goodput_ratio: 2.0,
            control_harm: None,
            baseline: Some(crate::policy::judge::Baseline {
                intervals: 30,
                secs: 30.0,
                flows: 4.0,
                total_goodput_bps: 9.6e7,
                goodput_bps: 2.4e7,
                rtt_ms: 12.0,
                retrans_ratio: 0.001,
            }),
            baseline_harm: Some(crate::policy::judge::BaselineHarm {
                goodput_harm: 0.2,
                rtt_harm: 0.1,
            }),
        });
        append(&path, &rec).expect("append");
        append(&path, &Record::now(Action::Clear, "second")).expect("append");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 2);
        let first: serde_json::Value =
            serde_json::from_str(text.lines().next().expect("line")).expect("each line is JSON");
        assert_eq!(first["action"], "auto_rollback");
        assert_eq!(first["who"]["pid"], std::process::id());
        assert_eq!(first["rules"][0]["control"], "cubic");
        assert_eq!(
            first["rules"][0]["match"],
            "remote fd00:ccc::/48, remote_port 443"
        );
        assert_eq!(
            first["decision"]["breaches"][0]["retrans_ratio"]["measured"],
            7.5
        );
        assert!(first["at"].as_str().is_some_and(|s| s.ends_with('Z')));
        let back = read(&path).expect("reads back");
        assert_eq!(back[0], rec);
        assert_eq!(back[1].action, Action::Clear);
    }

    /// A line written before `match` was recorded still reads.
    #[test]
    fn a_rule_without_match_reads_back() {
        let r: RuleRecord = serde_json::from_str(
            r#"{"name":"a","algorithm":"reno","kernel_name":"reno","share":1.0}"#,
        )
        .expect("an older line");
        assert_eq!(r.matches, "");
    }

    #[test]
    fn write_failure_is_an_error() {
        let e = append(
            Path::new("/proc/ccctl-no/audit.jsonl"),
            &Record::now(Action::Apply, "x"),
        )
        .expect_err("cannot write under /proc");
        assert!(e.to_string().contains("/proc/ccctl-no/audit.jsonl"), "{e}");
    }

    #[test]
    fn resolve_order() {
        assert_eq!(
            resolve(Some(Path::new("/a")), Some(Path::new("/b"))),
            PathBuf::from("/a")
        );
    }
}
