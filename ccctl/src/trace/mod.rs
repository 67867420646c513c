//! `ccctl trace`: the consumer of per-ACK events.
//!
//! Every ccctl algorithm emits one `struct ccctl_event` per ACK into the
//! shared ring buffer `<bpffs>/ccctl/shared/trace_events` while the shared
//! `trace_cfg` entry says so ([`maps`]). A session takes the tracing lock
//! ([`TraceLock`]), writes its filters into `trace_cfg`, drains the ring
//! into a [`sink`] (Parquet, CSV) or a live per-flow table ([`follow`]),
//! and on every way out (duration, SIGINT, SIGTERM, an error) switches
//! tracing off again, drains what is left and finishes its file with the
//! number of events the BPF side had to drop ([`run`]).
pub mod bench;
pub mod event;
pub mod follow;
pub mod lock;
pub mod maps;
pub mod run;
pub mod sink;

use std::path::PathBuf;

use serde::Serialize;

use crate::abi;

pub use lock::TraceLock;
pub use maps::SharedMaps;
pub use run::{run, run_with, Output, Stop, TraceOptions, TraceSummary};

/// Why a trace session could not start; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("no ccctl algorithm is loaded (no {}); load one with `ccctl load bbr`", path.display())]
    NotLoaded { path: PathBuf },

    #[error(
        "cannot open {}: permission denied; tracing needs root (CAP_BPF or CAP_SYS_ADMIN)",
        path.display()
    )]
    NotPermitted { path: PathBuf },

    #[error(
        "{} does not match this ccctl build ({detail}); unload every algorithm \
         (`ccctl unload --all`) and load again with this binary",
        path.display()
    )]
    AbiMismatch { path: PathBuf, detail: String },

    #[error(
        "another tracer ({}) is running: ccctl traces one session at a time because all \
         algorithms share one ring buffer",
        pid.map_or_else(|| "pid unknown".to_string(), |p| format!("pid {p}"))
    )]
    Busy { pid: Option<u32> },

    #[error("{flag}: {message}")]
    BadInput { flag: &'static str, message: String },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{what}: {source}")]
    Bpf {
        what: String,
        #[source]
        source: libbpf_rs::Error,
    },
}

/// What to trace; becomes the `trace_cfg` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// Kernel names of the algorithms traced; empty: all of them.
    pub algos: Vec<String>,
    /// Local or remote port; `None`: any.
    pub port: Option<u16>,
    /// Emit every Nth ACK of a flow (1: every ACK).
    pub sample_every: u32,
    /// At most one event per flow per round trip.
    pub once_per_rtt: bool,
    #[serde(skip)]
    algo_mask: u32,
}

impl Default for Filter {
    fn default() -> Filter {
        Filter {
            algos: Vec::new(),
            port: None,
            sample_every: 1,
            once_per_rtt: false,
            algo_mask: 0,
        }
    }
}

impl Filter {
    /// Validate the command-line filters, naming the offending flag.
    pub fn new(
        algos: &[String],
        port: Option<u16>,
        sample: Option<u32>,
        once_per_rtt: bool,
    ) -> Result<Filter, TraceError> {
        let mut f = Filter {
            once_per_rtt,
            ..Filter::default()
        };
        for name in algos {
            let id = event::algo_id(name).ok_or_else(|| TraceError::BadInput {
                flag: "--algo",
                message: format!(
                    "unknown algorithm `{name}`; algorithms that can be traced: {}",
                    event::algo_choices()
                ),
            })?;
            let kernel_name = event::algo_name(id as u8).to_string();
            if !f.algos.contains(&kernel_name) {
                f.algos.push(kernel_name);
            }
            f.algo_mask |= 1 << id;
        }
        if port == Some(0) {
            return Err(TraceError::BadInput {
                flag: "--port",
                message: "must be a port number from 1 to 65535".into(),
            });
        }
        f.port = port;
        match sample {
            Some(0) => {
                return Err(TraceError::BadInput {
                    flag: "--sample",
                    message: "must be at least 1 (1 traces every ACK, N every Nth ACK of a flow)"
                        .into(),
                })
            }
            Some(n) => f.sample_every = n,
            None => {}
        }
        Ok(f)
    }

    /// The `trace_cfg` entry that turns tracing on with these filters.
    pub fn cfg(&self, session: u64) -> abi::ccctl_trace_cfg {
        abi::ccctl_trace_cfg {
            enabled: 1,
            algo_mask: self.algo_mask,
            port: self.port.unwrap_or(0) as u32,
            sample_every: self.sample_every,
            once_per_rtt: self.once_per_rtt as u32,
            session,
            ..Default::default()
        }
    }

    /// The filters as recorded in trace files (`ccctl.filters`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_become_trace_cfg() {
        let f = Filter::new(
            &["bbr".into(), "dstar".into(), "bpf_bbr".into()],
            Some(5201),
            Some(10),
            true,
        )
        .unwrap();
        assert_eq!(f.algos, ["bpf_bbr", "dstar"]);
        let cfg = f.cfg(42);
        assert_eq!(cfg.enabled, 1);
        assert_eq!(
            cfg.algo_mask,
            (1 << abi::CCCTL_ALGO_BBR) | (1 << abi::CCCTL_ALGO_DSTAR)
        );
        assert_eq!((cfg.port, cfg.sport, cfg.dport), (5201, 0, 0));
        assert_eq!((cfg.saddr, cfg.daddr), (0, 0));
        assert_eq!(
            (cfg.sample_every, cfg.once_per_rtt, cfg.session),
            (10, 1, 42)
        );
        assert_eq!(
            f.to_json(),
            r#"{"algos":["bpf_bbr","dstar"],"port":5201,"sample_every":10,"once_per_rtt":true}"#
        );

        let all = Filter::new(&[], None, None, false).unwrap().cfg(1);
        assert_eq!(
            (all.algo_mask, all.port, all.sample_every, all.once_per_rtt),
            (0, 0, 1, 0)
        );
    }

    #[test]
    fn bad_filters_name_the_flag() {
        let e = Filter::new(&["cubic".into()], None, None, false).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("--algo: unknown algorithm `cubic`"),
            "{msg}"
        );
        assert!(
            msg.contains("bbr (bpf_bbr)") && msg.contains("dstar"),
            "{msg}"
        );
        let e = Filter::new(&[], None, Some(0), false).unwrap_err();
        assert!(e.to_string().starts_with("--sample: must be at least 1"));
        let e = Filter::new(&[], Some(0), None, false).unwrap_err();
        assert!(e.to_string().starts_with("--port:"));
    }
}
