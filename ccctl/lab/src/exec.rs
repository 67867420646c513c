//! Executes one job: builds its testbed, runs iperf3 per flow, samples every
//! flow's socket through inet_diag every 100 ms, tears the testbed down.
//!
//! Sender hosts: flows with the same base RTT and the same On/Off schedule
//! share one sender namespace (the RTT lives on that host's ACK path, the
//! schedule gates that host), so tens of flows do not need tens of
//! namespaces. Each flow has its own iperf3 server port; its data
//! connection is the socket whose local port iperf3 reports at the end
//! (the control connection to the same port is dropped).
//!
//! A ping prober runs beside the flows, as Flent's does: `ping` from the
//! first sender host to the receiver every 200 ms, through the bottleneck
//! and that host's base RTT, its replies kept with their time.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::iperf::{self, FlowResult, FlowSpec};
use crate::scenario::{Aqm, FlowPlan, IpVersion};
use crate::testbed::{
    self, Gate, PathKind, QdiscStats, Role, SenderConfig, Testbed, TestbedConfig,
};
use ccctl_observe::sockdiag::DiagSocket;

use super::plan::Job;
use super::{interrupt, LabError};

/// One inet_diag reading of a flow's socket (`t`: seconds since the job's
/// flows were launched).
pub use ccctl_observe::sockdiag::Sample;

/// Socket sampling period.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(100);
/// How long past the flows' planned end we wait before collecting anyway.
const END_GRACE: Duration = Duration::from_secs(5);
/// The ping prober's interval (Flent's default step, 0.2 s).
pub const PING_PERIOD: Duration = Duration::from_millis(200);

/// One ping reply: `t` seconds since the flows were launched (when it was
/// received), its round-trip time.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PingSample {
    pub t: f64,
    pub rtt_ms: f64,
}

/// The replies in `ping -n -D` output (`[<unix time>] 64 bytes from ...:
/// icmp_seq=1 ttl=63 time=30.4 ms`), timed from `t0_unix`. Other lines
/// (the header, the summary, "no answer") are skipped.
pub fn parse_ping(text: &str, t0_unix: f64) -> Vec<PingSample> {
    text.lines()
        .filter_map(|l| {
            let stamp = l
                .strip_prefix('[')?
                .split(']')
                .next()?
                .parse::<f64>()
                .ok()?;
            let rtt = l
                .split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()?;
            Some(PingSample {
                t: stamp - t0_unix,
                rtt_ms: rtt,
            })
        })
        .collect()
}

/// `ping` from the first sender host to the receiver for `secs`, its output
/// to a file (a pipe would fill and stall it on a long run). The file is
/// anonymous (`O_TMPFILE`): its replies are read back through our own
/// handle, and nothing is left in the temp dir however the run ends (a
/// SIGKILL of the lab too).
struct PingProber {
    proc: crate::testbed::NsProcess,
    replies: std::fs::File,
}

impl PingProber {
    fn start(tb: &Testbed, secs: Duration) -> Option<PingProber> {
        let opened = tempfile::tempfile().and_then(|r| Ok((r.try_clone()?, r)));
        let (file, replies) = opened
            .map_err(|e| tracing::warn!("no ping prober: a file for its replies: {e}"))
            .ok()?;
        let argv = [
            "ping".to_string(),
            "-n".into(),
            "-D".into(),
            "-i".into(),
            format!("{:.3}", PING_PERIOD.as_secs_f64()),
            "-w".into(),
            secs.as_secs().max(1).to_string(),
            tb.receiver_addr().to_string(),
        ];
        match tb.spawn_stdio(
            Role::Sender(0),
            &argv,
            std::process::Stdio::from(file),
            std::process::Stdio::null(),
        ) {
            Ok(proc) => Some(PingProber { proc, replies }),
            Err(e) => {
                tracing::warn!("no ping prober: {e}");
                None
            }
        }
    }

    /// Stops it (it has normally ended by its deadline) and reads its replies.
    fn finish(mut self, t0_unix: f64) -> Vec<PingSample> {
        self.proc.kill();
        // ping's writes moved the offset the two handles share.
        use std::io::{Read, Seek, SeekFrom};
        let mut text = String::new();
        if let Err(e) = self
            .replies
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.replies.read_to_string(&mut text))
        {
            tracing::warn!("reading ping's replies: {e}");
        }
        parse_ping(&text, t0_unix)
    }
}

