//! Sweeps split over a batch engine: `ccctl lab run SCENARIO --shard K/N`
//! runs a deterministic part of the plan into an ordinary run directory;
//! `ccctl lab merge DIR... --out DIR` joins the N shard directories into
//! the run directory an unsharded run writes (same files, table and plots),
//! recomputing every metric from the merged records.
//!
//! Which runs a shard takes ([`select`]):
//! - main runs and the solo and same-cc baselines are each run **once**, by
//!   one shard: they are assigned longest first (`Job::expected_secs`, plan
//!   order among equals) to the shard with the least testbed time so far
//!   (lowest K among equals). Every shard computes the same assignment from
//!   the same plan. Harm needs a main run and its baselines together only
//!   at analysis time, and analysis happens again at merge, so baselines are
//!   shared across shards and never repeated.
//! - **calibration travels with every shard**: a shard runs the calibration
//!   of each link setting it has runs on, because calibration judges the
//!   machine the runs were made on (a slow node must mark its own results
//!   `testbed-limited`, which another node's calibration cannot show). The
//!   merge keeps, per calibration, the shard whose reference flow got the
//!   least goodput: a link is testbed-limited if it was on any shard that
//!   ran it. Every shard's figure is kept in `metadata.json`
//!   (`shards[].calibrations`).
//!
//! A shard writes `records.json` beside its usual files: every record the
//! analysis reads (socket samples, iperf3 results, qdisc counters), keyed by
//! run id. Its `metadata.json` names the shard, the plan digest (FNV-1a
//! 64 of the plan as JSON) and the runs it made. The merge refuses shards of
//! different scenarios, plans, or ccctl versions and commits, sets with a
//! shard missing, twice, or not complete, and records that do not add up to
//! the plan.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::exec::JobRecord;
use crate::plan::{Job, JobKind, Plan};
use crate::run_dir::{self, Metadata, Records, RunDirError, RunRecord, ShardMeta};
use crate::scenario::Scenario;

/// `--shard K/N` (defined with the files that record it).
pub use crate::run_dir::Shard;

/// Most shards a plan is split into (a typo guard, not a limit of the method).
pub const MAX_SHARDS: u32 = 10_000;

impl Shard {
    /// `"2/3"` -> shard 2 of 3. Errors name `--shard` and what is allowed.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = |why: &str| format!("--shard `{s}`: {why} (K/N with 1 <= K <= N, e.g. 1/3)");
        let (k, n) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("not of the form K/N"))?;
        let k: u32 = k
            .trim()
            .parse()
            .map_err(|_| bad("K is not a whole number"))?;
        let n: u32 = n
            .trim()
            .parse()
            .map_err(|_| bad("N is not a whole number"))?;
        if n == 0 {
            return Err(bad("N must be at least 1"));
        }
        if n > MAX_SHARDS {
            return Err(bad(&format!("N must be at most {MAX_SHARDS}")));
        }
        if k == 0 || k > n {
            return Err(bad(&format!("K must be 1 to {n}")));
        }
        Ok(Shard { index: k, count: n })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// FNV-1a 64 of the plan as JSON: equal for equal plans, whatever produced
/// them (a scenario file, flags, or both).
pub fn plan_digest(plan: &Plan) -> String {
    // JSON objects need string keys: the baselines' tuple keys go as lists.
    let b = &plan.baselines;
    let view = serde_json::json!({
        "jobs": plan.jobs,
        "calibration": b.calibration.iter().collect::<Vec<_>>(),
        "solo": b.solo.iter().collect::<Vec<_>>(),
        "same_cc": b.same_cc.iter().collect::<Vec<_>>(),
    });
    let json = view.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Shard (1-based) of every non-calibration job: longest first to the least
/// loaded shard.
fn assignment(plan: &Plan, count: u32) -> BTreeMap<usize, u32> {
    let mut jobs: Vec<&Job> = plan
        .jobs
        .iter()
        .filter(|j| j.kind != JobKind::Calibration)
        .collect();
    // Stable: plan order among equally long jobs.
    jobs.sort_by(|a, b| b.expected_secs().total_cmp(&a.expected_secs()));
    let mut load = vec![0.0f64; count as usize];
    let mut out = BTreeMap::new();
    for j in jobs {
        let (k, _) = load
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(&b.0)))
            .unwrap_or((0, &0.0));
        load[k] += j.expected_secs();
        out.insert(j.id, k as u32 + 1);
    }
    out
}

