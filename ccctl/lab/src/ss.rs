//! Periodic `ss -tinH` sampling inside a network namespace, and a parser for
//! its per-socket output.
//!
//! Each socket is two lines: `STATE RECV-Q SEND-Q LOCAL PEER` and an
//! indented info line such as
//! `cubic wscale:10,10 rto:212 rtt:8.762/0.347 … cwnd:40 ssthresh:29 …`.
//! The congestion control is the bare token before the first `key:value`
//! token (after the `ts sack ecn ecnseen fastopen` flags); BPF struct_ops
//! CCs appear there under their registered name.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::testbed::{self, run};

/// Moves the calling thread into network namespace `ns` (/run/netns/<ns>).
fn enter_netns(ns: &str) -> Result<(), testbed::Error> {
    let path = Path::new("/run/netns").join(ns);
    let io = |source| testbed::Error::Io {
        what: format!("entering network namespace {}", path.display()),
        source,
    };
    let f = File::open(&path).map_err(io)?;
    // SAFETY: setns on a valid fd; CLONE_NEWNET only affects this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Testbed(#[from] testbed::Error),
    #[error("cannot start ss sampler thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("ss sampler thread panicked")]
    Panicked,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// BBR's `bbr:(bw:…,mrtt:…,pacing_gain:…,cwnd_gain:…)` block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BbrInfo {
    pub bw_bps: Option<u64>,
    pub mrtt_ms: Option<f64>,
    pub pacing_gain: Option<f64>,
    pub cwnd_gain: Option<f64>,
}

/// One socket as printed by `ss -tin`. Fields ss did not print are `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SockInfo {
    pub state: String,
    pub recv_q: u64,
    pub send_q: u64,
    pub local: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    /// Congestion control name (`cubic`, `bbr`, `bpf_bbr`, …).
    pub cc: Option<String>,
    pub mss: Option<u32>,
    /// Segments.
    pub cwnd: Option<u32>,
    /// Segments.
    pub ssthresh: Option<u32>,
    pub rto_ms: Option<f64>,
    /// Smoothed RTT, ms.
    pub rtt_ms: Option<f64>,
    pub rttvar_ms: Option<f64>,
    pub minrtt_ms: Option<f64>,
    pub send_bps: Option<u64>,
    pub pacing_rate_bps: Option<u64>,
    pub delivery_rate_bps: Option<u64>,
    pub bytes_sent: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub bytes_retrans: Option<u64>,
    /// `retrans:<current>/<total>` (segments).
    pub retrans: Option<u32>,
    pub retrans_total: Option<u32>,
    pub unacked: Option<u32>,
    pub lost: Option<u32>,
    pub sacked: Option<u32>,
    pub delivered: Option<u64>,
    pub notsent: Option<u64>,
    pub data_segs_out: Option<u64>,
    pub app_limited: bool,
    pub bbr: Option<BbrInfo>,
}

/// One socket at one sampling instant.
#[derive(Debug, Clone, PartialEq)]
pub struct SsRecord {
    /// Time since the sampler started.
    pub t: Duration,
    /// Wall-clock time, seconds since the epoch.
    pub unix: f64,
    pub sock: SockInfo,
}

/// Splits a `scale:value` style rate such as `52882903bps`, `1.2Mbps`.
fn parse_rate(s: &str) -> Option<u64> {
    let s = s.strip_suffix("bps")?;
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1e3),
        'M' => (&s[..s.len() - 1], 1e6),
        'G' => (&s[..s.len() - 1], 1e9),
        'T' => (&s[..s.len() - 1], 1e12),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    Some((v * mult).round() as u64)
}

fn parse_addr(s: &str) -> Option<SocketAddr> {
    // Strip an interface scope (`198.18.0.2%eth0:5201`, `[fe80::1%eth0]:22`).
    let (host, port) = s.rsplit_once(':')?;
    let host = match host.find('%') {
        Some(i) if host.starts_with('[') => format!("{}]", &host[..i]),
        Some(i) => host[..i].to_string(),
        None => host.to_string(),
    };
    format!("{host}:{port}").parse().ok()
}