#[derive(Debug, Clone)]
pub struct FlowRecord {
    pub plan: FlowPlan,
    /// Name given to `iperf3 -C`.
    pub kernel_cc: String,
    pub sender: usize,
    pub result: FlowResult,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub struct JobRecord {
    pub job: Job,
    pub flows: Vec<FlowRecord>,
    pub bottleneck: Option<QdiscStats>,
    pub started_unix: f64,
    pub wall_secs: f64,
    /// Sampling rounds in which inet_diag failed (the last error is logged).
    pub sample_failures: u64,
    /// The `tc` configuration of this job's testbed, for the metadata.
    pub qdiscs: Vec<String>,
    /// Wall time spent building the testbed, running the flows, tearing down.
    pub phase_secs: [f64; 3],
    /// CLOCK_MONOTONIC at `t = 0` of the samples (aligns per-ACK traces).
    pub t0_monotonic_ns: u64,
    /// Per-ACK trace of our algorithms' flows in this run, if taken.
    pub trace: Option<std::path::PathBuf>,
    /// The path emulator and its cost.
    pub path: Option<PathUsage>,
    /// The ping prober's replies (empty when it could not run).
    pub ping: Vec<PingSample>,
}

/// Distinct (base RTT, schedule) pairs in order of first appearance: one
/// sender host each; and each flow's host. A flow with a drop list has a
/// host of its own (the testbed's loss lists are per sender host).
pub fn sender_hosts(flows: &[FlowPlan]) -> (Vec<SenderConfig>, Vec<usize>) {
    let mut hosts: Vec<SenderConfig> = Vec::new();
    let mut own: Vec<bool> = Vec::new();
    let senders = flows
        .iter()
        .map(|f| {
            let host = SenderConfig {
                rtt: f.rtt,
                gate: f.schedule.map(|s| Gate {
                    on: s.on.0,
                    off: s.off.0,
                }),
            };
            let shared = f.drop.is_empty();
            match hosts
                .iter()
                .zip(&own)
                .position(|(h, o)| shared && !o && *h == host)
            {
                Some(i) => i,
                None => {
                    hosts.push(host);
                    own.push(!shared);
                    hosts.len() - 1
                }
            }
        })
        .collect();
    (hosts, senders)
}

/// How a run's path was emulated and what the emulator cost.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PathUsage {
    /// `userspace` (ccctl-path) or `qdisc` (tbf, netem).
    pub emulator: String,
    /// The userspace emulator's threads and their CPU time over the run.
    pub threads: usize,
    pub cpu_secs: f64,
    /// CPU time over the flows' wall time (1.0 = one core busy).
    pub cpu_share: f64,
    /// Packets the userspace path's loss list and random loss dropped.
    pub listed_losses: u64,
    pub random_losses: u64,
    /// Packets the userspace path's reordering cell let overtake.
    #[serde(default)]
    pub reordered: u64,
    /// Packets the kernel dropped at the emulator's sockets before the
    /// emulated path saw them (it fell behind): the run is testbed-limited.
    pub socket_drops: u64,
    /// Packets the userspace emulator read more than 1 ms after they
    /// arrived at its sockets (its thread was descheduled or busy), and
    /// the longest such wait, ms. The emulator dates packets by their
    /// arrival, so a late read delays them but costs the link no rate.
    #[serde(default)]
    pub late_reads: u64,
    #[serde(default)]
    pub max_read_lag_ms: f64,
    /// Packets the userspace emulator read with their arrival time, both
    /// directions, over the run: the base of `late_reads`.
    #[serde(default)]
    pub reads: u64,
    /// From the end of the warm-up on, the window the run's figures come
    /// from (a start of 128 flows reads late in the warm-up and is cut
    /// with it): the packets read, those read late, and the mean wait of
    /// every read, ms (the delay the emulator added to the path's). 0 in
    /// runs recorded before they were counted: they judge nothing.
    #[serde(default)]
    pub reads_after_warmup: u64,
    #[serde(default)]
    pub late_reads_after_warmup: u64,
    #[serde(default)]
    pub mean_read_lag_ms_after_warmup: f64,
    /// The mean wait this run allows ([`read_lag_limit`]), ms.
    #[serde(default)]
    pub read_lag_limit_ms: f64,
    /// The share of the machine's CPU time the hypervisor gave to other
    /// guests during the flows (`/proc/stat`; 0 on bare metal): a lab run
    /// measures wall-clock behaviour, and steal shows in it as a slower
    /// path and later timers.
    #[serde(default)]
    pub cpu_steal: f64,
}

