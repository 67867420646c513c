//! `ccctl daemon`'s configuration file (TOML), validated before anything is
//! loaded, tuned or traced; on SIGHUP the new file is validated the same way
//! and an invalid one is refused while the old configuration stays in force.
//!
//! ```toml
//! on_exit = "unload"          # or "leave": what SIGTERM does to the algorithms
//! audit = "/var/lib/ccctl/audit.jsonl"  # the policy's audit log ($CCCTL_AUDIT wins)
//!
//! [[algorithms]]
//! name = "bpf-bbr"                # ccctl user or kernel name
//! default = false             # make it net.ipv4.tcp_congestion_control
//! params = { cwnd_gain = 2.0, probe_up_gain = 1.25 }
//!                             # modest-bbr also: w_min, w_max, s_min (or wmin,
//!                             # wmax, smin); dstar has min_rtt_win_ms,
//!                             # sigma_factor, gain_floor, drain_rtts,
//!                             # gain1_rtts, gain2_rtts (and no BBR gains);
//!                             # unlisted ones are at their defaults
//!
//! [trace]                     # optional: per-ACK traces to rotating Parquet files
//! out_dir = "/var/lib/ccctl/traces"
//! algo = ["bpf-bbr"]              # default: every algorithm
//! port = 0                    # local or remote port; 0 = any
//! local = "198.18.0.0/15"      # optional: local end, as `ccctl trace --local`
//! remote = "[fd00:ccc::2]:5201" # optional: remote end (IPv4 or IPv6, /LEN a prefix)
//! sample = 1                  # every Nth ACK
//! per_rtt = false             # at most one event per round trip
//! rotate_size = "256MB"       # start a new file after this many bytes ...
//! rotate_time = "1h"          # ... or this long, whichever comes first
//! layout = "flat"             # or "hive": host=<h>/date=<d>/hour=<HH>/*.parquet
//! host = "web-1"              # hive: the host name (default: this machine's)
//!
//! [metrics]                   # optional: Prometheus text endpoint, off by default
//! listen = "127.0.0.1:9560"   # address:port to serve GET /metrics on
//! ```
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use ccctl_core::params;
use ccctl_core::registry;
use ccctl_core::trace::Endpoint;
use ccctl_core::units::HumanDuration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExit {
    #[default]
    Unload,
    Leave,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgoConfig {
    pub name: String,
    #[serde(default)]
    pub default: bool,
    #[serde(default)]
    pub params: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    pub out_dir: PathBuf,
    #[serde(default)]
    pub algo: Vec<String>,
    #[serde(default)]
    pub port: u16,
    /// Local end, written as `ccctl trace --local` takes it.
    #[serde(default)]
    pub local: Option<String>,
    /// Remote end, written as `ccctl trace --remote` takes it.
    #[serde(default)]
    pub remote: Option<String>,
    #[serde(default = "one")]
    pub sample: u32,
    #[serde(default)]
    pub per_rtt: bool,
    #[serde(default = "default_rotate_size")]
    pub rotate_size: String,
    #[serde(default = "default_rotate_time")]
    pub rotate_time: HumanDuration,
    #[serde(default)]
    pub layout: TraceLayout,
    /// Host name in the Hive layout's path and `host` column; default: the
    /// machine's (`uname -n`). Two daemons on one machine (tests) set it.
    #[serde(default)]
    pub host: Option<String>,
}

/// How the daemon's trace files are laid out under `out_dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceLayout {
    /// `out_dir/trace-<unix s>-<n>.parquet` (what a single machine's
    /// collector globbing `out_dir/*.parquet` expects).
    #[default]
    Flat,
    /// `out_dir/host=<host>/date=<YYYY-MM-DD>/hour=<HH>/trace-….parquet`,
    /// `host` also a column: a fleet's trees read as one table.
    Hive,
}

/// `[metrics]`: the Prometheus endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `address:port`, e.g. `127.0.0.1:9560` or `[::1]:9560`.
    pub listen: String,
}

