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
pub mod event;
pub mod follow;
pub mod lock;
pub mod maps;
pub mod run;
pub mod sink;
pub mod synthetic;

use std::path::PathBuf;

use serde::Serialize;

use crate::abi;

pub use lock::TraceLock;
pub use maps::SharedMaps;
pub use run::{run_with, Stop, Target, TraceOptions, TraceSummary};

/// Switches tracing off when it was left on by a session that no longer
/// runs (killed with SIGKILL, it could not switch it off itself), so the
/// algorithms stop filling a ring buffer nobody reads. Every consumer
/// holds the [`TraceLock`] while tracing is on; if we can take it, nobody
/// consumes. Returns the pid of the session that left it on; `None` when
/// tracing is off, a tracer is running, or nothing is loaded.
pub fn switch_off_orphaned() -> Result<Option<u64>, TraceError> {
    let maps = match SharedMaps::open() {
        Ok(m) => m,
        Err(TraceError::NotLoaded { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    if maps.read_cfg()?.enabled == 0 {
        return Ok(None);
    }
    let _lock = match TraceLock::acquire() {
        Ok(l) => l,
        Err(TraceError::Busy { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    // Read again under the lock: a session that just ended switched it off.
    let cfg = maps.read_cfg()?;
    if cfg.enabled == 0 {
        return Ok(None);
    }
    maps.write_cfg(&abi::ccctl_trace_cfg::default())?;
    Ok(Some(cfg.session))
}

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

    /// The pin tree is not what ccctl made (a planted symbolic link).
    #[error(transparent)]
    Pins(#[from] crate::error::Error),
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
    /// 4-tuple: local address and port (either may be absent).
    pub local: Endpoint,
    /// 4-tuple: remote address and port.
    pub remote: Endpoint,
    #[serde(skip)]
    algo_mask: u32,
}

/// One end of a 4-tuple filter: `198.18.1.1:5201`, `198.18.1.1` or `:5201`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub addr: Option<std::net::Ipv4Addr>,
    pub port: Option<u16>,
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let bad = || format!("`{s}`: expected IPV4, IPV4:PORT or :PORT, e.g. 198.18.1.1:5201");
        let (a, p) = match s.rsplit_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr = if a.is_empty() {
            None
        } else {
            Some(a.parse().map_err(|_| bad())?)
        };
        let port = match p {
            Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?),
            None => None,
        };
        if addr.is_none() && port.is_none() {
            return Err(bad());
        }
        Ok(Endpoint { addr, port })
    }
}

impl Default for Filter {
    fn default() -> Filter {
        Filter {
            algos: Vec::new(),
            port: None,
            sample_every: 1,
            once_per_rtt: false,
            local: Endpoint::default(),
            remote: Endpoint::default(),
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

    /// Adds a 4-tuple filter (`--local`, `--remote`).
    pub fn with_endpoints(mut self, local: Option<Endpoint>, remote: Option<Endpoint>) -> Filter {
        self.local = local.unwrap_or_default();
        self.remote = remote.unwrap_or_default();
        self
    }

    /// The `trace_cfg` entry that turns tracing on with these filters.
    pub fn cfg(&self, session: u64) -> abi::ccctl_trace_cfg {
        // Addresses as the kernel keeps them: network byte order in memory.
        let be = |a: Option<std::net::Ipv4Addr>| a.map_or(0, |a| u32::from_ne_bytes(a.octets()));
        abi::ccctl_trace_cfg {
            enabled: 1,
            algo_mask: self.algo_mask,
            saddr: be(self.local.addr),
            daddr: be(self.remote.addr),
            sport: self.local.port.unwrap_or(0),
            dport: self.remote.port.unwrap_or(0),
            port: self.port.unwrap_or(0) as u32,
            sample_every: self.sample_every,
            once_per_rtt: self.once_per_rtt as u32,
            session,
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
    fn four_tuple_endpoints_parse_and_land_in_network_order() {
        let l = Endpoint::parse("198.18.1.1:5201").expect("addr:port");
        let r = Endpoint::parse(":443").expect("port only");
        assert_eq!(Endpoint::parse("198.18.0.2").expect("addr").port, None);
        for bad in [
            "",
            ":",
            "1.2.3:80",
            "198.18.0.2:0",
            "198.18.0.2:70000",
            "host:80",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let cfg = Filter::default().with_endpoints(Some(l), Some(r)).cfg(1);
        assert_eq!(cfg.saddr.to_ne_bytes(), [198, 18, 1, 1]);
        assert_eq!((cfg.sport, cfg.dport, cfg.daddr), (5201, 443, 0));
    }

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
            r#"{"algos":["bpf_bbr","dstar"],"port":5201,"sample_every":10,"once_per_rtt":true,"local":{"addr":null,"port":null},"remote":{"addr":null,"port":null}}"#
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