/// The job ids shard `shard` runs, in plan order: its share of the main
/// and baseline runs, and the calibration of every link they are on.
pub fn select(plan: &Plan, shard: Shard) -> Vec<usize> {
    let assigned = assignment(plan, shard.count);
    let mine: Vec<usize> = assigned
        .iter()
        .filter(|(_, &k)| k == shard.index)
        .map(|(&id, _)| id)
        .collect();
    let calibrations: std::collections::BTreeSet<usize> = mine
        .iter()
        .flat_map(|&id| {
            let li = plan.jobs[id].link_index;
            [
                plan.baselines.calibration.get(&li).copied(),
                plan.baselines.paced_calibration.get(&li).copied(),
            ]
        })
        .flatten()
        .collect();
    let mut ids: Vec<usize> = mine.into_iter().chain(calibrations).collect();
    ids.sort_unstable();
    ids
}

/// `records.json` of a shard's run directory.
pub fn write_records(
    dir: &Path,
    plan: &Plan,
    shard: Shard,
    records: &[JobRecord],
) -> Result<(), RunDirError> {
    Records::new(plan_digest(plan), shard, records).write(dir)
}

/// Why a set of shard directories cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{dir}: {what}")]
    Read { dir: PathBuf, what: String },
    #[error(
        "{dir}: not a shard directory (no shard in {}: made without --shard K/N)",
        run_dir::METADATA
    )]
    NotAShard { dir: PathBuf },
    #[error("shards of different {what}: {a} has `{va}`, {b} has `{vb}`")]
    Mismatch {
        what: &'static str,
        a: PathBuf,
        va: String,
        b: PathBuf,
        vb: String,
    },
    #[error("shard {index}/{count} given twice: {a} and {b}")]
    Duplicate {
        index: u32,
        count: u32,
        a: PathBuf,
        b: PathBuf,
    },
    #[error("incomplete shard set: shard(s) {missing} of {count} missing")]
    Missing { missing: String, count: u32 },
    #[error("{dir}: shard {shard} did not complete (status `{status}`); run it again")]
    NotComplete {
        dir: PathBuf,
        shard: Shard,
        status: String,
    },
    #[error("{dir}: {what}")]
    Records { dir: PathBuf, what: String },
    #[error("the shards ran {got} of the plan's {planned} runs; missing run(s) {missing}")]
    RunsMissing {
        got: usize,
        planned: usize,
        missing: String,
    },
    #[error("--out {0}: exists and is not empty; merge into a new directory")]
    OutExists(PathBuf),
    #[error("no shard directories given")]
    Empty,
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error(transparent)]
    Lab(#[from] crate::LabError),
}

/// One shard directory, read and checked on its own.
pub struct ShardDir {
    pub dir: PathBuf,
    pub shard: ShardMeta,
    pub meta: Metadata,
    pub scenario: Scenario,
    records: Records,
}

fn read_shard(dir: &Path) -> Result<ShardDir, MergeError> {
    let meta = Metadata::read(dir)?;
    let shard = meta.shard.clone().ok_or_else(|| MergeError::NotAShard {
        dir: dir.to_path_buf(),
    })?;
    let text =
        std::fs::read_to_string(dir.join(run_dir::SCENARIO)).map_err(|e| MergeError::Read {
            dir: dir.to_path_buf(),
            what: format!("reading {}: {e}", run_dir::SCENARIO),
        })?;
    let scenario = Scenario::from_toml(&text).map_err(|e| MergeError::Read {
        dir: dir.to_path_buf(),
        what: format!("{}: {e}", run_dir::SCENARIO),
    })?;
    let records = Records::read(dir)?;
    Ok(ShardDir {
        dir: dir.to_path_buf(),
        shard,
        meta,
        scenario,
        records,
    })
}

/// What two shards must agree on, read from a shard.
type KeyOf = fn(&ShardDir) -> String;