impl MetricsConfig {
    /// The validated socket address.
    pub fn addr(&self) -> Result<std::net::SocketAddr, String> {
        parse_listen(&self.listen)
    }
}

/// `metrics.listen`: an IP address and a port (1-65535); host names are
/// refused (a daemon must not depend on name resolution to start).
pub fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    let addr: std::net::SocketAddr = s.trim().parse().map_err(|_| {
        format!(
            "`{s}` is not an address:port like 127.0.0.1:9560 or [::1]:9560 (an IP address, not a host name)"
        )
    })?;
    if addr.port() == 0 {
        return Err(format!("`{s}`: the port must be 1 to 65535"));
    }
    Ok(addr)
}

/// A host name usable as a Hive partition value and a file-path component.
pub fn check_host(h: &str) -> Result<(), String> {
    let ok = !h.is_empty()
        && h.len() <= 253
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        && !h.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{h}` is not a host name (1-253 of a-z, A-Z, 0-9, '-', '.', '_', not starting with '.')"
        ))
    }
}

impl TraceConfig {
    /// `local`, parsed; the error names `trace.local`.
    pub fn local_endpoint(&self) -> Result<Option<Endpoint>, String> {
        endpoint("trace.local", self.local.as_deref())
    }

    /// `remote`, parsed; the error names `trace.remote`.
    pub fn remote_endpoint(&self) -> Result<Option<Endpoint>, String> {
        endpoint("trace.remote", self.remote.as_deref())
    }
}

fn endpoint(field: &str, text: Option<&str>) -> Result<Option<Endpoint>, String> {
    text.map(|t| Endpoint::parse(t).map_err(|e| format!("{field}: {e}")))
        .transpose()
}

fn one() -> u32 {
    1
}
fn default_rotate_size() -> String {
    "256MB".into()
}
fn default_rotate_time() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(3600))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    #[serde(default)]
    pub on_exit: OnExit,
    #[serde(default)]
    pub algorithms: Vec<AlgoConfig>,
    #[serde(default)]
    pub trace: Option<TraceConfig>,
    #[serde(default)]
    pub metrics: Option<MetricsConfig>,
    /// Rollout policy rules (`[[rule]]`, as in a `ccctl policy apply`
    /// file; see `ccctl_core::policy`): applied at start and on SIGHUP.
    #[serde(default, rename = "rule")]
    pub rules: Vec<ccctl_core::policy::RuleSpec>,
    /// The audit log of policy changes (default /var/lib/ccctl/audit.jsonl;
    /// `$CCCTL_AUDIT` wins over this).
    #[serde(default)]
    pub audit: Option<PathBuf>,
}

/// Smallest rotation size: below it files would be mostly footer.
const MIN_ROTATE_BYTES: u64 = 1 << 20;

/// `"256MB"`, `"64MiB"`, `"1GB"`, `"1048576"` -> bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 256MB"))?;
    let mult = match unit.trim() {
        "" | "B" => 1.0,
        "kB" | "KB" => 1e3,
        "KiB" => 1024.0,
        "MB" => 1e6,
        "MiB" => 1024.0 * 1024.0,
        "GB" => 1e9,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "unknown size unit `{u}` in `{s}` (B, kB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let bytes = v * mult;
    // A rotation size past 1 TiB is a typo (and past 2^64 it would saturate).
    if !bytes.is_finite() || bytes > MAX_SIZE_BYTES {
        return Err(format!("`{s}` is above the 1 TiB maximum"));
    }
    Ok(bytes as u64)
}

/// Largest size [`parse_size`] takes: 1 TiB.
const MAX_SIZE_BYTES: f64 = (1u64 << 40) as f64;

impl DaemonConfig {
    /// Parse and validate; errors name the field.
    pub fn from_toml(text: &str) -> Result<DaemonConfig, String> {
        let cfg: DaemonConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), String> {
        let mut defaults = 0;
        for (i, a) in self.algorithms.iter().enumerate() {
            let algo = registry::find(&a.name).map_err(|e| format!("algorithms[{i}].name: {e}"))?;
            if self.algorithms[..i]
                .iter()
                .any(|b| registry::find(&b.name).is_ok_and(|b| b.name == algo.name))
            {
                return Err(format!(
                    "algorithms[{i}].name: `{}` is listed twice",
                    a.name
                ));
            }
            if a.default {
                defaults += 1;
            }
            params::validate(algo, &a.params, &ccctl_core::abi::ccctl_params::default())
                .map_err(|e| format!("algorithms[{i}].params: {e}"))?;
        }
        if defaults > 1 {
            return Err("algorithms: at most one may set `default = true`".into());
        }
        if let Some(t) = &self.trace {
            for (i, a) in t.algo.iter().enumerate() {
                registry::find(a).map_err(|e| format!("trace.algo[{i}]: {e}"))?;
            }
            if t.sample == 0 {
                return Err("trace.sample: must be at least 1 (1 = every ACK)".into());
            }
            t.local_endpoint()?;
            t.remote_endpoint()?;
            let size = parse_size(&t.rotate_size).map_err(|e| format!("trace.rotate_size: {e}"))?;
            if size < MIN_ROTATE_BYTES {
                return Err(format!(
                    "trace.rotate_size: {} is below the 1 MiB minimum",
                    t.rotate_size
                ));
            }
            if t.rotate_time.0 < std::time::Duration::from_secs(1) {
                return Err("trace.rotate_time: must be at least 1s".into());
            }
            if t.out_dir.as_os_str().is_empty() {
                return Err("trace.out_dir: must name a directory".into());
            }
            if let Some(h) = &t.host {
                check_host(h).map_err(|e| format!("trace.host: {e}"))?;
                if t.layout != TraceLayout::Hive {
                    return Err("trace.host: only used with layout = \"hive\"".into());
                }
            }
        }
        if let Some(m) = &self.metrics {
            m.addr().map_err(|e| format!("metrics.listen: {e}"))?;
        }
        if let Some(a) = &self.audit {
            if a.as_os_str().is_empty() || a.is_dir() {
                return Err(format!(
                    "audit: `{}` must name a file (the audit log, appended to)",
                    a.display()
                ));
            }
        }
        self.policy()?;
        Ok(())
    }

    /// The `[[rule]]` tables, validated against this machine (cgroups,
    /// namespaces, the kernel's algorithms); errors name `rule[i].field`.
    pub fn policy(&self) -> Result<ccctl_core::policy::Policy, String> {
        ccctl_core::policy::PolicyFile {
            rules: self.rules.clone(),
        }
        .validate(&ccctl_core::policy::kernel::HostEnv)
        .map_err(|e| e.to_string())
    }

    pub fn rotate_bytes(&self) -> u64 {
        self.trace
            .as_ref()
            .and_then(|t| parse_size(&t.rotate_size).ok())
            .unwrap_or(256_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_is_valid() {
        let text = include_str!("../../../../examples/daemon.toml");
        let cfg = DaemonConfig::from_toml(text).expect("the shipped example is valid");
        assert_eq!(cfg.algorithms[0].name, "bpf-bbr");
        assert!(cfg.trace.is_some());
    }

    #[test]
    fn fleet_example_config_is_valid() {
        let text = include_str!("../../../../examples/fleet/daemon.toml");
        let cfg = DaemonConfig::from_toml(text).expect("the fleet example is valid");
        assert!(cfg.metrics.is_some());
        assert_eq!(cfg.trace.map(|t| t.layout), Some(TraceLayout::Hive));
    }

    #[test]
    fn bad_configs_name_the_field() {
        let cases = [
            ("[[algorithms]]\nname = \"nosuch\"", "algorithms[0].name"),
            (
                "[[algorithms]]\nname = \"bpf-bbr\"\nparams = { cwnd_gain = 9.0 }",
                "cwnd_gain",
            ),
            (
                "[[algorithms]]\nname = \"bpf-bbr\"\nparams = { wmin = 0.5 }",
                "not a parameter of bpf-bbr",
            ),
            (
                "[[algorithms]]\nname = \"bpf-bbr\"\n[[algorithms]]\nname = \"bpf_bbr\"",
                "listed twice",
            ),
            ("on_exit = \"explode\"", "on_exit"),
            ("bogus = 1", "unknown field `bogus`"),
            ("[trace]\nout_dir = \"/tmp/x\"\nsample = 0", "trace.sample"),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nrotate_size = \"10kB\"",
                "trace.rotate_size",
            ),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nalgo = [\"nosuch\"]",
                "trace.algo[0]",
            ),
            ("[trace]\nout_dir = \"/tmp/x\"\nlayout = \"tree\"", "layout"),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nlayout = \"hive\"\nhost = \"a/b\"",
                "trace.host",
            ),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nhost = \"a\"",
                "trace.host: only used with layout",
            ),
            ("[metrics]\nlisten = \"localhost:9560\"", "metrics.listen"),
            ("[metrics]\nlisten = \"127.0.0.1\"", "metrics.listen"),
            ("[metrics]\nlisten = \"127.0.0.1:0\"", "metrics.listen"),
            ("[metrics]\nlisten = \"127.0.0.1:65536\"", "metrics.listen"),
            ("[metrics]\nlisten = \"300.0.0.1:9560\"", "metrics.listen"),
            ("[metrics]\nlisten = 9560", "line 2"),
            ("[metrics]\nport = 9560", "unknown field `port`"),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nremote = \"fd00:ccc::/129\"",
                "trace.remote: `fd00:ccc::/129`: prefix length `129`: an IPv6 prefix length is 0 to 128",
            ),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nlocal = \"[fd00::1]:0\"",
                "trace.local: `[fd00::1]:0`: port `0`",
            ),
            (
                "[trace]\nout_dir = \"/tmp/x\"\nlocal = \"fd00::zz\"",
                "trace.local: `fd00::zz`: `fd00::zz` is not an IPv4 or IPv6 address",
            ),
            ("[trace]\nout_dir = \"/tmp/x\"\nremote = 5", "remote"),
            (
                "[[rule]]\nname = \"a\"\nalgorithm = \"bpf-bbr\"\nshare = 0",
                "rule[0].share: 0 is outside (0, 1]",
            ),
            (
                "[[rule]]\nname = \"a\"\nalgorithm = \"nosuch\"",
                "rule[0].algorithm: unknown algorithm",
            ),
            (
                "[[rule]]\nname = \"a\"\nalgorithm = \"bpf-bbr\"\nmatch = { remote_port = 0 }",
                "rule[0].match.remote_port",
            ),
        ];
        for (text, needle) in cases {
            let e = DaemonConfig::from_toml(text).expect_err(text);
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn modest_bbr_params_by_name_or_flag_and_checked_as_a_set() {
        let ok = "[[algorithms]]\nname = \"modest-bbr\"\nparams = { w_min = 0.6, wmax = 0.9, s_min = 2, cwnd_gain = 2.5 }";
        DaemonConfig::from_toml(ok).expect("valid modest-bbr params");
        let cases = [
            (
                "params = { w_min = 0.9, w_max = 0.8 }",
                "w_min 0.9 must be below w_max 0.8",
            ),
            // Unlisted parameters are at their defaults: w_min 0.75.
            (
                "params = { w_max = 0.7 }",
                "w_min 0.75 must be below w_max 0.7",
            ),
            ("params = { s_min = 1.5 }", "whole number"),
            ("params = { s_min = 65 }", "1 to 64"),
            ("params = { theta = 1.0 }", "valid: cwnd_gain (--cwnd-gain)"),
        ];
        for (params, needle) in cases {
            let text = format!("[[algorithms]]\nname = \"modest-bbr\"\n{params}");
            let e = DaemonConfig::from_toml(&text).expect_err(params);
            assert!(
                e.contains("algorithms[0].params") && e.contains(needle),
                "{params}: {e}"
            );
        }
    }

    #[test]
    fn dstar_params_by_name_or_flag() {
        let ok = "[[algorithms]]\nname = \"dstar\"\nparams = { min_rtt_win_ms = 500, sigma-factor = 1.5, gain_floor = 2, drain_rtts = 3, gain1_rtts = 2, gain2_rtts = 1 }";
        DaemonConfig::from_toml(ok).expect("valid dstar params");
        let cases = [
            ("params = { min_rtt_win_ms = 5 }", "10 to 600000"),
            ("params = { gain_floor = 2.5 }", "whole number"),
            ("params = { sigma_factor = 9 }", "0 to 8"),
            ("params = { cwnd_gain = 2.0 }", "not a parameter of dstar"),
        ];
        for (params, needle) in cases {
            let text = format!("[[algorithms]]\nname = \"dstar\"\n{params}");
            let e = DaemonConfig::from_toml(&text).expect_err(params);
            assert!(
                e.contains("algorithms[0].params") && e.contains(needle),
                "{params}: {e}"
            );
        }
    }

    #[test]
    fn metrics_and_hive_layout_parse() {
        let cfg = DaemonConfig::from_toml(
            "[trace]\nout_dir = \"/tmp/x\"\nlayout = \"hive\"\nhost = \"web-1.example\"\n[metrics]\nlisten = \"[::1]:9560\"",
        )
        .expect("valid");
        assert_eq!(
            cfg.metrics.as_ref().and_then(|m| m.addr().ok()),
            Some("[::1]:9560".parse().expect("addr"))
        );
        let t = cfg.trace.expect("trace");
        assert_eq!(t.layout, TraceLayout::Hive);
        assert_eq!(t.host.as_deref(), Some("web-1.example"));
        // Off by default; flat by default.
        let cfg = DaemonConfig::from_toml("[trace]\nout_dir = \"/tmp/x\"").expect("valid");
        assert!(cfg.metrics.is_none());
        assert_eq!(cfg.trace.map(|t| t.layout), Some(TraceLayout::Flat));
    }

    #[test]
    fn trace_filters_of_both_families() {
        let text = "[trace]\nout_dir = \"/tmp/x\"\nlocal = \"198.18.0.0/15\"\nremote = \"[fd00:ccc::2]:5201\"";
        let cfg = DaemonConfig::from_toml(text).expect("valid");
        let t = cfg.trace.expect("trace");
        let l = t.local_endpoint().unwrap().expect("local");
        let r = t.remote_endpoint().unwrap().expect("remote");
        assert_eq!(
            (l.addr, l.prefix, l.port),
            (Some("198.18.0.0".parse().unwrap()), Some(15), None)
        );
        assert_eq!(
            (r.addr, r.prefix, r.port),
            (Some("fd00:ccc::2".parse().unwrap()), None, Some(5201))
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MB"), Ok(256_000_000));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert!(parse_size("12 parsecs").is_err());
    }
}

/// Issue 14: the daemon's config parser fed the shipped example mutated a
/// line at a time, and arbitrary text: no panic; a refusal names a field
/// (`algorithms[0].params`, `trace.rotate_size`, a TOML key or line); an
/// accepted config holds only what validation promises. Cases:
/// `CCCTL_FUZZ_CASES` (default 5,000).
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: ccctl_core::fuzz::cases(5_000),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    const EXAMPLE: &str = include_str!("../../../../examples/daemon.toml");
    /// The fleet agent's config: `[metrics]`, the Hive layout, a host name.
    const FLEET: &str = include_str!("../../../../examples/fleet/daemon.toml");
    const HOSTILE: &[&str] = &[
        "\"\"",
        "0",
        "-1",
        "nan",
        "inf",
        "1e999",
        "\"nosuch\"",
        "\"modest-bbr\"",
        "true",
        "[]",
        "{}",
        "{ cwnd_gain = nan }",
        "{ cwnd_gain = 1e9 }",
        "{ w_min = 0.9, w_max = 0.5 }",
        "\"0B\"",
        "\"99999999999999999999GB\"",
        "\"1e3MB\"",
        "\"-5MB\"",
        "\"1ms\"",
        "\"0s\"",
        "\"leave\"",
        "\"explode\"",
        "[\"bbr\", \"bbr\"]",
        "65536",
        "4294967296",
        "\"127.0.0.1:0\"",
        "\"localhost:9560\"",
        "\"[::1]:9560\"",
        "\"0.0.0.0:65535\"",
        "\"1.2.3.4:99999\"",
        "\"hive\"",
        "\"flat\"",
        "\"../etc\"",
        "\"host=a\"",
        "\"fd00:ccc::1\"",
        "\"[fd00:ccc::2]:5201\"",
        "\"fd00:ccc::/129\"",
        "\"198.18.0.0/33\"",
        "\"[198.18.0.1]:80\"",
        "\"::/0\"",
        "\"[fd00::1]:0\"",
    ];

    fn mutate(base: &str, line: usize, kind: u8, token: usize, junk: &str) -> String {
        // Uncomment the commented-out examples too, so they are mutated as well.
        let mut lines: Vec<String> = base
            .lines()
            .map(|l| {
                l.strip_prefix("# [[")
                    .map_or(l.to_string(), |r| format!("[[{r}"))
            })
            .map(|l| {
                if l.starts_with("# name")
                    || l.starts_with("# params")
                    || l.starts_with("# local")
                    || l.starts_with("# remote")
                {
                    l[2..].to_string()
                } else {
                    l
                }
            })
            .collect();
        let i = line % lines.len();
        match kind % 4 {
            0 | 1 => {
                let v = HOSTILE[token % HOSTILE.len()];
                lines[i] = match lines[i].split_once('=') {
                    Some((k, _)) if !lines[i].trim_start().starts_with('#') => format!("{k}= {v}"),
                    _ => format!("{junk} = {v}"),
                };
            }
            2 => {
                lines.remove(i);
            }
            _ => lines[i] = junk.to_string(),
        }
        lines.join("\n")
    }

    fn check(text: &str) -> Result<(), TestCaseError> {
        match DaemonConfig::from_toml(text) {
            Ok(cfg) => {
                prop_assert!(cfg.algorithms.iter().filter(|a| a.default).count() <= 1);
                if let Some(t) = &cfg.trace {
                    prop_assert!(t.sample >= 1);
                    prop_assert!(cfg.rotate_bytes() >= MIN_ROTATE_BYTES, "{text}");
                    if let Some(h) = &t.host {
                        prop_assert!(t.layout == TraceLayout::Hive, "{text}");
                        prop_assert!(
                            !h.is_empty() && !h.contains('/') && !h.contains('='),
                            "{text}"
                        );
                    }
                }
                if let Some(m) = &cfg.metrics {
                    let addr = m.addr();
                    prop_assert!(addr.as_ref().is_ok_and(|a| a.port() != 0), "{text}");
                }
            }
            Err(e) => {
                // A TOML error quotes its line; ours name the field path.
                let named = e.contains("line")
                    || e.contains("algorithms")
                    || e.contains("trace")
                    || e.contains("on_exit")
                    || e.contains("metrics")
                    || e.starts_with("audit:")
                    || e.contains("rule[")
                    || e.contains("unknown field")
                    || e.contains("missing field");
                prop_assert!(named, "refusal names no field: {e}\n{text}");
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn mutated_configs_are_refused_by_field(line: usize, kind: u8, token: usize, junk in "\\PC{0,30}") {
            check(&mutate(EXAMPLE, line, kind, token, &junk))?;
        }

        #[test]
        fn mutated_fleet_configs_are_refused_by_field(line: usize, kind: u8, token: usize, junk in "\\PC{0,30}") {
            check(&mutate(FLEET, line, kind, token, &junk))?;
        }

        #[test]
        fn arbitrary_configs_are_refused_by_field(text in "\\PC{0,200}") {
            check(&text)?;
        }

        #[test]
        fn sizes_never_panic_and_stay_finite(s in "[ ]?[0-9.]{0,25}[ ]?(B|kB|KB|KiB|MB|MiB|GB|GiB|TB|x|)[ ]?") {
            if let Ok(b) = parse_size(&s) {
                prop_assert!(b <= 1 << 40, "{s:?} -> {b} bytes");
            }
        }
    }
}