/// The mean wait a read may add, as the share of the shortest time the run
/// sets, and at least [`READ_LAG_FLOOR`]: the tolerance the lab holds the
/// emulated RTT to (ping within max(0.5 ms, 2 %) of the configured RTT).
pub const READ_LAG_SHARE: f64 = 0.02;
pub const READ_LAG_FLOOR: Duration = Duration::from_micros(500);

/// The mean read lag `job` allows: 2 % of the shortest time it sets (a
/// flow's base RTT, a gate's On or Off window), at least 0.5 ms. A packet
/// read late leaves late by as much, so beyond this the path's timing is
/// the emulator's, not the scenario's: behind patched BBR's Heavy gate at
/// 150 Mbit/s (On 10 ms) the emulator's mean wait was 4.4 ms, at 50 Mbit/s
/// 0.04-0.07 ms, and in the seeds' other runs at most 0.2 ms (docs/lab.md).
pub fn read_lag_limit(job: &Job) -> Duration {
    let shortest = job
        .flows
        .iter()
        .flat_map(|f| {
            [
                Some(f.rtt),
                f.schedule.map(|s| s.on.0),
                f.schedule.map(|s| s.off.0),
            ]
        })
        .flatten()
        .filter(|d| !d.is_zero())
        .min()
        .unwrap_or(job.link.rtt.0);
    shortest.mul_f64(READ_LAG_SHARE).max(READ_LAG_FLOOR)
}

impl PathUsage {
    /// Whether the emulator, not the scenario's path, shaped this run: the
    /// kernel dropped packets at its sockets, or after the warm-up its
    /// reads waited longer on average than the run allows.
    pub fn fell_behind(&self) -> bool {
        self.socket_drops > 0
            || (self.reads_after_warmup > 0
                && self.mean_read_lag_ms_after_warmup > self.read_lag_limit_ms)
    }
}

/// CPU steal during a run above which the run's log warns.
const WARN_CPU_STEAL: f64 = 0.05;

/// The testbed of `job` on `path`. A bandwidth trace that no longer
/// reads (validated with the scenario) is an error.
pub fn testbed_config(job: &Job, path: PathKind) -> Result<TestbedConfig, LabError> {
    let (hosts, senders) = sender_hosts(&job.flows);
    let mut cfg = TestbedConfig::new(job.link.rate.bps(), job.link.buffer_bytes);
    cfg.senders = hosts;
    cfg.path = path;
    if job.link.loss > 0.0 {
        cfg = cfg.with_loss(job.link.loss);
    }
    for (f, &host) in job.flows.iter().zip(&senders) {
        if !f.drop.is_empty() {
            cfg = cfg.with_loss_list(host, &f.drop);
        }
    }
    cfg.reverse_rate_bps = job.link.reverse_rate.map(|r| r.bps());
    if let Some(r) = job.link.reorder {
        // The waiting packets' RTT is the flows' RTT: the delay they wait
        // comes out of the ACK path (validated below every RTT).
        for h in &mut cfg.senders {
            h.rtt = h.rtt.saturating_sub(r.delay.0);
        }
        cfg = cfg.with_reorder(testbed::Reorder {
            share: r.share,
            delay: r.delay.0,
        });
    }
    if let Some(t) = &job.link.trace {
        cfg.trace = Some(
            testbed::BandwidthTrace::load(Path::new(t)).map_err(|e| LabError::Testbed(e.into()))?,
        );
    }
    Ok(cfg
        .with_aqm(match job.link.aqm {
            Aqm::TailDrop => testbed::Aqm::TailDrop,
            Aqm::FqCodel => testbed::Aqm::FqCodel,
            Aqm::Codel => testbed::Aqm::CoDel,
        })
        .with_ip(match job.link.ip {
            IpVersion::V4 => testbed::IpVersion::V4,
            IpVersion::V6 => testbed::IpVersion::V6,
        }))
}