const FLAGS: &[&str] = &["ts", "sack", "ecn", "ecnseen", "fastopen", "ecn_low"];

fn parse_bbr(s: &str, out: &mut BbrInfo) {
    let inner = s.trim_start_matches('(').trim_end_matches(')');
    for kv in inner.split(',') {
        let Some((k, v)) = kv.split_once(':') else {
            continue;
        };
        match k {
            "bw" => out.bw_bps = parse_rate(v),
            "mrtt" => out.mrtt_ms = v.parse().ok(),
            "pacing_gain" => out.pacing_gain = v.parse().ok(),
            "cwnd_gain" => out.cwnd_gain = v.parse().ok(),
            _ => {}
        }
    }
}

/// Fills `si` from an info line.
fn parse_info(line: &str, si: &mut SockInfo) {
    let toks: Vec<&str> = line.split_whitespace().collect();
    let mut seen_kv = false;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        let next = toks.get(i + 1).copied();
        // Two-token fields: `send 1.2Mbps`, `pacing_rate …`, `delivery_rate …`.
        match t {
            "send" | "pacing_rate" | "delivery_rate" => {
                let v = next.and_then(parse_rate);
                match t {
                    "send" => si.send_bps = v,
                    "pacing_rate" => si.pacing_rate_bps = v,
                    _ => si.delivery_rate_bps = v,
                }
                seen_kv = true;
                i += 2;
                continue;
            }
            "app_limited" => {
                si.app_limited = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        if let Some((k, v)) = t.split_once(':') {
            seen_kv = true;
            let u32v = || v.parse::<u32>().ok();
            let u64v = || v.parse::<u64>().ok();
            match k {
                "mss" => si.mss = u32v(),
                "cwnd" => si.cwnd = u32v(),
                "ssthresh" => si.ssthresh = u32v(),
                "rto" => si.rto_ms = v.parse().ok(),
                "rtt" => {
                    let (a, b) = v.split_once('/').unwrap_or((v, ""));
                    si.rtt_ms = a.parse().ok();
                    si.rttvar_ms = b.parse().ok();
                }
                "minrtt" => si.minrtt_ms = v.parse().ok(),
                "bytes_sent" => si.bytes_sent = u64v(),
                "bytes_acked" => si.bytes_acked = u64v(),
                "bytes_received" => si.bytes_received = u64v(),
                "bytes_retrans" => si.bytes_retrans = u64v(),
                "retrans" => {
                    let (a, b) = v.split_once('/').unwrap_or((v, ""));
                    si.retrans = a.parse().ok();
                    si.retrans_total = b.parse().ok();
                }
                "unacked" => si.unacked = u32v(),
                "lost" => si.lost = u32v(),
                "sacked" => si.sacked = u32v(),
                "delivered" => si.delivered = u64v(),
                "notsent" => si.notsent = u64v(),
                "data_segs_out" => si.data_segs_out = u64v(),
                "bbr" => parse_bbr(v, si.bbr.get_or_insert_with(BbrInfo::default)),
                _ => {}
            }
        } else if !seen_kv && si.cc.is_none() && !FLAGS.contains(&t) {
            si.cc = Some(t.to_string());
        }
        i += 1;
    }
}

/// Parses a socket header line `STATE RECV-Q SEND-Q LOCAL PEER [PROCESS]`.
fn parse_header(line: &str) -> Option<SockInfo> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 5 || f[0] == "State" {
        return None;
    }
    Some(SockInfo {
        state: f[0].to_string(),
        recv_q: f[1].parse().ok()?,
        send_q: f[2].parse().ok()?,
        local: parse_addr(f[3]),
        peer: parse_addr(f[4]),
        ..Default::default()
    })
}