/// Read `dirs`, check they are one complete set of one plan, and return
/// them with the plan and every planned run's record, in plan order.
pub fn gather(dirs: &[PathBuf]) -> Result<(Vec<ShardDir>, Plan, Vec<JobRecord>), MergeError> {
    let shards: Vec<ShardDir> = dirs
        .iter()
        .map(|d| read_shard(d))
        .collect::<Result<_, _>>()?;
    let first = shards.first().ok_or(MergeError::Empty)?;
    // Same scenario, plan, ccctl version and commit, shard count.
    let keys: [(&'static str, KeyOf); 5] = [
        ("scenarios", |s| s.meta.scenario.clone()),
        ("plans (plan_digest)", |s| s.meta.plan_digest.clone()),
        ("ccctl versions", |s| s.meta.ccctl_version.clone()),
        ("ccctl commits", |s| s.meta.git_commit.clone()),
        ("shard counts (N of K/N)", |s| s.shard.count.to_string()),
    ];
    for s in &shards[1..] {
        for (what, key) in &keys {
            let (va, vb) = (key(first), key(s));
            if va != vb {
                return Err(MergeError::Mismatch {
                    what,
                    a: first.dir.clone(),
                    va,
                    b: s.dir.clone(),
                    vb,
                });
            }
        }
    }
    let count = first.shard.count;
    let mut seen: BTreeMap<u32, &ShardDir> = BTreeMap::new();
    for s in &shards {
        if let Some(prev) = seen.insert(s.shard.index, s) {
            return Err(MergeError::Duplicate {
                index: s.shard.index,
                count,
                a: prev.dir.clone(),
                b: s.dir.clone(),
            });
        }
    }
    let missing: Vec<String> = (1..=count)
        .filter(|k| !seen.contains_key(k))
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing {
            missing: missing.join(", "),
            count,
        });
    }
    for s in &shards {
        if !s.meta.is_complete() {
            return Err(MergeError::NotComplete {
                dir: s.dir.clone(),
                shard: s.shard.shard(),
                status: s.meta.status.clone(),
            });
        }
    }
    // The plan again, from the scenario as run: it must be the one the
    // shards ran (a scenario.toml edited afterwards is caught here).
    let plan = crate::plan::plan(&first.scenario);
    let digest = plan_digest(&plan);
    for s in &shards {
        if s.records.plan_digest != digest || s.meta.plan_digest != digest {
            return Err(MergeError::Records {
                dir: s.dir.clone(),
                what: format!(
                    "recorded plan digest {} is not {digest}, the digest of the plan of its scenario.toml",
                    s.records.plan_digest
                ),
            });
        }
        if s.records.shard != s.shard.shard() {
            return Err(MergeError::Records {
                dir: s.dir.clone(),
                what: format!(
                    "{} is of shard {}, {} of shard {}",
                    run_dir::RECORDS,
                    s.records.shard,
                    run_dir::METADATA,
                    s.shard.shard()
                ),
            });
        }
    }

    // Every planned run once; calibrations once per shard that needed them
    // (the lowest reference goodput kept).
    let mut chosen: BTreeMap<usize, (JobRecord, Option<f64>)> = BTreeMap::new();
    for s in &shards {
        let expected = select(&plan, s.shard.shard());
        let got: Vec<usize> = s.records.records.iter().map(|r| r.run_id).collect();
        if got != expected {
            return Err(MergeError::Records {
                dir: s.dir.clone(),
                what: format!(
                    "shard {} ran runs {got:?}; the plan gives it {expected:?}",
                    s.shard.shard()
                ),
            });
        }
        for r in &s.records.records {
            let rec = restore(&plan, s, r)?;
            let reference = (rec.job.kind == JobKind::Calibration)
                .then(|| {
                    rec.flows.first().and_then(|f| {
                        crate::analyze::flow_metrics(f, rec.job.warmup.as_secs_f64()).goodput_bps
                    })
                })
                .flatten();
            match chosen.get(&r.run_id) {
                None => {
                    chosen.insert(r.run_id, (rec, reference));
                }
                Some((_, prev)) if rec.job.kind == JobKind::Calibration => {
                    // A missing figure (a failed reference) counts as lowest.
                    let lower = match (reference, prev) {
                        (None, _) => true,
                        (Some(_), None) => false,
                        (Some(a), Some(b)) => a < *b,
                    };
                    if lower {
                        chosen.insert(r.run_id, (rec, reference));
                    }
                }
                Some(_) => {
                    return Err(MergeError::Records {
                        dir: s.dir.clone(),
                        what: format!("run {} is in more than one shard", r.run_id),
                    })
                }
            }
        }
    }
    let missing: Vec<String> = plan
        .jobs
        .iter()
        .filter(|j| !chosen.contains_key(&j.id))
        .map(|j| j.id.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::RunsMissing {
            got: chosen.len(),
            planned: plan.jobs.len(),
            missing: missing.join(", "),
        });
    }
    let records = chosen.into_values().map(|(r, _)| r).collect();
    Ok((shards, plan, records))
}

