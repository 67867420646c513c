//! `ccctl trace`: per-ACK events of the loaded algorithms into Parquet,
//! CSV, or a live per-flow table.
use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use clap::{ArgGroup, Args};

use ccctl_core::trace::{self, Filter, TraceError, TraceOptions};
use ccctl_core::units::HumanDuration;
use ccctl_observe::trace_files::{self, Output};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("output").required(true).multiple(false).args(["out", "csv", "follow"])))]
pub struct TraceArgs {
    /// Trace only this algorithm (repeat for several; default: every loaded one).
    #[arg(long = "algo", value_name = "ALGO")]
    pub algos: Vec<String>,
    /// Only flows with this local or remote port.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Only flows with this local end: IPV4[/LEN][:PORT], IPV6[/LEN], [IPV6[/LEN]]:PORT or :PORT
    /// (with --remote: a 4-tuple). /LEN: a prefix; without it the address exactly.
    #[arg(long, value_name = "ADDR:PORT", value_parser = trace::Endpoint::parse)]
    pub local: Option<trace::Endpoint>,
    /// Only flows with this remote end, written as --local's (e.g. 198.18.0.2:5201, [fd00:ccc::2]:5201).
    #[arg(long, value_name = "ADDR:PORT", value_parser = trace::Endpoint::parse)]
    pub remote: Option<trace::Endpoint>,
    /// Only every Nth ACK of each flow.
    #[arg(long, value_name = "N")]
    pub sample: Option<u32>,
    /// At most one event per flow per round trip.
    #[arg(long)]
    pub per_rtt: bool,
    /// Stop after this long: seconds (`30`) or with a unit (`30s`, `1.5min`); default: at Ctrl-C.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| HumanDuration::parse_seconds_default(s).map_err(|e| e.to_string()))]
    pub duration: Option<HumanDuration>,
    /// Write events to this Parquet file (one row group per 65 536 events).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write events to this CSV file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Show a live per-flow table every second instead of writing a file.
    #[arg(long)]
    pub follow: bool,
    /// Tests: sleep this many ms after enabling tracing before consuming (overflows the ring).
    #[arg(long, hide = true, value_name = "MS")]
    pub stall_ms: Option<u64>,
}

impl TraceArgs {
    /// The session these flags ask for and where its events go, validated;
    /// nothing is touched yet.
    pub fn options(&self) -> Result<(TraceOptions, Output), TraceError> {
        let filter = Filter::new(&self.algos, self.port, self.sample, self.per_rtt)?
            .with_endpoints(self.local, self.remote);
        let output = match (&self.out, &self.csv, self.follow) {
            (Some(p), None, false) => Output::Parquet(p.clone()),
            (None, Some(p), false) => Output::Csv(p.clone()),
            (None, None, true) => Output::Follow,
            // clap's group normally catches these first.
            (None, None, false) => {
                return Err(TraceError::BadInput {
                    flag: "--out, --csv or --follow",
                    message: "say where events go: a Parquet file, a CSV file or a live table"
                        .into(),
                })
            }
            _ => {
                return Err(TraceError::BadInput {
                    flag: "--out, --csv, --follow",
                    message: "choose one of them".into(),
                })
            }
        };
        let duration = match self.duration {
            Some(HumanDuration(d)) if d.is_zero() => {
                return Err(TraceError::BadInput {
                    flag: "--duration",
                    message: "must be longer than 0, e.g. 30s".into(),
                })
            }
            Some(HumanDuration(d)) => Some(d),
            None => None,
        };
        let opts = TraceOptions {
            filter,
            duration,
            stall: self.stall_ms.map(Duration::from_millis),
            announce: true,
            stop: None,
        };
        Ok((opts, output))
    }
}