/// Runs `job`; `kernel_cc` maps scenario names to `iperf3 -C` names.
pub fn run_job(
    job: &Job,
    kernel_cc: &BTreeMap<String, String>,
    path: PathKind,
) -> Result<JobRecord, LabError> {
    let started_unix = ccctl_core::sys::time::now_unix_f64();
    let wall = Instant::now();
    let cfg = testbed_config(job, path)?;
    let tb = Testbed::new(cfg)?;
    if let Some(sig) = interrupt::received() {
        return Err(LabError::Interrupted(sig));
    }
    let (_, senders) = sender_hosts(&job.flows);
    let setup_secs = wall.elapsed().as_secs_f64();

    let mut diag = Vec::new();
    for i in 0..tb.num_senders() {
        let path = Path::new("/run/netns").join(tb.ns(Role::Sender(i)));
        diag.push(DiagSocket::open_in_netns(&path)?);
    }

    let mut specs = Vec::with_capacity(job.flows.len());
    for (f, &sender) in job.flows.iter().zip(&senders) {
        let cc = kernel_cc
            .get(&f.cc)
            .cloned()
            .unwrap_or_else(|| f.cc.clone());
        specs.push(
            FlowSpec::new(sender, &cc, f.duration)
                .start_offset(f.start)
                .port(tb.alloc_port()),
        );
    }
    let ports: Vec<u16> = specs.iter().filter_map(|s| s.port).collect();
    let receiver = tb.receiver_addr();

    let ticks_at_start = ccctl_core::sys::cpu::CpuTicks::now().ok();
    let mut running = iperf::spawn_flows(&tb, &specs)?;
    let t0 = Instant::now();
    let t0_unix = ccctl_core::sys::time::now_unix_f64();
    let t0_monotonic_ns = ccctl_core::sys::time::monotonic_ns();
    let planned = running.expected_runtime();
    let prober = PingProber::start(&tb, job.duration);
    // (flow index, local port) -> samples; the control connection is dropped later.
    let mut raw: BTreeMap<(usize, u16), Vec<Sample>> = BTreeMap::new();
    let mut sample_failures = 0u64;
    let mut next = t0;
    // The emulator's counters where the warm-up ends.
    let mut at_warmup = None;
    loop {
        if let Some(sig) = interrupt::received() {
            return Err(LabError::Interrupted(sig));
        }
        let t = t0.elapsed().as_secs_f64();
        if at_warmup.is_none() && t >= job.warmup.as_secs_f64() {
            at_warmup = tb.path_stats();
        }
        for (sender, sock) in diag.iter().enumerate() {
            match sock.tcp_sockets() {
                Ok(socks) => {
                    for s in socks {
                        if s.remote.ip() != receiver {
                            continue;
                        }
                        let Some(flow) = ports.iter().position(|&p| p == s.remote.port()) else {
                            continue;
                        };
                        if senders[flow] != sender {
                            continue;
                        }
                        if let Some(info) = s.info {
                            raw.entry((flow, s.local.port())).or_default().push(Sample {
                                t,
                                info,
                                bbr: s.bbr,
                            });
                        }
                    }
                }
                Err(e) => {
                    sample_failures += 1;
                    tracing::debug!(error = %e, "inet_diag sampling failed");
                }
            }
        }
        let elapsed = t0.elapsed();
        if elapsed >= planned && (running.all_exited()? || elapsed >= planned + END_GRACE) {
            break;
        }
        next += SAMPLE_PERIOD;
        let now = Instant::now();
        if next > now {
            interrupt::sleep(next - now);
        } else {
            next = now; // fell behind (slow machine): do not burst
        }
    }
    let results = running.wait()?;
    let cpu_steal = match (ticks_at_start, ccctl_core::sys::cpu::CpuTicks::now()) {
        (Some(a), Ok(b)) => a.steal_share_until(&b),
        _ => 0.0,
    };
    let ping = prober.map(|p| p.finish(t0_unix)).unwrap_or_default();
    tb.check_gates()?;
    let flow_secs = wall.elapsed().as_secs_f64() - setup_secs;
    let bottleneck = tb.bottleneck_stats().ok();
    let stats = tb.path_stats();
    let after_warmup = stats.zip(at_warmup);
    let path_usage = PathUsage {
        emulator: tb.config().path.name().into(),
        threads: tb.path_cpu().map_or(0, |c| c.threads),
        cpu_secs: tb.path_cpu().map_or(0.0, |c| c.cpu.as_secs_f64()),
        cpu_share: tb
            .path_cpu()
            .map_or(0.0, |c| c.cpu.as_secs_f64() / flow_secs.max(1e-9)),
        listed_losses: stats.map_or(0, |s| s.listed_losses),
        random_losses: stats.map_or(0, |s| s.random_losses),
        reordered: stats.map_or(0, |s| s.reordered),
        socket_drops: stats.map_or(0, |s| s.socket_drops),
        late_reads: stats.map_or(0, |s| s.late_reads),
        reads: stats.map_or(0, |s| s.reads),
        reads_after_warmup: after_warmup.map_or(0, |(s, w)| s.reads - w.reads),
        late_reads_after_warmup: after_warmup.map_or(0, |(s, w)| s.late_reads - w.late_reads),
        mean_read_lag_ms_after_warmup: after_warmup.map_or(0.0, |(s, w)| {
            s.mean_read_lag_since(&w).as_secs_f64() * 1000.0
        }),
        read_lag_limit_ms: read_lag_limit(job).as_secs_f64() * 1000.0,
        max_read_lag_ms: stats.map_or(0.0, |s| s.max_read_lag_us as f64 / 1000.0),
        cpu_steal,
    };
    if cpu_steal > WARN_CPU_STEAL {
        tracing::warn!(
            "run {}: the hypervisor took {:.1} % of this machine's CPU time during the flows \
             (CPU steal): timings and rates of this run may reflect the machine",
            job.id,
            100.0 * cpu_steal
        );
    }
    if path_usage.socket_drops > 0 {
        tracing::warn!(
            "run {}: the path emulator fell behind: the kernel dropped {} packets at its sockets \
             (marked testbed-limited)",
            job.id,
            path_usage.socket_drops
        );
    }
    if path_usage.socket_drops == 0 && path_usage.fell_behind() {
        tracing::warn!(
            "run {}: the path emulator fell behind: after the warm-up its reads waited {:.2} ms on \
             average (this run allows {:.2} ms), {} of {} more than 1 ms, the longest in the run \
             {:.1} ms (marked testbed-limited)",
            job.id,
            path_usage.mean_read_lag_ms_after_warmup,
            path_usage.read_lag_limit_ms,
            path_usage.late_reads_after_warmup,
            path_usage.reads_after_warmup,
            path_usage.max_read_lag_ms
        );
    }
    let qdiscs = qdisc_description(&tb);
    tb.destroy()?;
    let teardown_secs = wall.elapsed().as_secs_f64() - setup_secs - flow_secs;

    let flows = job
        .flows
        .iter()
        .zip(results)
        .enumerate()
        .map(|(i, (plan, result))| {
            let samples = result
                .local_port
                .and_then(|p| raw.remove(&(i, p)))
                .unwrap_or_default();
            FlowRecord {
                plan: plan.clone(),
                kernel_cc: result.spec.cc.clone(),
                sender: senders[i],
                result,
                samples,
            }
        })
        .collect();
    Ok(JobRecord {
        job: job.clone(),
        flows,
        bottleneck,
        started_unix,
        wall_secs: wall.elapsed().as_secs_f64(),
        sample_failures,
        qdiscs,
        phase_secs: [setup_secs, flow_secs, teardown_secs],
        t0_monotonic_ns,
        trace: None,
        path: Some(path_usage),
        ping,
    })
}