/// Parses the output of `ss -tin` / `ss -tinH` (header line optional).
pub fn parse_ss(text: &str) -> Vec<SockInfo> {
    let mut out: Vec<SockInfo> = Vec::new();
    let mut cur: Option<SockInfo> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(si) = cur.as_mut() {
                parse_info(line, si);
            }
        } else {
            if let Some(si) = cur.take() {
                out.push(si);
            }
            cur = parse_header(line);
        }
    }
    if let Some(si) = cur {
        out.push(si);
    }
    out
}

/// Sampler options.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Sampling period (default 100 ms). Ticks on a fixed schedule; a tick
    /// that overruns skips the missed ones.
    pub interval: Duration,
    /// ss filter expression appended to the command line, e.g.
    /// `["dport", "=", ":5201"]`.
    pub filter: Vec<String>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: Duration::from_millis(100),
            filter: Vec::new(),
        }
    }
}

/// Background `ss -tinH` sampler; [`SsSampler::stop`] returns the records.
/// Dropping it without `stop` stops the thread too.
#[derive(Debug)]
pub struct SsSampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Samples>>,
}

/// What the sampler thread collected.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub records: Vec<SsRecord>,
    /// Ticks taken.
    pub ticks: u64,
    /// Ticks whose ss invocation failed, and the last error seen.
    pub failures: u64,
    pub last_error: Option<String>,
}

impl Samples {
    /// Records of the socket whose local port is `port` (e.g.
    /// `FlowResult::local_port`, to keep only an iperf3 data connection).
    pub fn for_local_port(&self, port: u16) -> impl Iterator<Item = &SsRecord> {
        self.records
            .iter()
            .filter(move |r| r.sock.local.map(|a| a.port()) == Some(port))
    }

    /// Records of sockets whose peer port is `port` (data and control
    /// connections of an iperf3 flow both match).
    pub fn for_peer_port(&self, port: u16) -> impl Iterator<Item = &SsRecord> {
        self.records
            .iter()
            .filter(move |r| r.sock.peer.map(|a| a.port()) == Some(port))
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl SsSampler {
    /// Starts sampling in namespace `ns` (a name under /run/netns, e.g.
    /// `Testbed::ns(role)`). Runs ss once before returning so a broken
    /// namespace or missing ss fails here rather than silently.
    pub fn start(ns: &str, cfg: SamplerConfig) -> Result<Self> {
        let mut argv: Vec<String> = vec!["-tinH".into()];
        argv.extend(cfg.filter.iter().cloned());
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let ns = ns.to_string();
        let interval = cfg.interval.max(Duration::from_millis(1));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), testbed::Error>>();
        let handle = std::thread::Builder::new()
            .name(format!("ss-{ns}"))
            .spawn(move || {
                let mut s = Samples::default();
                // This thread joins the namespace once; every `ss` it spawns
                // inherits it. Far cheaper per tick than `ip netns exec`
                // (which also unshares a mount namespace and remounts /sys):
                // it matters under TCG, where each exec costs ~0.1-1 s.
                if let Err(e) = enter_netns(&ns) {
                    let _ = ready_tx.send(Err(e));
                    return s;
                }
                let ss = || run(Command::new("ss").args(&argv));
                // First run synchronously: a broken ns or missing ss fails start().
                if let Err(e) = ss() {
                    let _ = ready_tx.send(Err(e));
                    return s;
                }
                let _ = ready_tx.send(Ok(()));
                let t0 = Instant::now();
                let mut k: u32 = 0;
                while !stop2.load(Ordering::Relaxed) {
                    let t = t0.elapsed();
                    let unix = unix_now();
                    s.ticks += 1;
                    match ss() {
                        Ok(out) => {
                            for sock in parse_ss(&String::from_utf8_lossy(&out.stdout)) {
                                s.records.push(SsRecord { t, unix, sock });
                            }
                        }
                        Err(e) => {
                            s.failures += 1;
                            s.last_error = Some(e.to_string());
                        }
                    }
                    // Next tick on the fixed schedule, skipping missed ones.
                    let el = t0.elapsed();
                    k = k.max((el.as_nanos() / interval.as_nanos()) as u32) + 1;
                    let next = interval * k;
                    // Sleep in small steps so stop() is prompt.
                    while !stop2.load(Ordering::Relaxed) {
                        let now = t0.elapsed();
                        if now >= next {
                            break;
                        }
                        std::thread::sleep((next - now).min(Duration::from_millis(20)));
                    }
                }
                s
            })
            .map_err(Error::Thread)?;
        let sampler = SsSampler {
            stop,
            handle: Some(handle),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(sampler),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(Error::Panicked),
        }
    }

    /// Stops the thread and returns everything sampled.
    pub fn stop(mut self) -> Result<Samples> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .expect("handle")
            .join()
            .map_err(|_| Error::Panicked)
    }
}