pub fn run(args: TraceArgs) -> Result<()> {
    let (opts, output) = args.options()?;
    let s = trace_files::run(opts, &output)?;
    eprintln!(
        "ccctl trace: {} events written, {} dropped, {} produced",
        s.events_written, s.events_dropped, s.events_produced
    );
    if s.events_dropped > 0 {
        eprintln!(
            "ccctl trace: the ring buffer overflowed; --sample N or --per-rtt trace fewer events"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<super::TraceArgs, String> {
        let mut argv = vec!["ccctl", "trace"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Trace(a),
                ..
            }) => Ok(a),
            Ok(_) => Err("not trace".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn output_is_required_and_exclusive() {
        let e = parse(&[]).unwrap_err();
        assert!(e.contains("--out") && e.contains("--follow"), "{e}");
        let e = parse(&["--out", "a.parquet", "--follow"]).unwrap_err();
        assert!(e.contains("--out") && e.contains("--follow"), "{e}");
        let a = parse(&[
            "--csv",
            "a.csv",
            "--algo",
            "bpf-bbr",
            "--algo",
            "dstar",
            "--duration",
            "2s",
        ])
        .unwrap();
        let (o, output) = a.options().unwrap();
        assert_eq!(output, super::Output::Csv("a.csv".into()));
        assert_eq!(o.filter.algos, ["bpf_bbr", "dstar"]);
        assert_eq!(o.duration, Some(std::time::Duration::from_secs(2)));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let opts = |args: &[&str]| parse(args).map(|a| a.options().map_err(|e| e.to_string()));
        let e = opts(&["--follow", "--algo", "cubic"]).unwrap().unwrap_err();
        assert!(e.starts_with("--algo: unknown algorithm `cubic`"), "{e}");
        let e = opts(&["--follow", "--sample", "0"]).unwrap().unwrap_err();
        assert!(e.starts_with("--sample:"), "{e}");
        let e = opts(&["--follow", "--duration", "0s"])
            .unwrap()
            .unwrap_err();
        assert!(e.starts_with("--duration:"), "{e}");
        let (o, _) = parse(&["--follow", "--duration", "6"])
            .unwrap()
            .options()
            .unwrap();
        assert_eq!(o.duration, Some(std::time::Duration::from_secs(6)));
        let e = opts(&["--follow", "--duration", "0"]).unwrap().unwrap_err();
        assert!(e.starts_with("--duration:"), "{e}");
        let e = parse(&["--follow", "--duration", "soon"]).unwrap_err();
        assert!(e.contains("--duration"), "{e}");
        let e = parse(&["--follow", "--port", "70000"]).unwrap_err();
        assert!(e.contains("--port"), "{e}");
        let e = parse(&["--follow", "--remote", "fd00:ccc::/129"]).unwrap_err();
        assert!(
            e.contains("--remote") && e.contains("an IPv6 prefix length is 0 to 128"),
            "{e}"
        );
        let e = parse(&["--follow", "--local", "[198.18.0.1]:80"]).unwrap_err();
        assert!(
            e.contains("--local") && e.contains("brackets are for IPv6"),
            "{e}"
        );
        let (o, _) = parse(&[
            "--follow",
            "--local",
            "fd00:ccc::/48",
            "--remote",
            "[fd00:ccc::2]:5201",
        ])
        .unwrap()
        .options()
        .unwrap();
        let cfg = o.filter.cfg(1);
        assert_eq!(
            (cfg.saddr_prefix, cfg.daddr_prefix, cfg.dport),
            (48, 128, 5201)
        );
        let a = parse(&["--follow", "--stall-ms", "500", "--per-rtt"]).unwrap();
        let (o, _) = a.options().unwrap();
        assert_eq!(o.stall, Some(std::time::Duration::from_millis(500)));
        assert!(o.filter.once_per_rtt);
    }
}

/// Issue 14: `ccctl trace`'s flags (filters, sampling, duration) fed
/// arbitrary values through the real command line: no panic; a refusal names
/// the flag; accepted options are what the flags said. Cases:
/// `CCCTL_FUZZ_CASES` (default 5,000).
#[cfg(test)]
mod fuzz {
    use clap::Parser;
    use proptest::prelude::*;

    use crate::cli::{Cli, Command};

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: ccctl_core::fuzz::cases(5_000),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// Endpoint-shaped text of both families: brackets, prefixes, ports,
    /// out-of-range lengths and ports among them.
    const ENDPOINTS: &str = "\\[?(([0-9a-f]{0,4}:){0,8}[0-9a-f]{0,4}|([0-9]{1,3}\\.){3}[0-9]{1,3})(/[0-9]{1,3})?\\]?(:[0-9]{0,6})?";

    const FLAGS: &[&str] = &[
        "--algo",
        "--port",
        "--local",
        "--remote",
        "--sample",
        "--duration",
    ];

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn trace_flags_are_refused_by_name_or_taken(flag: usize, value in prop_oneof!["\\PC{0,24}", "[0-9.:a-f\\[\\]-]{0,24}", "-?[0-9]{0,12}(\\.[0-9]{0,3})?(s|ms|min|h|us|x|)", ENDPOINTS]) {
            let flag = FLAGS[flag % FLAGS.len()];
            let argv = ["ccctl", "trace", "--follow", flag, value.as_str()];
            match Cli::try_parse_from(argv) {
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(m.contains(flag) || m.contains("unexpected argument") || m.contains("a value is required"), "{flag} {value:?}: {m}");
                }
                Ok(Cli { command: Command::Trace(a), .. }) => match a.options() {
                    Ok((opts, _)) => {
                        if flag == "--local" || flag == "--remote" {
                            let e = if flag == "--local" { opts.filter.local } else { opts.filter.remote };
                            let cfg = opts.filter.cfg(1);
                            let prefix = if flag == "--local" { cfg.saddr_prefix } else { cfg.daddr_prefix };
                            // An address is matched on at most its 128 bits, an IPv4 one IPv4-mapped.
                            prop_assert!(prefix <= 128, "{value:?} -> /{prefix}");
                            match e.addr {
                                Some(std::net::IpAddr::V4(_)) => prop_assert!(prefix >= 96, "{value:?} -> /{prefix}"),
                                Some(std::net::IpAddr::V6(_)) => {}
                                None => prop_assert!(prefix == 0 && e.port.is_some(), "{value:?}"),
                            }
                        }
                        if flag == "--duration" {
                            let d = opts.duration.expect("--duration taken").as_secs_f64();
                            prop_assert!((0.0..=1e7).contains(&d), "{value:?} -> {d}");
                        }
                    }
                    Err(e) => {
                        let m = e.to_string();
                        let name = flag.trim_start_matches("--");
                        prop_assert!(m.contains(name), "{flag} {value:?}: {m}");
                    }
                },
                Ok(_) => prop_assert!(false, "not parsed as trace"),
            }
        }

        /// `--remote` built from parts (an address of either family, maybe
        /// a prefix length, maybe a port, in the written forms): taken
        /// exactly when every part is valid, and then holding those parts.
        #[test]
        fn remote_endpoints_of_both_families(bits: u128, v4: bool, len in proptest::option::of(0u16..200), port in proptest::option::of(0u32..70_000)) {
            let addr: std::net::IpAddr = if v4 {
                std::net::Ipv4Addr::from(bits as u32).into()
            } else {
                std::net::Ipv6Addr::from(bits).into()
            };
            let max = if v4 { 32 } else { 128 };
            let a = match len { Some(l) => format!("{addr}/{l}"), None => addr.to_string() };
            let text = match (port, v4) {
                (None, _) => a,
                (Some(p), true) => format!("{a}:{p}"),
                (Some(p), false) => format!("[{a}]:{p}"),
            };
            let valid = len.is_none_or(|l| l <= max) && port.is_none_or(|p| (1..=65_535).contains(&p));
            let argv = ["ccctl", "trace", "--follow", "--remote", text.as_str()];
            match Cli::try_parse_from(argv) {
                Ok(Cli { command: Command::Trace(a), .. }) => {
                    prop_assert!(valid, "{text} taken");
                    let e = a.remote.expect("--remote");
                    prop_assert_eq!(e.addr, Some(addr));
                    prop_assert_eq!(e.prefix.map(u16::from), len);
                    prop_assert_eq!(e.port.map(u32::from), port);
                    let (bytes, prefix) = e.cfg_addr();
                    let want = match addr {
                        std::net::IpAddr::V4(a) => (a.to_ipv6_mapped().octets(), 96 + len.unwrap_or(32)),
                        std::net::IpAddr::V6(a) => (a.octets(), len.unwrap_or(128)),
                    };
                    prop_assert_eq!((bytes, u16::from(prefix)), want);
                }
                Ok(_) => prop_assert!(false, "not parsed as trace"),
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(!valid, "{text} refused: {m}");
                    prop_assert!(m.contains("--remote") && m.contains(&text), "{text}: {m}");
                    if len.is_some_and(|l| l > max) {
                        prop_assert!(m.contains(&format!("prefix length is 0 to {max}")), "{text}: {m}");
                    }
                }
            }
        }
    }
}
