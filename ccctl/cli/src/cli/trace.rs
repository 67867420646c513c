//! `ccctl trace`: per-ACK events of the loaded algorithms into Parquet,
//! CSV, or a live per-flow table.
use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use clap::{ArgGroup, Args};

use ccctl_core::trace::{self, Filter, TraceError, TraceOptions};
use ccctl_core::units::HumanDuration;
use ccctl_lab::trace_files::{self, Output};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("output").required(true).multiple(false).args(["out", "csv", "follow"])))]
pub struct TraceArgs {
    /// Trace only this algorithm (repeat for several; default: every loaded one).
    #[arg(long = "algo", value_name = "ALGO")]
    pub algos: Vec<String>,
    /// Only flows with this local or remote port.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Only flows with this local end: IPV4, IPV4:PORT or :PORT (with --remote: a 4-tuple).
    #[arg(long, value_name = "ADDR:PORT", value_parser = trace::Endpoint::parse)]
    pub local: Option<trace::Endpoint>,
    /// Only flows with this remote end: IPV4, IPV4:PORT or :PORT.
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
            "bbr",
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
        fn trace_flags_are_refused_by_name_or_taken(flag: usize, value in prop_oneof!["\\PC{0,24}", "[0-9.:a-f\\[\\]-]{0,24}", "-?[0-9]{0,12}(\\.[0-9]{0,3})?(s|ms|min|h|us|x|)"]) {
            let flag = FLAGS[flag % FLAGS.len()];
            let argv = ["ccctl", "trace", "--follow", flag, value.as_str()];
            match Cli::try_parse_from(argv) {
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(m.contains(flag) || m.contains("unexpected argument") || m.contains("a value is required"), "{flag} {value:?}: {m}");
                }
                Ok(Cli { command: Command::Trace(a), .. }) => match a.options() {
                    Ok((opts, _)) => {
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
    }
}