impl Drop for SsSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on this host (iproute2 6.1, kernel 6.18) with `ss -tinH` in a
    // sender namespace during iperf3 runs through a 50 Mbit/s tbf.
    // Control connection (default cc bbr) then the cubic data connection.
    const CUBIC: &str = "ESTAB 0      0      198.18.1.1:46810 198.18.0.2:5301
\t bbr wscale:10,10 rto:204 rtt:0.097/0.096 ato:40 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:13 bytes_sent:185 bytes_acked:186 bytes_received:4 segs_out:7 segs_in:7 data_segs_out:3 data_segs_in:4 bbr:(bw:1053090592bps,mrtt:0.011,pacing_gain:2.88672,cwnd_gain:2.88672) send 1552494845bps lastsnd:2000 lastrcv:1996 lastack:1996 pacing_rate 4729335784bps delivery_rate 1053090904bps delivered:4 app_limited rcv_space:14480 rcv_ssthresh:64088 minrtt:0.011 snd_wnd:65536
ESTAB 0      162176 198.18.1.1:46812 198.18.0.2:5301
\t cubic wscale:10,10 rto:212 rtt:8.762/0.347 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:40 ssthresh:29 bytes_sent:12002509 bytes_retrans:15928 bytes_acked:11928662 segs_out:8292 segs_in:4512 data_segs_out:8290 send 52882903bps lastrcv:2000 pacing_rate 63453144bps delivery_rate 46852640bps delivered:8240 busy:1996ms unacked:40 retrans:0/11 rcv_space:14480 rcv_ssthresh:64088 notsent:104256 minrtt:0.007 snd_wnd:372736                                               
";

    // bbr data connection, `ss -tin` with header.
    const BBR_HDR: &str = "State Recv-Q Send-Q Local Address:Port  Peer Address:PortProcess
ESTAB 0      733928    198.18.1.1:33098   198.18.0.2:5302
\t bbr wscale:10,10 rto:204 rtt:3.906/0.407 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:18 ssthresh:136 bytes_sent:12860965 bytes_retrans:853904 bytes_acked:11980998 segs_out:8887 segs_in:4464 data_segs_out:8885 bbr:(bw:48121616bps,mrtt:0.006,pacing_gain:1,cwnd_gain:2) send 53382488bps lastrcv:2008 pacing_rate 47640400bps delivery_rate 42539360bps delivered:8277 busy:2008ms rwnd_limited:16ms(0.8%) unacked:18 retrans:0/591 rcv_space:14480 rcv_ssthresh:64088 notsent:707864 minrtt:0.006 snd_wnd:920576
";

    // Receiver side of the cubic flow.
    const RX: &str = "ESTAB 0      0      198.18.0.2:5301 198.18.1.1:46812