/// `tc qdisc show` of every router interface, one line per qdisc; on the
/// userspace path, the emulator's cells.
fn qdisc_description(tb: &Testbed) -> Vec<String> {
    if tb.config().path == PathKind::Userspace {
        let c = tb.config();
        let mut out = vec![format!(
            "userspace path (ccctl-path, rattan-core): bottleneck {} bit/s{}, {} queue, limit {} B{}{}{}",
            c.rate_bps,
            if c.trace.is_some() { " (bandwidth trace)" } else { "" },
            c.aqm.queue_kind().name(),
            c.buffer_bytes,
            c.loss.map(|p| format!(", random loss {p}")).unwrap_or_default(),
            c.reverse_rate_bps
                .map(|r| format!(", ACK path {r} bit/s"))
                .unwrap_or_default(),
            c.reorder
                .map(|r| format!(
                    ", reordering: a share {} overtakes, the rest waits {} us",
                    r.share,
                    r.delay.as_micros()
                ))
                .unwrap_or_default(),
        )];
        for (i, s) in c.senders.iter().enumerate() {
            out.push(format!(
                "sender {i}: ACK-path delay {} us{}",
                s.rtt.as_micros(),
                s.gate
                    .map(|g| format!(
                        ", gate on {} us / off {} us",
                        g.on.as_micros(),
                        g.off.as_micros()
                    ))
                    .unwrap_or_default()
            ));
        }
        for (i, l) in &c.loss_lists {
            out.push(format!("sender {i}: drops data packets {l:?}"));
        }
        return out;
    }
    let shown = |role: Role, prefix: &str| -> Vec<String> {
        tb.exec(role, &["tc", "qdisc", "show"])
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| !l.contains("noqueue"))
                    .map(|l| format!("{prefix}{l}"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = shown(Role::Router, "");
    // Gated senders' own taprio roots (the On/Off schedule), prefixed by host.
    for (i, s) in tb.config().senders.iter().enumerate() {
        if s.gate.is_some() {
            out.extend(shown(Role::Sender(i), &format!("sender {i}: ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(mean_lag_ms: f64, limit_ms: f64, socket_drops: u64) -> PathUsage {
        PathUsage {
            emulator: "userspace".into(),
            threads: 1,
            cpu_secs: 0.0,
            cpu_share: 0.0,
            listed_losses: 0,
            random_losses: 0,
            reordered: 0,
            socket_drops,
            // The whole run's counts, warm-up included, judge nothing.
            late_reads: 1_000_000,
            max_read_lag_ms: 100.0,
            reads: 1_000_000,
            reads_after_warmup: 100_000,
            late_reads_after_warmup: 5_000,
            mean_read_lag_ms_after_warmup: mean_lag_ms,
            read_lag_limit_ms: limit_ms,
            cpu_steal: 0.0,
        }
    }

    #[test]
    fn a_run_whose_emulator_added_too_much_delay_fell_behind() {
        assert!(!usage(0.5, 0.5, 0).fell_behind(), "the limit itself");
        assert!(usage(0.51, 0.5, 0).fell_behind());
        assert!(usage(0.0, 0.5, 1).fell_behind(), "a socket drop");
        // metadata.json of an older run has none of the counts after the
        // warm-up: read as 0, and judged by socket drops alone.
        let mut old = serde_json::to_value(usage(9.0, 0.5, 0)).expect("json");
        for field in [
            "reads",
            "reads_after_warmup",
            "late_reads_after_warmup",
            "mean_read_lag_ms_after_warmup",
            "read_lag_limit_ms",
        ] {
            old.as_object_mut().expect("object").remove(field);
        }
        let back: PathUsage = serde_json::from_value(old).expect("an older run reads");
        assert_eq!((back.reads, back.reads_after_warmup), (0, 0));
        assert!(!back.fell_behind());
    }

    #[test]
    fn the_read_lag_a_run_allows_is_2_percent_of_its_shortest_time() {
        let job = |toml: &str| {
            let sc = crate::scenario::Scenario::from_toml(&format!(
                "name = \"t\"\nduration = \"20s\"\nbaselines = false\n{toml}\n[link]\nrate = \"20mbit\"\nrtt = \"48ms\"\nbuffer = \"1bdp\"\n"
            ))
            .expect("scenario");
            crate::plan::plan(&sc)
                .jobs
                .into_iter()
                .find(|j| j.kind == crate::plan::JobKind::Main)
                .expect("main run")
        };
        // 2 % of 48 ms.
        let ungated = job("flows = \"cubic:1\"");
        assert_eq!(read_lag_limit(&ungated), Duration::from_micros(960));
        // Behind a 10 / 70 ms gate: 2 % of 10 ms is below the 0.5 ms floor.
        let gated =
            job("flows = [{ cc = \"cubic\", schedule = { on = \"10ms\", off = \"70ms\" } }]");
        assert_eq!(read_lag_limit(&gated), Duration::from_micros(500));
        // 2 % of a 40 ms Off window.
        let medium =
            job("flows = [{ cc = \"cubic\", schedule = { on = \"40ms\", off = \"40ms\" } }]");
        assert_eq!(read_lag_limit(&medium), Duration::from_micros(800));
    }

    #[test]
    fn ping_replies_are_timed_from_the_flows_launch() {
        let text = "PING 198.18.0.2 (198.18.0.2) 56(84) bytes of data.\n\
            [1795801777.250000] 64 bytes from 198.18.0.2: icmp_seq=1 ttl=63 time=30.4 ms\n\
            [1795801777.450000] no answer yet for icmp_seq=2\n\
            [1795801777.650000] 64 bytes from 198.18.0.2: icmp_seq=3 ttl=63 time=181 ms\n\
            \n--- 198.18.0.2 ping statistics ---\n\
            3 packets transmitted, 2 received, 33% packet loss, time 400ms\n\
            rtt min/avg/max/mdev = 30.4/105.7/181.0/75.3 ms\n";
        let got = parse_ping(text, 1795801777.0);
        assert_eq!(got.len(), 2);
        assert!((got[0].t - 0.25).abs() < 1e-6 && got[0].rtt_ms == 30.4);
        assert!((got[1].t - 0.65).abs() < 1e-6 && got[1].rtt_ms == 181.0);
        assert!(parse_ping("", 0.0).is_empty());
    }
}
