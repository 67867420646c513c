//! iperf3 flows across a [`Testbed`]: one one-off (`-1`) server per flow in
//! the receiver namespace, bound to the receiver address on its own port; one
//! client per flow in a sender namespace with `-C <cc> -J`; JSON parsed with
//! serde.

use std::time::Duration;

use serde::Deserialize;

use std::process::Stdio;

use crate::testbed::{self, NsProcess, Role, Testbed};
use ccctl_observe::sockdiag::DiagSocket;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Testbed(#[from] testbed::Error),
    #[error("watching for iperf3 servers to listen: {0}")]
    Diag(#[from] ccctl_observe::sockdiag::DiagError),
    #[error("iperf3 server on port {port} did not start: {detail}")]
    ServerStart { port: u16, detail: String },
    #[error("`{cmd}` failed ({status}): {message}")]
    Iperf {
        cmd: String,
        status: String,
        message: String,
    },
    #[error("cannot parse iperf3 JSON from `{cmd}`: {source}")]
    Json {
        cmd: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("invalid flow spec: {0}")]
    Spec(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One flow to run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlowSpec {
    /// Index of the sender host.
    pub sender: usize,
    /// Congestion control for the data socket (`-C`).
    pub cc: String,
    /// Test duration (`-t`, whole seconds; rounded up).
    pub duration: Duration,
    /// Delay before this client starts, relative to the others.
    pub start_offset: Duration,
    /// `--omit` seconds (excluded from the end totals).
    pub omit: Option<u32>,
    /// `-i` reporting interval (default iperf3's 1 s).
    pub interval: Option<Duration>,
    /// Server port; `None`: allocate one from the testbed.
    pub port: Option<u16>,
    /// Extra client arguments.
    pub extra_args: Vec<String>,
}

impl FlowSpec {
    pub fn new(sender: usize, cc: &str, duration: Duration) -> Self {
        FlowSpec {
            sender,
            cc: cc.to_string(),
            duration,
            start_offset: Duration::ZERO,
            omit: None,
            interval: None,
            port: None,
            extra_args: Vec::new(),
        }
    }
    pub fn start_offset(mut self, d: Duration) -> Self {
        self.start_offset = d;
        self
    }
    pub fn omit(mut self, secs: u32) -> Self {
        self.omit = Some(secs);
        self
    }
    pub fn interval(mut self, d: Duration) -> Self {
        self.interval = Some(d);
        self
    }
    pub fn port(mut self, p: u16) -> Self {
        self.port = Some(p);
        self
    }

    fn duration_secs(&self) -> u64 {
        let s = self.duration.as_secs();
        if self.duration.subsec_nanos() > 0 {
            s + 1
        } else {
            s
        }
        .max(1)
    }
}

// ---------------------------------------------------------------------------
// JSON model (only the fields we use; everything defaulted)

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Report {
    pub start: Start,
    pub intervals: Vec<ReportInterval>,
    pub end: End,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Start {
    pub connected: Vec<Connected>,
    pub version: String,
    pub timestamp: Timestamp,
    pub tcp_mss_default: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Connected {
    pub socket: i64,
    pub local_host: String,
    pub local_port: u16,
    pub remote_host: String,
    pub remote_port: u16,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Timestamp {
    pub time: String,
    pub timesecs: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ReportInterval {
    pub streams: Vec<StreamInterval>,
    pub sum: StreamInterval,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StreamInterval {
    pub socket: i64,
    pub start: f64,
    pub end: f64,
    pub seconds: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: Option<u64>,
    /// Bytes.
    pub snd_cwnd: Option<u64>,
    /// Microseconds.
    pub rtt: Option<u64>,
    pub rttvar: Option<u64>,
    pub omitted: bool,
    pub sender: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct End {
    pub streams: Vec<EndStream>,
    pub sum_sent: Sum,
    pub sum_received: Sum,
    pub sender_tcp_congestion: Option<String>,
    pub receiver_tcp_congestion: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EndStream {
    pub sender: EndStreamSender,
    pub receiver: Sum,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EndStreamSender {
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: Option<u64>,
    pub max_snd_cwnd: Option<u64>,
    /// Microseconds.
    pub max_rtt: Option<u64>,
    pub min_rtt: Option<u64>,
    pub mean_rtt: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Sum {
    pub start: f64,
    pub end: f64,
    pub seconds: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: Option<u64>,
}

/// Parses iperf3 `-J` output.
pub fn parse_report(json: &str) -> Result<Report, serde_json::Error> {
    serde_json::from_str(json)
}

// ---------------------------------------------------------------------------
// Results

/// One reporting interval of a flow (sender side).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: Option<u64>,
    pub snd_cwnd_bytes: Option<u64>,
    pub rtt_us: Option<u64>,
    pub omitted: bool,
}

/// Outcome of one flow. Serialized (without the raw iperf3 report) in a
/// lab shard's `records.json`, which `ccctl lab merge` reads back.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FlowResult {
    pub spec: FlowSpec,
    pub server_port: u16,
    /// Client-side port of the data connection (to match inet_diag samples).
    pub local_port: Option<u16>,
    /// Wall-clock time the client process was launched (after its offset).
    pub started_unix: f64,
    pub sender_bytes: u64,
    pub receiver_bytes: u64,
    /// Receiver-side goodput, bit/s.
    pub goodput_bps: f64,
    /// Sender-side throughput, bit/s.
    pub sender_bps: f64,
    pub retransmits: u64,
    pub sender_cc: Option<String>,
    pub receiver_cc: Option<String>,
    pub min_rtt_us: Option<u64>,
    pub mean_rtt_us: Option<u64>,
    pub max_rtt_us: Option<u64>,
    pub intervals: Vec<Interval>,
    #[serde(skip)]
    pub report: Report,
}

impl FlowResult {
    pub(crate) fn from_report(
        spec: FlowSpec,
        server_port: u16,
        started_unix: f64,
        report: Report,
    ) -> Self {
        let e = &report.end;
        let st = e.streams.first();
        FlowResult {
            local_port: report.start.connected.first().map(|c| c.local_port),
            sender_bytes: e.sum_sent.bytes,
            receiver_bytes: e.sum_received.bytes,
            goodput_bps: e.sum_received.bits_per_second,
            sender_bps: e.sum_sent.bits_per_second,
            retransmits: e.sum_sent.retransmits.unwrap_or(0),
            sender_cc: e.sender_tcp_congestion.clone(),
            receiver_cc: e.receiver_tcp_congestion.clone(),
            min_rtt_us: st.and_then(|s| s.sender.min_rtt),
            mean_rtt_us: st.and_then(|s| s.sender.mean_rtt),
            max_rtt_us: st.and_then(|s| s.sender.max_rtt),
            intervals: report
                .intervals
                .iter()
                .map(|iv| {
                    let s = iv.streams.first().unwrap_or(&iv.sum);
                    Interval {
                        start: iv.sum.start,
                        end: iv.sum.end,
                        bytes: iv.sum.bytes,
                        bits_per_second: iv.sum.bits_per_second,
                        retransmits: iv.sum.retransmits,
                        snd_cwnd_bytes: s.snd_cwnd,
                        rtt_us: s.rtt,
                        omitted: iv.sum.omitted,
                    }
                })
                .collect(),
            spec,
            server_port,
            started_unix,
            report,
        }
    }
}

// ---------------------------------------------------------------------------
// Running

/// A one-off iperf3 server in the receiver namespace (killed on drop if
/// still running).
#[derive(Debug)]
pub struct Server {
    pub port: u16,
    proc: NsProcess,
}

impl Server {
    /// Spawns `iperf3 -s -1 -B <receiver> -p <port>` (not waiting for readiness).
    pub fn spawn(tb: &Testbed, port: u16) -> Result<Self> {
        // stdout (per-second text reports) is discarded so a long run never
        // blocks on a full pipe; errors go to stderr.
        let proc = tb.spawn_stdio(
            Role::Receiver,
            &[
                "iperf3",
                "-s",
                "-1",
                "-B",
                &tb.receiver_addr().to_string(),
                "-p",
                &port.to_string(),
            ],
            Stdio::null(),
            Stdio::piped(),
        )?;
        Ok(Server { port, proc })
    }
}

/// Waits until every server's port is listening in the receiver namespace,
/// watching its listening sockets through inet_diag. (The servers bind the
/// receiver's IPv4 address, so their sockets are `AF_INET`.)
fn wait_listening(tb: &Testbed, servers: &mut [Server], timeout: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    let diag = DiagSocket::open_in_netns(&ccctl_sys::netns::named(&tb.ns(Role::Receiver)))?;
    loop {
        let listening = diag.listening_ports()?;
        let mut all = true;
        for s in servers.iter_mut() {
            if listening.contains(&s.port) {
                continue;
            }
            all = false;
            if let Some(st) = s.proc.try_wait()? {
                let mut stderr = String::new();
                if let Some(e) = s.proc.child_mut().stderr.as_mut() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut stderr);
                }
                return Err(Error::ServerStart {
                    port: s.port,
                    detail: format!("exited with {st}: {}", stderr.trim()),
                });
            }
        }
        if all {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::ServerStart {
                port: servers[0].port,
                detail: format!("not listening after {timeout:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Flows that have been started; [`RunningFlows::wait`] collects them.
/// Dropping it kills every client and server still running.
#[derive(Debug)]
pub struct RunningFlows {
    flows: Vec<(FlowSpec, u16, f64, NsProcess)>,
    _servers: Vec<Server>,
    max_runtime: Duration,
}

/// Starts one server per flow, waits until they listen, then launches every
/// client. Clients with a start offset run under `sh -c 'sleep <offset>; exec
/// iperf3 …'` so the call returns at once and offsets are relative to the
/// same instant (± process spawn time, a few ms).
pub fn spawn_flows(tb: &Testbed, specs: &[FlowSpec]) -> Result<RunningFlows> {
    for s in specs {
        if s.sender >= tb.num_senders() {
            return Err(Error::Spec(format!(
                "sender {} but the testbed has {}",
                s.sender,
                tb.num_senders()
            )));
        }
        if s.cc.is_empty() || s.cc.contains(char::is_whitespace) {
            return Err(Error::Spec(format!(
                "bad congestion control name {:?}",
                s.cc
            )));
        }
    }
    let ports: Vec<u16> = specs
        .iter()
        .map(|s| s.port.unwrap_or_else(|| tb.alloc_port()))
        .collect();
    let mut servers = Vec::with_capacity(specs.len());
    for &p in &ports {
        servers.push(Server::spawn(tb, p)?);
    }
    wait_listening(tb, &mut servers, Duration::from_secs(5))?;

    let rx = tb.receiver_addr().to_string();
    let mut flows = Vec::with_capacity(specs.len());
    let mut max_runtime = Duration::ZERO;
    let t0 = ccctl_core::sys::time::now_unix_f64();
    for (spec, &port) in specs.iter().zip(&ports) {
        let mut argv: Vec<String> = vec![
            "iperf3".into(),
            "-c".into(),
            rx.clone(),
            "-p".into(),
            port.to_string(),
            "-B".into(),
            tb.sender_addr(spec.sender).to_string(),
            "-C".into(),
            spec.cc.clone(),
            "-t".into(),
            spec.duration_secs().to_string(),
            "-J".into(),
        ];
        if let Some(o) = spec.omit {
            argv.extend(["-O".into(), o.to_string()]);
        }
        if let Some(i) = spec.interval {
            argv.extend(["-i".into(), format!("{:.3}", i.as_secs_f64())]);
        }
        argv.extend(spec.extra_args.iter().cloned());
        let argv = if spec.start_offset.is_zero() {
            argv
        } else {
            let script = format!(
                "sleep {:.3}; exec {}",
                spec.start_offset.as_secs_f64(),
                argv.join(" ")
            );
            vec!["sh".into(), "-c".into(), script]
        };
        let proc = tb.spawn(Role::Sender(spec.sender), &argv)?;
        let runtime = spec.start_offset
            + Duration::from_secs(spec.duration_secs() + spec.omit.unwrap_or(0) as u64);
        max_runtime = max_runtime.max(runtime);
        flows.push((
            spec.clone(),
            port,
            t0 + spec.start_offset.as_secs_f64(),
            proc,
        ));
    }
    Ok(RunningFlows {
        flows,
        _servers: servers,
        max_runtime,
    })
}

impl RunningFlows {
    /// Longest expected runtime (offset + omit + duration) of the flows.
    pub fn expected_runtime(&self) -> Duration {
        self.max_runtime
    }

    /// Whether every client process has exited (without reaping output).
    pub fn all_exited(&mut self) -> Result<bool> {
        for (_, _, _, proc) in &mut self.flows {
            if proc.try_wait()?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Server port of each flow, in spec order.
    pub fn ports(&self) -> Vec<u16> {
        self.flows.iter().map(|f| f.1).collect()
    }

    /// Waits for every client (killing any still running 20 s past the
    /// expected end) and parses their reports, in spec order.
    pub fn wait(self) -> Result<Vec<FlowResult>> {
        let deadline = std::time::Instant::now() + self.max_runtime + Duration::from_secs(20);
        let mut results = Vec::with_capacity(self.flows.len());
        for (spec, port, started, proc) in self.flows {
            let cmd = proc.cmd().to_string();
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let out = proc.wait_output(Some(left.max(Duration::from_secs(1))))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let report = parse_report(&stdout);
            let status = match out.status.code() {
                Some(c) => format!("exit code {c}"),
                None => out.status.to_string(),
            };
            match report {
                Ok(r) if r.error.is_none() && out.status.success() => {
                    results.push(FlowResult::from_report(spec, port, started, r))
                }
                Ok(r) => {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    let message = r.error.unwrap_or_default() + " " + stderr.trim();
                    return Err(Error::Iperf {
                        cmd,
                        status,
                        message: message.trim().to_string(),
                    });
                }
                Err(source) if out.status.success() => return Err(Error::Json { cmd, source }),
                Err(_) => {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    return Err(Error::Iperf {
                        cmd,
                        status,
                        message: format!("{} {}", stderr.trim(), stdout.trim()),
                    });
                }
            }
        }
        Ok(results)
    }
}

/// Runs several flows concurrently and waits for all of them.
pub fn run_flows(tb: &Testbed, specs: &[FlowSpec]) -> Result<Vec<FlowResult>> {
    spawn_flows(tb, specs)?.wait()
}

/// Runs one flow.
pub fn run_flow(tb: &Testbed, spec: &FlowSpec) -> Result<FlowResult> {
    Ok(run_flows(tb, std::slice::from_ref(spec))?.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on this host: iperf3 3.12, cubic, 4 s, 50 Mbit/s tbf (trimmed).
    const CUBIC_JSON: &str = r#"{
 "start": {"connected": [{"socket": 5, "local_host": "198.18.1.1", "local_port": 46812, "remote_host": "198.18.0.2", "remote_port": 5301}],
  "version": "iperf 3.12", "system_info": "Linux vm 6.18.44-fc-v445 #1 SMP PREEMPT_DYNAMIC @0 x86_64",
  "timestamp": {"time": "Sat, 21 Nov 2026 23:23:47 GMT", "timesecs": 1795303427},
  "connecting_to": {"host": "198.18.0.2", "port": 5301}, "cookie": "2egbx47zyu27djurdoh67vh6rdrf4oqwz4cf",
  "tcp_mss_default": 1448, "target_bitrate": 0, "sock_bufsize": 0, "sndbuf_actual": 16384, "rcvbuf_actual": 131072,
  "test_start": {"protocol": "TCP", "num_streams": 1, "blksize": 131072, "omit": 0, "duration": 4, "bytes": 0, "blocks": 0, "reverse": 0, "tos": 0, "target_bitrate": 0}},
 "intervals": [{"streams": [{"socket": 5, "start": 0, "end": 1.000131, "seconds": 1.0001310110092163, "bytes": 6174272, "bits_per_second": 49387705.6668377, "retransmits": 6, "snd_cwnd": 53576, "snd_wnd": 372736, "rtt": 8341, "rttvar": 420, "pmtu": 1500, "omitted": false, "sender": true}],
   "sum": {"start": 0, "end": 1.000131, "seconds": 1.0001310110092163, "bytes": 6174272, "bits_per_second": 49387705.6668377, "retransmits": 6, "omitted": false, "sender": true}}],
 "end": {"streams": [{"sender": {"socket": 5, "start": 0, "end": 4.000094, "seconds": 4.000094, "bytes": 24120784, "bits_per_second": 48240434.34979278, "retransmits": 20, "max_snd_cwnd": 57920, "max_snd_wnd": 372736, "max_rtt": 9085, "min_rtt": 6788, "mean_rtt": 7981, "sender": true},
   "receiver": {"socket": 5, "start": 0, "end": 4.007525, "seconds": 4.000094, "bytes": 23958608, "bits_per_second": 47827241.00286336, "sender": true}}],
  "sum_sent": {"start": 0, "end": 4.000094, "seconds": 4.000094, "bytes": 24120784, "bits_per_second": 48240434.34979278, "retransmits": 20, "sender": true},
  "sum_received": {"start": 0, "end": 4.007525, "seconds": 4.007525, "bytes": 23958608, "bits_per_second": 47827241.00286336, "sender": true},
  "cpu_utilization_percent": {"host_total": 1.5, "host_user": 0.1, "host_system": 1.4, "remote_total": 0.6, "remote_user": 0.0, "remote_system": 0.6},
  "sender_tcp_congestion": "cubic", "receiver_tcp_congestion": "cubic"}}"#;

    #[test]
    fn parse_cubic_report() {
        let r = parse_report(CUBIC_JSON).unwrap();
        let f = FlowResult::from_report(
            FlowSpec::new(0, "cubic", Duration::from_secs(4)),
            5301,
            0.0,
            r,
        );
        assert_eq!(f.local_port, Some(46812));
        assert_eq!(f.sender_bytes, 24120784);
        assert_eq!(f.receiver_bytes, 23958608);
        assert!((f.goodput_bps - 47827241.0).abs() < 1.0);
        assert_eq!(f.retransmits, 20);
        assert_eq!(f.sender_cc.as_deref(), Some("cubic"));
        assert_eq!(f.receiver_cc.as_deref(), Some("cubic"));
        assert_eq!(
            (f.min_rtt_us, f.mean_rtt_us, f.max_rtt_us),
            (Some(6788), Some(7981), Some(9085))
        );
        assert_eq!(f.intervals.len(), 1);
        assert_eq!(f.intervals[0].snd_cwnd_bytes, Some(53576));
        assert_eq!(f.intervals[0].rtt_us, Some(8341));
        assert_eq!(f.intervals[0].retransmits, Some(6));
    }

    #[test]
    fn parse_error_report() {
        let r = parse_report(r#"{"start":{"connected":[],"version":"iperf 3.12"},"intervals":[],"end":{},"error":"unable to connect to server: Connection refused"}"#).unwrap();
        assert!(r.error.unwrap().contains("Connection refused"));
    }

    #[test]
    fn duration_rounding() {
        assert_eq!(
            FlowSpec::new(0, "cubic", Duration::from_millis(4500)).duration_secs(),
            5
        );
        assert_eq!(
            FlowSpec::new(0, "cubic", Duration::from_secs(5)).duration_secs(),
            5
        );
        assert_eq!(FlowSpec::new(0, "cubic", Duration::ZERO).duration_secs(), 1);
    }
}