\t cubic wscale:10,10 rto:204 rtt:0.014/0.007 ato:40 mss:1448 pmtu:1500 rcvmss:1448 advmss:1448 cwnd:10 bytes_received:11953277 segs_out:4520 segs_in:8258 data_segs_in:8256 send 8274285714bps lastsnd:2004 pacing_rate 23646678944bps delivered:1 app_limited rcv_rtt:7.359 rcv_space:102808 rcv_ssthresh:372049 minrtt:0.014 rcv_ooopack:371 snd_wnd:64512
";

    #[test]
    fn cubic_lines() {
        let v = parse_ss(CUBIC);
        assert_eq!(v.len(), 2);
        let c = &v[0];
        assert_eq!(c.cc.as_deref(), Some("bbr"));
        assert!(c.app_limited);
        assert_eq!(c.bbr.as_ref().unwrap().bw_bps, Some(1053090592));
        let d = &v[1];
        assert_eq!(d.state, "ESTAB");
        assert_eq!(d.send_q, 162176);
        assert_eq!(d.local, Some("198.18.1.1:46812".parse().unwrap()));
        assert_eq!(d.peer, Some("198.18.0.2:5301".parse().unwrap()));
        assert_eq!(d.cc.as_deref(), Some("cubic"));
        assert_eq!(
            (d.cwnd, d.ssthresh, d.mss),
            (Some(40), Some(29), Some(1448))
        );
        assert_eq!(
            (d.rtt_ms, d.rttvar_ms, d.minrtt_ms, d.rto_ms),
            (Some(8.762), Some(0.347), Some(0.007), Some(212.0))
        );
        assert_eq!(d.pacing_rate_bps, Some(63453144));
        assert_eq!(d.delivery_rate_bps, Some(46852640));
        assert_eq!(d.send_bps, Some(52882903));
        assert_eq!(
            (d.bytes_acked, d.bytes_sent, d.bytes_retrans),
            (Some(11928662), Some(12002509), Some(15928))
        );
        assert_eq!(
            (d.retrans, d.retrans_total, d.unacked),
            (Some(0), Some(11), Some(40))
        );
        assert_eq!((d.delivered, d.notsent), (Some(8240), Some(104256)));
        assert!(!d.app_limited);
        assert!(d.bbr.is_none());
    }

    #[test]
    fn bbr_with_header() {
        let v = parse_ss(BBR_HDR);
        assert_eq!(v.len(), 1);
        let d = &v[0];
        assert_eq!(d.cc.as_deref(), Some("bbr"));
        assert_eq!((d.cwnd, d.ssthresh), (Some(18), Some(136)));
        assert_eq!((d.retrans, d.retrans_total), (Some(0), Some(591)));
        let b = d.bbr.as_ref().unwrap();
        assert_eq!(b.bw_bps, Some(48121616));
        assert_eq!(
            (b.mrtt_ms, b.pacing_gain, b.cwnd_gain),
            (Some(0.006), Some(1.0), Some(2.0))
        );
    }

    #[test]
    fn receiver_line() {
        let v = parse_ss(RX);
        assert_eq!(v[0].cc.as_deref(), Some("cubic"));
        assert_eq!(v[0].bytes_received, Some(11953277));
        assert_eq!(v[0].ssthresh, None);
    }

    #[test]
    fn flags_bpf_name_and_human_rates() {
        let s = "ESTAB 0 0 [::ffff:198.18.1.1]:40000 198.18.0.2%eth0:5201\n\t ts sack ecn bpf_bbr wscale:7,7 rto:201 rtt:0.5/0.25 cwnd:10 send 1.2Mbps pacing_rate 2.5Gbps delivery_rate 300Kbps\n";
        let v = parse_ss(s);
        assert_eq!(v[0].cc.as_deref(), Some("bpf_bbr"));
        assert_eq!(v[0].local.unwrap().port(), 40000);
        assert_eq!(v[0].peer, Some("198.18.0.2:5201".parse().unwrap()));
        assert_eq!(v[0].send_bps, Some(1_200_000));
        assert_eq!(v[0].pacing_rate_bps, Some(2_500_000_000));
        assert_eq!(v[0].delivery_rate_bps, Some(300_000));
    }

    #[test]
    fn sampler_fails_fast_on_missing_namespace() {
        let e = SsSampler::start("ccctl-no-such-ns", SamplerConfig::default()).unwrap_err();
        assert!(e.to_string().contains("ccctl-no-such-ns"), "{e}");
    }

    #[test]
    fn empty_and_garbage() {
        assert!(parse_ss("").is_empty());
        assert!(parse_ss("\t cubic cwnd:10\n").is_empty());
    }
}