/// A stored record as the [`JobRecord`] of its planned job.
fn restore(plan: &Plan, s: &ShardDir, r: &RunRecord) -> Result<JobRecord, MergeError> {
    let bad = |what: String| MergeError::Records {
        dir: s.dir.clone(),
        what,
    };
    let job = plan
        .jobs
        .get(r.run_id)
        .ok_or_else(|| bad(format!("run {} is not in the plan", r.run_id)))?
        .clone();
    if job.flows.len() != r.flows.len() {
        return Err(bad(format!(
            "run {} has {} flows; the plan has {}",
            r.run_id,
            r.flows.len(),
            job.flows.len()
        )));
    }
    Ok(r.to_job_record(job, &s.dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(extra: &str) -> Plan {
        let sc = Scenario::from_toml(&format!(
            "name = \"t\"\nduration = \"20s\"\n{extra}\n[link]\nrate = \"20mbit\"\nrtt = \"40ms\"\nbuffer = \"1bdp\"\n"
        ))
        .expect("valid scenario");
        crate::plan::plan(&sc)
    }

    #[test]
    fn bad_shards_are_refused_naming_the_flag() {
        for s in [
            "0/3", "4/3", "1/0", "x", "1/", "/3", "-1/3", "1/3/2", "1.5/3", "1/10001",
        ] {
            let e = Shard::parse(s).expect_err(s);
            assert!(e.starts_with("--shard"), "{s}: {e}");
        }
        assert_eq!(Shard::parse(" 2/3 "), Ok(Shard { index: 2, count: 3 }));
        assert_eq!(Shard::parse("1/1"), Ok(Shard { index: 1, count: 1 }));
    }

    #[test]
    fn shards_cover_the_plan_once_with_calibration_in_each() {
        let plan = plan_of(
            "repetitions = 3\n[sweep]\nflows = [\"cubic:1, reno:1\", \"bbr:1, cubic:1\"]\nbuffer = [\"0.5bdp\", \"2bdp\"]\nrate = [\"10mbit\", \"20mbit\"]",
        );
        for n in [1u32, 2, 3, 7, 200] {
            let mut count = vec![0usize; plan.jobs.len()];
            for k in 1..=n {
                let ids = select(&plan, Shard { index: k, count: n });
                for &id in &ids {
                    count[id] += 1;
                    // A shard's runs have their link's calibration with them.
                    let li = plan.jobs[id].link_index;
                    for cal in [
                        plan.baselines.calibration[&li],
                        plan.baselines.paced_calibration[&li],
                    ] {
                        assert!(ids.contains(&cal), "shard {k}/{n}: run {id} without {cal}");
                    }
                }
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "plan order");
                // Deterministic.
                assert_eq!(ids, select(&plan, Shard { index: k, count: n }));
            }
            for (id, c) in count.iter().enumerate() {
                if plan.jobs[id].kind == JobKind::Calibration {
                    assert!(*c >= 1 && *c <= n as usize, "calibration {id}: {c}");
                } else {
                    assert_eq!(*c, 1, "run {id} ran {c} times over {n} shards");
                }
            }
        }
        // Balanced: no shard has more than the longest job above the mean.
        let n = 3;
        let loads: Vec<f64> = (1..=n)
            .map(|k| {
                select(&plan, Shard { index: k, count: n })
                    .iter()
                    .filter(|&&id| plan.jobs[id].kind != JobKind::Calibration)
                    .map(|&id| plan.jobs[id].expected_secs())
                    .sum()
            })
            .collect();
        let longest = plan
            .jobs
            .iter()
            .map(|j| j.expected_secs())
            .fold(0.0, f64::max);
        let mean = loads.iter().sum::<f64>() / n as f64;
        assert!(loads.iter().all(|&l| l <= mean + longest), "{loads:?}");
    }

    #[test]
    fn digest_follows_the_plan() {
        let a = plan_of("flows = \"cubic:1, bbr:1\"");
        assert_eq!(
            plan_digest(&a),
            plan_digest(&plan_of("flows = \"cubic:1, bbr:1\""))
        );
        assert_ne!(
            plan_digest(&a),
            plan_digest(&plan_of("flows = \"cubic:1, reno:1\""))
        );
        assert_ne!(
            plan_digest(&a),
            plan_digest(&plan_of("flows = \"cubic:1, bbr:1\"\nrepetitions = 2"))
        );
    }
}
