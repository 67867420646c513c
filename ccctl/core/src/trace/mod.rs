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
pub mod schema;
pub mod sink;
pub mod synthetic;

use std::path::PathBuf;

use serde::Serialize;

use crate::abi;
use crate::registry;

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
    #[error("no ccctl algorithm is loaded (no {}); load one with `ccctl load bpf-bbr`", path.display())]
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

/// One end of a 4-tuple filter: an address (IPv4 or IPv6, exact or a
/// prefix), a port, or both.
///
/// | written | means |
/// |---|---|
/// | `198.18.1.1`, `198.18.0.0/15` | IPv4 address or prefix |
/// | `198.18.1.1:5201`, `198.18.0.0/15:5201` | ... and port |
/// | `fd00:ccc::1`, `fd00:ccc::/48` | IPv6 address or prefix, no port: every colon belongs to the address (`fd00::1:5201` is an address) |
/// | `[fd00:ccc::1]:5201`, `[fd00:ccc::/48]:5201` | IPv6 and port: brackets, as in URLs and `ss` |
/// | `:5201` | port only |
///
/// An IPv4 filter also matches a dual-stack IPv6 socket talking IPv4
/// (`::ffff:a.b.c.d`); `::/0` matches every flow, `0.0.0.0/0` every IPv4 one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub addr: Option<std::net::IpAddr>,
    /// Leading bits of `addr` that must match; `None`: all of them (exact).
    pub prefix: Option<u8>,
    pub port: Option<u16>,
}

const ENDPOINT_FORMS: &str = "expected IPV4[/LEN][:PORT], IPV6[/LEN], [IPV6[/LEN]]:PORT or :PORT, \
e.g. 198.18.1.1:5201, fd00:ccc::1, [fd00:ccc::1]:5201";

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let bad = |why: &str| format!("`{s}`: {why}; {ENDPOINT_FORMS}");
        let port = |p: &str| -> Result<u16, String> {
            p.parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad(&format!("port `{p}` is not a port number from 1 to 65535")))
        };
        // Split into (address part, port part).
        let (a, p, bracketed) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("`[` without its `]`"))?;
            let p = if after.is_empty() {
                None
            } else {
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("after `]` comes `:PORT` or nothing"))?,
                )
            };
            (inside, p, true)
        } else if let Some(p) = s.strip_prefix(':').filter(|p| !p.contains(':')) {
            ("", Some(p), false)
        } else if s.matches(':').count() >= 2 {
            (s, None, false)
        } else {
            match s.split_once(':') {
                Some((a, p)) => (a, Some(p), false),
                None => (s, None, false),
            }
        };
        if a.is_empty() {
            if bracketed {
                return Err(bad("empty `[]`"));
            }
            return match p.map(port).transpose()? {
                Some(port) => Ok(Endpoint {
                    port: Some(port),
                    ..Endpoint::default()
                }),
                None => Err(bad("no address and no port")),
            };
        }
        // The address first, then the port: problems named left to right.
        let (addr_text, len_text) = match a.split_once('/') {
            Some((x, l)) => (x, Some(l)),
            None => (a, None),
        };
        let addr: std::net::IpAddr = addr_text
            .parse()
            .map_err(|_| bad(&format!("`{addr_text}` is not an IPv4 or IPv6 address")))?;
        if bracketed && addr.is_ipv4() {
            return Err(bad("brackets are for IPv6 addresses; write IPV4:PORT"));
        }
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let family = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
        let prefix = match len_text {
            None => None,
            Some(l) => Some(l.parse::<u8>().ok().filter(|&n| n <= max).ok_or_else(|| {
                bad(&format!(
                    "prefix length `{l}`: an {family} prefix length is 0 to {max}"
                ))
            })?),
        };
        Ok(Endpoint {
            addr: Some(addr),
            prefix,
            port: p.map(port).transpose()?,
        })
    }

    /// The address as `trace_cfg` holds it (16 bytes, IPv4 IPv4-mapped) and
    /// how many of its leading bits must match (0: any address).
    pub fn cfg_addr(&self) -> ([u8; 16], u8) {
        match self.addr {
            None => ([0; 16], 0),
            Some(a @ std::net::IpAddr::V4(_)) => (
                event::addr_bytes(a),
                abi::CCCTL_ADDR_V4MAPPED_PREFIX as u8 + self.prefix.unwrap_or(32),
            ),
            Some(a @ std::net::IpAddr::V6(_)) => (event::addr_bytes(a), self.prefix.unwrap_or(128)),
        }
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
            let id = registry::find(name)
                .map(|a| a.id)
                .map_err(|e| TraceError::BadInput {
                    flag: "--algo",
                    message: match e {
                        crate::error::Error::KernelAlgorithm { .. } => e.to_string(),
                        _ => format!(
                            "unknown algorithm `{name}`; algorithms that can be traced: {}",
                            registry::choices()
                        ),
                    },
                })?;
            let kernel_name = registry::kernel_name_of(id as u8).to_string();
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
        let (saddr, saddr_prefix) = self.local.cfg_addr();
        let (daddr, daddr_prefix) = self.remote.cfg_addr();
        abi::ccctl_trace_cfg {
            enabled: 1,
            algo_mask: self.algo_mask,
            saddr,
            daddr,
            saddr_prefix,
            daddr_prefix,
            sport: self.local.port.unwrap_or(0),
            dport: self.remote.port.unwrap_or(0),
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
        // IPv4 written ::ffff:a.b.c.d, all 32 bits of the IPv4 address compared.
        assert_eq!(
            cfg.saddr,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 1, 1]
        );
        assert_eq!(cfg.saddr_prefix, 128);
        assert_eq!((cfg.sport, cfg.dport), (5201, 443));
        assert_eq!((cfg.daddr, cfg.daddr_prefix), ([0; 16], 0));
    }

    #[test]
    fn ipv6_endpoints_and_prefixes() {
        let ula = [0xfd, 0, 0x0c, 0xcc, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let cases: &[(&str, [u8; 16], u8, Option<u16>)] = &[
            ("fd00:ccc::1", ula, 128, None),
            ("[fd00:ccc::1]:5201", ula, 128, Some(5201)),
            ("fd00:ccc::1/48", ula, 48, None),
            ("[fd00:ccc::1/48]:80", ula, 48, Some(80)),
            // Every colon of a bare IPv6 endpoint belongs to the address.
            (
                "fd00::1:5201",
                [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x52, 0x01],
                128,
                None,
            ),
            ("::/0", [0; 16], 0, None),
            (
                "198.18.0.0/15:5201",
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 0],
                96 + 15,
                Some(5201),
            ),
            (
                "0.0.0.0/0",
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0],
                96,
                None,
            ),
        ];
        for (text, bytes, prefix, port) in cases {
            let e = Endpoint::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(e.cfg_addr(), (*bytes, *prefix), "{text}");
            assert_eq!(e.port, *port, "{text}");
        }
        for (bad, says) in [
            ("fd00::/129", "an IPv6 prefix length is 0 to 128"),
            ("198.18.0.0/33", "an IPv4 prefix length is 0 to 32"),
            ("198.18.0.0/-1", "prefix length `-1`"),
            ("[fd00::1]:0", "port `0`"),
            ("[fd00::1]:65536", "port `65536`"),
            ("[fd00::1", "without its `]`"),
            ("[fd00::1]5201", "after `]`"),
            ("[198.18.0.1]:80", "brackets are for IPv6"),
            ("[]:80", "empty `[]`"),
            ("fd00::g", "not an IPv4 or IPv6 address"),
            (":::", "not an IPv4 or IPv6 address"),
        ] {
            let e = Endpoint::parse(bad).expect_err(bad);
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
        let f = Filter::default().with_endpoints(
            Some(Endpoint::parse("fd00:ccc::/48").unwrap()),
            Some(Endpoint::parse("[fd00:ccc::2]:5201").unwrap()),
        );
        let cfg = f.cfg(1);
        assert_eq!((cfg.saddr_prefix, cfg.daddr_prefix), (48, 128));
        assert_eq!(cfg.daddr[15], 2);
        assert_eq!(cfg.dport, 5201);
        assert!(
            f.to_json()
                .contains(r#""remote":{"addr":"fd00:ccc::2","prefix":null,"port":5201}"#),
            "{}",
            f.to_json()
        );
    }

    #[test]
    fn filters_become_trace_cfg() {
        let f = Filter::new(
            &["bpf-bbr".into(), "dstar".into(), "bpf_bbr".into()],
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
        assert_eq!((cfg.saddr_prefix, cfg.daddr_prefix), (0, 0));
        assert_eq!(
            (cfg.sample_every, cfg.once_per_rtt, cfg.session),
            (10, 1, 42)
        );
        assert_eq!(
            f.to_json(),
            r#"{"algos":["bpf_bbr","dstar"],"port":5201,"sample_every":10,"once_per_rtt":true,"local":{"addr":null,"prefix":null,"port":null},"remote":{"addr":null,"prefix":null,"port":null}}"#
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
            msg.contains("bpf-bbr (bpf_bbr)") && msg.contains("dstar"),
            "{msg}"
        );
        let e = Filter::new(&["bbr".into()], None, None, false).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("--algo: `bbr` is the kernel's own") && msg.contains("`bpf-bbr`"),
            "{msg}"
        );
        let e = Filter::new(&[], None, Some(0), false).unwrap_err();
        assert!(e.to_string().starts_with("--sample: must be at least 1"));
        let e = Filter::new(&[], Some(0), None, false).unwrap_err();
        assert!(e.to_string().starts_with("--port:"));
    }
}
