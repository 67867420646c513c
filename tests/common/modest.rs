//! Modest BBR on a real kernel, and `ccctl tune` reaching a running flow.
//! Shared by the host and VM test binaries.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use ccctl_lab::{
    iperf::{self, FlowSpec},
    testbed::{buffer_bdp, Reorder, Role, Testbed, TestbedConfig},
};
use ccctl_observe::sockdiag::DiagSocket;

use super::{ccctl, flows::*, Clean};

/// modest_bbr registers, carries a flow through the router's bottleneck at
/// `min_share` of its rate or more, and `ss -ti` names it on the socket.
pub fn modest_bbr_carries_a_flow(cfg: TestbedConfig, secs: u64, min_share: f64) {
    let _clean = Clean::new();
    let rate = cfg.rate_bps as f64;
    let (flow, seen) = loaded_flow("modest-bbr", "modest_bbr", cfg, secs);
    assert_carries("modest_bbr", rate, &flow, &seen, min_share);
}

fn median(mut v: Vec<u32>) -> f64 {
    assert!(!v.is_empty(), "no socket readings in a phase");
    v.sort_unstable();
    v[v.len() / 2] as f64
}

/// A live `ccctl tune` reaches a flow that is already running, without a
/// reconnect, and `--reset` brings it back.
///
/// The parameter with an unmistakable effect is the cwnd gain: over a deep
/// buffer (8 BDP) BBR's PROBE_BW holds cwnd at cwnd_gain x BDP plus small
/// allowances. The flow runs bpf_bbr: under Modest BBR one retransmission
/// (a slow emulator makes some even on 8 BDP) starts the window search,
/// which caps cwnd near one BDP whatever the gain, and a VM run measured
/// 48 packets both before and after the tune. The gain, the map and the
/// path from `ccctl tune` to the running flow are the same for every
/// BBR-based algorithm. One flow runs 30 s; its socket's cwnd is read
/// every 100 ms through inet_diag while another thread runs, at 8 s,
/// `tune --cwnd-gain 1` and, 8 s after that returned, `tune --reset` (ccctl
/// itself may take seconds to start in the emulated VM, so phases are timed
/// from when each command returned). Median cwnd of each phase (from 2 s
/// after its command returned to the next command): tuned at most 75 % of
/// the default's, reset at least 85 % of it; one socket (local port) all
/// along, still moving data.
pub fn live_tune_reaches_a_running_flow(rate_bps: u64, rtt: Duration) {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let tb: Testbed = testbed(
        TestbedConfig::new(rate_bps, buffer_bdp(rate_bps, rtt, 8.0, 1500)).with_rtts(&[rtt]),
    );
    let port = tb.alloc_port();
    let secs = 30.0;
    let running = iperf::spawn_flows(
        &tb,
        &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs_f64(secs)).port(port)],
    )
    .expect("flow");
    let diag = DiagSocket::open_in_netns(&Path::new("/run/netns").join(tb.ns(Role::Sender(0))))
        .expect("diag socket");
    let start = Instant::now();

    // (started, returned) of each command, seconds since `start`.
    let tuner = std::thread::spawn(move || {
        let run = |args: &[&str]| {
            let t0 = start.elapsed().as_secs_f64();
            let out = ccctl(args).ok();
            let t1 = start.elapsed().as_secs_f64();
            println!(
                "t={t0:.1}..{t1:.1}s: ccctl {}\n{}",
                args.join(" "),
                out.stdout.trim_end()
            );
            (t0, t1)
        };
        std::thread::sleep(Duration::from_secs(8));
        let tune = run(&["tune", "bpf-bbr", "--cwnd-gain", "1"]);
        std::thread::sleep(Duration::from_secs(8));
        let reset = run(&["tune", "bpf-bbr", "--reset"]);
        (tune, reset)
    });

    // (seconds since start, local port, cwnd, bytes acked) toward the server
    // port: the data connection and iperf3's control one.
    let mut readings: Vec<(f64, u16, u32, u64)> = Vec::new();
    while start.elapsed().as_secs_f64() < secs - 0.5 {
        let t = start.elapsed().as_secs_f64();
        for s in diag.tcp_sockets().expect("inet_diag") {
            if s.remote.port() == port {
                if let Some(i) = s.info {
                    readings.push((t, s.local.port(), i.snd_cwnd, i.bytes_acked.unwrap_or(0)));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let ((tune_at, tuned_at), (reset_at, reset_done)) = tuner.join().expect("tuner thread");
    let flows = running.wait().expect("the flow finishes");
    let flow = &flows[0];
    assert_eq!(flow.sender_cc.as_deref(), Some("bpf_bbr"));
    let data_port = flow
        .local_port
        .expect("iperf3 reported its data connection");
    assert!(
        reset_done + 3.0 < secs,
        "ccctl tune took until {reset_done:.1} s of a {secs} s flow"
    );

    let mine: Vec<&(f64, u16, u32, u64)> = readings.iter().filter(|r| r.1 == data_port).collect();
    let phase = |from: f64, to: f64| {
        median(
            mine.iter()
                .filter(|r| r.0 >= from && r.0 < to)
                .map(|r| r.2)
                .collect(),
        )
    };
    let (default, gain1, back) = (
        phase(3.0, tune_at),
        phase(tuned_at + 2.0, reset_at),
        phase(reset_done + 2.0, secs),
    );
    let ratio = gain1 / default;
    let text = format!(
        "live tune, {} Mbit/s, {} ms, 8 BDP, one bpf_bbr flow: median cwnd {default:.0} pkt at cwnd_gain 2, \
         {gain1:.0} after `tune --cwnd-gain 1` ({:.0} %), {back:.0} after `--reset` ({:.0} %); {:.1} Mbit/s overall",
        rate_bps / 1_000_000,
        rtt.as_millis(),
        100.0 * ratio,
        100.0 * back / default,
        mbit(flow.goodput_bps)
    );
    println!("{text}");
    // One connection all along: no reconnect, and it kept moving data.
    assert!(
        mine.len() >= 100,
        "only {} readings of the data connection",
        mine.len()
    );
    let acked_after_reset = mine
        .iter()
        .filter(|r| r.0 >= reset_done)
        .map(|r| r.3)
        .max()
        .unwrap_or(0);
    let acked_before_tune = mine
        .iter()
        .filter(|r| r.0 < tune_at)
        .map(|r| r.3)
        .max()
        .unwrap_or(0);
    assert!(
        acked_after_reset > acked_before_tune,
        "the data connection stalled"
    );
    assert!(ratio <= 0.75, "cwnd did not follow the tune: {text}");
    assert!(
        back / default >= 0.85,
        "--reset did not bring cwnd back: {text}"
    );
}

/// One row of a Modest BBR trace: what Alg. 1's checks read.
struct SearchEvent {
    ts_ns: u64,
    cwnd: u64,
    ca_open: bool,
    probe_bw: bool,
    phase: String,
    version: u64,
    pacing_gain: f64,
    min_win: u64,
    max_win: u64,
    last_cwnd: u64,
    min_rtt_us: u64,
    /// `tp->total_retrans` at this ACK: the feedback Alg. 1 reads.
    total_retrans: u64,
    /// BBR's bandwidth estimate (bit/s) and the socket's MSS (bytes): the
    /// BDP the window in force is bounded by.
    btl_bw_bps: u64,
    mss: u64,
}

/// What a traced Modest BBR flow did, checked against Alg. 1.
#[derive(Debug, Default)]
struct SearchSummary {
    /// Searches started from last_cwnd >= the caller's minimum, per W_min
    /// (x1024) in force.
    starts: std::collections::BTreeMap<u64, usize>,
    /// Steps after a round with a retransmission (max_win moved down).
    steps_down: usize,
    /// Steps after a clean round (min_win moved up).
    steps_up: usize,
    steps: usize,
    linear_events: usize,
    scaled_pacing_events: usize,
    /// Growths of last_cwnd at the top of the linear phase (departure 4).
    growths: usize,
    /// Largest last_cwnd / BDP at a search start (the bound checked).
    max_start_over_bdp: f64,
}

/// BBR's floor on any window it sets (bbr_core.h BBR_CWND_MIN_TARGET).
const CWND_MIN_TARGET: u64 = 4;

/// What BBR's window in force may hold beyond one BDP: tcp_bbr.c's
/// quantization budget (3 TSO bursts of at most 2 segments at these rates,
/// rounded up to even, 2 more while probing) and a packet of rounding.
const BDP_ALLOWANCE: f64 = 3.0 * 2.0 + 1.0 + 2.0 + 1.0;

/// Checks a Modest BBR trace (one socket, every ACK, none dropped) against
/// Alg. 1 of the paper with W_max = 1 and S_min = 1, its feedback read from
/// the traced `total_retrans`, not from the implementation's state:
/// - a search starts (lines 1-6) only on an ACK that saw a retransmission
///   (total_retrans grew since the previous ACK);
/// - it starts at min_win = last_cwnd x W_min (line 4), max_win halfway
///   between last_cwnd and min_win (line 5), both to within one packet of
///   integer rounding, BBR's 4-packet floor under both; `w_min_of(version)`
///   is the W_min (x1024) of each parameter version, and starts from
///   last_cwnd >= `min_last_cwnd` are counted per W_min;
/// - after a round in which a retransmission occurred the step moves
///   max_win down to the midpoint (lines 8-10), after a clean round it
///   moves min_win up (lines 11-13). A round is the span between two steps;
///   the first step after a start is judged only when the round(s) since
///   the start were clean (the round the search began in is skipped, and
///   the trace does not show where it ended).
/// - in the linear phase last_cwnd grows (departure 4) by S_min at a time,
///   and only after `quiet_rounds` round trips without a retransmission:
///   the time since total_retrans last grew must cover quiet_rounds - 1
///   rounds, each at least 0.8 min_rtt (the first round may be cut short).
///
/// Panics naming the first event that breaks a rule.
fn check_search(
    ev: &[SearchEvent],
    w_min_of: impl Fn(u64) -> u64,
    min_last_cwnd: u64,
    quiet_rounds: u64,
) -> SearchSummary {
    let s_min = 1;
    let mut sum = SearchSummary::default();
    let mut last_retrans_ns = ev.first().map_or(0, |e| e.ts_ns);
    let mut last_move_ns = 0;
    // Index of the previous step (None right after a start) and of the start.
    let mut last_step: Option<usize> = None;
    let mut search_start = 0;
    for (i, e) in ev.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| &ev[p]);
        if prev.is_some_and(|p| e.total_retrans > p.total_retrans) {
            last_retrans_ns = e.ts_ns;
        }
        if let Some(p) = prev.filter(|p| p.phase == "linear" && e.phase == "linear") {
            if e.last_cwnd != p.last_cwnd {
                let quiet_us = (e.ts_ns - last_retrans_ns) / 1000;
                assert!(
                    e.last_cwnd == p.last_cwnd + s_min
                        && quiet_us * 10 >= quiet_rounds.saturating_sub(1) * e.min_rtt_us * 8,
                    "event {i}: last_cwnd {} -> {} at the top {quiet_us} us after the last retransmission \
                     (growth is by S_min = {s_min}, after {quiet_rounds} quiet rounds of >= 0.8 x min_rtt {} us)",
                    p.last_cwnd,
                    e.last_cwnd,
                    e.min_rtt_us
                );
                sum.growths += 1;
            }
        }
        let was_searching = prev.is_some_and(|p| p.phase == "binary");
        if e.phase == "binary" && !was_searching {
            // Line 1: only a retransmission starts a search.
            let p = prev.expect("a trace starts before any search");
            assert!(
                e.total_retrans > p.total_retrans,
                "event {i}: a search started on an ACK without a retransmission (total_retrans {} -> {})",
                p.total_retrans,
                e.total_retrans
            );
            // Line 2: last_cwnd is the window in force: BBR's in-flight
            // target of one BDP (btl_bw x min RTT), not its 2 BDP cwnd cap.
            let bdp = e.btl_bw_bps as f64 / 8.0 * e.min_rtt_us as f64 / 1e6 / e.mss.max(1) as f64;
            assert!(
                e.last_cwnd as f64 <= 1.05 * bdp + BDP_ALLOWANCE,
                "event {i}: a search must start from the window in force, at most one BDP \
                 ({bdp:.1} packets: {} bit/s x min RTT {} us) plus {BDP_ALLOWANCE} packets, not last_cwnd {}",
                e.btl_bw_bps,
                e.min_rtt_us,
                e.last_cwnd
            );
            if bdp > 0.0 {
                sum.max_start_over_bdp = sum.max_start_over_bdp.max(e.last_cwnd as f64 / bdp);
            }
            // Lines 3-5 in real arithmetic, to within a packet of rounding.
            let w = w_min_of(e.version) as f64 / 1024.0;
            let floor = CWND_MIN_TARGET as f64;
            let min_win = (e.last_cwnd as f64 * w).max(floor);
            let max_win = ((e.last_cwnd as f64 + e.min_win as f64) / 2.0).max(e.min_win as f64);
            assert!(
                (e.min_win as f64 - min_win).abs() < 1.0
                    && (e.max_win as f64 - max_win).abs() <= 1.0,
                "event {i}: a search from last_cwnd {} with W_min {w} must start at [{min_win:.1}, {max_win:.1}], not [{}, {}]",
                e.last_cwnd,
                e.min_win,
                e.max_win
            );
            if e.last_cwnd >= min_last_cwnd {
                *sum.starts.entry(w_min_of(e.version)).or_default() += 1;
            }
            last_move_ns = e.ts_ns;
            last_step = None;
            search_start = i;
        } else if was_searching && (e.phase == "binary" || e.phase == "linear") {
            // Lines 8-18: either nothing moved, or one bound moved to the
            // midpoint; the search ends exactly when the bounds are S_min
            // or less apart.
            let p = prev.expect("was_searching");
            let mid = (p.min_win + p.max_win) / 2;
            let moved = (e.min_win, e.max_win) != (p.min_win, p.max_win);
            assert!(
                !moved
                    || (e.min_win, e.max_win) == (mid, p.max_win)
                    || (e.min_win, e.max_win) == (p.min_win, mid),
                "event {i}: [{}, {}] -> [{}, {}] is not a binary-search step (midpoint {mid})",
                p.min_win,
                p.max_win,
                e.min_win,
                e.max_win
            );
            assert_eq!(
                e.last_cwnd, p.last_cwnd,
                "event {i}: last_cwnd changed mid-search"
            );
            // A search may start with its bounds already S_min apart (BBR's
            // 4-packet floor under both): it ends at its first step.
            assert!(
                if e.phase == "linear" {
                    e.max_win - e.min_win <= s_min
                } else {
                    !moved || e.max_win - e.min_win > s_min
                },
                "event {i}: phase {} after a step to bounds [{}, {}]",
                e.phase,
                e.min_win,
                e.max_win
            );
            if moved {
                // Lines 8-13 against the round's own feedback.
                let from = last_step.unwrap_or(search_start);
                let retransmitted = e.total_retrans > ev[from].total_retrans;
                let down = (e.min_win, e.max_win) == (p.min_win, mid) && mid != p.max_win;
                let up = (e.min_win, e.max_win) == (mid, p.max_win) && mid != p.min_win;
                if retransmitted && last_step.is_some() {
                    assert!(
                        down,
                        "event {i}: after a round with retransmissions (total_retrans {} -> {}) [{}, {}] must move max_win down to {mid}, got [{}, {}]",
                        ev[from].total_retrans, e.total_retrans, p.min_win, p.max_win, e.min_win, e.max_win
                    );
                    sum.steps_down += 1;
                } else if !retransmitted {
                    assert!(
                        up,
                        "event {i}: after a clean round (total_retrans {}) [{}, {}] must move min_win up to {mid}, got [{}, {}]",
                        e.total_retrans, p.min_win, p.max_win, e.min_win, e.max_win
                    );
                    sum.steps_up += 1;
                }
                last_step = Some(i);
            }
            if moved || e.phase == "linear" {
                // One step per round trip; the round the search began in
                // is skipped. A round lasts at least one min_rtt.
                let gap_us = (e.ts_ns - last_move_ns) / 1000;
                assert!(
                    gap_us * 10 >= e.min_rtt_us * 8,
                    "event {i}: a search step {gap_us} us after the previous one, min_rtt {} us",
                    e.min_rtt_us
                );
                last_move_ns = e.ts_ns;
                sum.steps += 1;
            }
        }
        if !(e.probe_bw && e.ca_open) || e.phase == "inactive" {
            continue;
        }
        // The searched window is in force, never above BBR's own.
        let cap = match e.phase.as_str() {
            "binary" => e.max_win.max(CWND_MIN_TARGET),
            _ => e.last_cwnd.max(CWND_MIN_TARGET),
        };
        assert!(
            e.cwnd <= cap,
            "event {i}: cwnd {} above the {} window {cap}",
            e.cwnd,
            e.phase
        );
        if e.phase == "linear" {
            sum.linear_events += 1;
        } else {
            // Eq. 1: pacing at the searched proportion of BBR's rate; BBR's
            // largest gain is 1.25, the proportion at most max_win/last_cwnd.
            let bound =
                1.25 * e.max_win.max(CWND_MIN_TARGET) as f64 / e.last_cwnd as f64 + 1.0 / 256.0;
            assert!(
                e.pacing_gain <= bound,
                "event {i}: pacing gain {} while searching [{}, {}] of {} (at most {bound:.3})",
                e.pacing_gain,
                e.min_win,
                e.max_win,
                e.last_cwnd
            );
            if e.pacing_gain < 1.0 - 1e-9 && (e.pacing_gain - 0.75).abs() > 1e-9 {
                sum.scaled_pacing_events += 1;
            }
        }
    }
    sum
}

/// Alg. 1 on a real socket, read from its per-ACK trace, with one W_min
/// given at load time and another tuned while the flow runs.
///
/// modest-bbr is loaded with `--wmin 0.6 --quiet-rounds 16` (before any flow: the first
/// search must already use it); one modest_bbr flow runs `secs` over a
/// shallow buffer with the tracer on its port, beside a Cubic flow from
/// the second sender that keeps the buffer overflowing (alone, Modest BBR
/// soon stops losing packets and starts no new search); halfway, `ccctl tune modest-bbr --wmin 0.5`. Every search start
/// must follow a retransmission and sit at [last_cwnd x W_min, halfway to
/// last_cwnd] for the W_min of the parameter version the event carries,
/// with starts from last_cwnd >= `min_last_cwnd` under both (at 20 packets
/// or more W_min 0.5 and 0.6 differ by 2 packets or more, beyond the check's
/// one-packet rounding allowance); every step must move max_win down after
/// a round with a retransmission and min_win up after a clean one (both
/// seen), to the midpoint, at most once per round trip;
/// the linear phase begins exactly when the bounds are S_min apart; cwnd
/// stays within the searched window and the pacing gain within the
/// searched proportion (eq. 1).
pub fn modest_search_follows_alg1(cfg: TestbedConfig, secs: u64, min_last_cwnd: u64) {
    use super::lab::{f64s, strs};
    use super::tracing::{u64s, FlowTrace};

    let _clean = Clean::new();
    // A loss list on the Modest sender forces rounds with a retransmission
    // inside running searches: at least one must be judged.
    assert!(
        cfg.loss_lists.iter().any(|(s, l)| *s == 0 && !l.is_empty()),
        "the test needs a loss list on the Modest sender (sender 0)"
    );
    ccctl(&[
        "load",
        "modest-bbr",
        "--wmin",
        "0.6",
        "--quiet-rounds",
        "16",
    ])
    .ok();
    let dir = super::tempdir("modest-search");
    let out = dir.join("modest.parquet");
    let tb = testbed(cfg);
    let trace = FlowTrace::start(&tb, "modest-bbr", &out);
    let running = iperf::spawn_flows(
        &tb,
        &[
            FlowSpec::new(0, "modest_bbr", Duration::from_secs(secs)).port(trace.port),
            FlowSpec::new(1, "cubic", Duration::from_secs(secs)),
        ],
    )
    .expect("flows");
    std::thread::sleep(Duration::from_secs(secs / 2));
    ccctl(&["tune", "modest-bbr", "--wmin", "0.5"]).ok();
    let flows = running.wait().expect("the flow finishes");
    let df = trace.finish();
    let data_port = flows[0].local_port.expect("local port") as u64;
    let sport = u64s(&df, "sport");
    let (ts, cwnd, ca_state, version) = (
        u64s(&df, "ts_ns"),
        u64s(&df, "cwnd"),
        u64s(&df, "ca_state"),
        u64s(&df, "param_version"),
    );
    let (min_win, max_win, last_cwnd, min_rtt) = (
        u64s(&df, "min_win"),
        u64s(&df, "max_win"),
        u64s(&df, "last_cwnd"),
        u64s(&df, "min_rtt_us"),
    );
    let (phase, mode) = (strs(&df, "modest_phase"), strs(&df, "bbr_mode"));
    let retrans = u64s(&df, "total_retrans");
    let (btl_bw, mss) = (u64s(&df, "btl_bw_bps"), u64s(&df, "mss"));
    let gain = f64s(&df, "pacing_gain");
    let events: Vec<SearchEvent> = (0..df.height())
        .filter(|&i| sport[i] == data_port)
        .map(|i| SearchEvent {
            ts_ns: ts[i],
            cwnd: cwnd[i],
            ca_open: ca_state[i] == 0,
            probe_bw: mode[i] == "probe_bw",
            phase: phase[i].clone(),
            version: version[i],
            pacing_gain: gain[i].unwrap_or(f64::NAN),
            min_win: min_win[i],
            max_win: max_win[i],
            last_cwnd: last_cwnd[i],
            min_rtt_us: min_rtt[i],
            total_retrans: retrans[i],
            btl_bw_bps: btl_bw[i],
            mss: mss[i],
        })
        .collect();
    assert!(events.len() > 1000, "{} events", events.len());
    let first_version = events[0].version;
    let sum = check_search(
        &events,
        |v| if v == first_version { 614 } else { 512 },
        min_last_cwnd,
        16,
    );
    let versions: std::collections::BTreeSet<u64> = events.iter().map(|e| e.version).collect();
    println!(
        "modest_bbr trace: {} events, {:.1} Mbit/s, {} retransmits, parameter versions {versions:?}, {sum:?}",
        events.len(),
        flows[0].goodput_bps / 1e6,
        flows[0].retransmits
    );
    assert_eq!(
        versions.len(),
        2,
        "the tune must show as a new parameter version"
    );
    assert!(
        sum.starts.get(&614).is_some_and(|&n| n > 0),
        "no search with the load-time W_min 0.6"
    );
    assert!(
        sum.starts.get(&512).is_some_and(|&n| n > 0),
        "no search with the tuned W_min 0.5"
    );
    assert!(
        sum.steps > 0 && sum.linear_events > 0,
        "the search never stepped or ended"
    );
    // Clean rounds are the common judged case. Rounds with retransmissions
    // are mostly the first after a start, which the trace cannot judge (the
    // skipped round's end is not traced); the loss list puts more drops a
    // round apart into each search, so steps after lossy rounds are judged
    // in every run, and required.
    assert!(
        sum.steps_up > 0,
        "no step after a clean round was judged: {sum:?}"
    );
    assert!(
        sum.steps_down > 0,
        "the loss list put retransmissions into running searches, yet no step after a \
         lossy round was judged: {sum:?}"
    );
    assert!(
        sum.scaled_pacing_events > 0,
        "the pacing gain was never scaled (eq. 1)"
    );
    let _ = tb.destroy();
}

/// What a lone flow did around a loss burst forced on its data path, read
/// from its socket (inet_diag every 100 ms), never from the algorithm's
/// state. Times in seconds since the burst ended.
#[derive(Debug)]
pub struct BurstRecovery {
    /// Acknowledged bit/s from 1 s into the flow to the burst.
    pub before_bps: f64,
    /// Segments the socket retransmitted from the burst's start to 1 s
    /// after its end (`tcp_info.total_retrans`).
    pub retrans_in_burst: u32,
    /// Smallest cwnd (packets) the socket showed from the burst to the end.
    pub min_cwnd_after: u32,
    /// Acknowledged bit/s in each second after the burst: [0, 1), [1, 2), ...
    pub per_second_bps: Vec<f64>,
    /// How long the burst lasted, start to end of the `tc` commands.
    pub burst_secs: f64,
}

impl BurstRecovery {
    /// The median of the per-second acknowledged rates over seconds
    /// [from, to) after the burst: one second cut by BBR's PROBE_RTT (some
    /// 200 ms at 4 packets, every 10 s) does not move it, a pinned window
    /// (every second low) does.
    pub fn median_bps(&self, from: usize, to: usize) -> f64 {
        let mut s = self.per_second_bps[from..to].to_vec();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    }

    /// The first second after the burst whose acknowledged rate reached
    /// `bps`, if any.
    pub fn first_second_at(&self, bps: f64) -> Option<usize> {
        self.per_second_bps.iter().position(|&r| r >= bps)
    }
}

/// Seconds of flow the burst recovery is read over (after the burst ends).
pub const RECOVERY_SECS: usize = 10;

/// One flow of `cc` (already registered) on sender 0 of a testbed built
/// from `cfg` (which must have a loss path: `with_loss(0.0)`); `burst_at`
/// after the data connection first moved data (64 KiB acknowledged, which
/// the control connection never reaches), the data path drops `loss` of
/// the packets for `burst`, then none; the flow runs on for
/// [`RECOVERY_SECS`] more. Throughput is what the receiver acknowledged
/// (the socket's `bytes_acked`).
pub fn lone_flow_through_a_loss_burst(
    cc: &str,
    cfg: TestbedConfig,
    burst_at: Duration,
    burst: Duration,
    loss: f64,
) -> BurstRecovery {
    let tb = testbed(cfg);
    let port = tb.alloc_port();
    // iperf3 may take a second or two to connect in the emulated VM.
    let secs = burst_at.as_secs_f64() + burst.as_secs_f64() + RECOVERY_SECS as f64 + 4.0;
    let running = iperf::spawn_flows(
        &tb,
        &[FlowSpec::new(0, cc, Duration::from_secs_f64(secs)).port(port)],
    )
    .expect("starting iperf3");
    let diag = DiagSocket::open_in_netns(&ccctl_sys::netns::named(&tb.ns(Role::Sender(0))))
        .expect("diag socket");
    let start = Instant::now();
    let (mut first_moved, mut burst_on, mut burst_off) = (None::<f64>, None::<f64>, None::<f64>);
    // (seconds since start, local port, bytes acked, total_retrans, cwnd).
    let mut readings: Vec<(f64, u16, u64, u32, u32)> = Vec::new();
    loop {
        let t = start.elapsed().as_secs_f64();
        if burst_off.is_some_and(|off| t >= off + RECOVERY_SECS as f64 + 0.2) || t > secs + 5.0 {
            break;
        }
        for s in diag.tcp_sockets().expect("inet_diag") {
            if s.remote.port() == port {
                if let Some(i) = s.info {
                    let acked = i.bytes_acked.unwrap_or(0);
                    if acked >= 64 << 10 && first_moved.is_none() {
                        first_moved = Some(t);
                    }
                    readings.push((t, s.local.port(), acked, i.total_retrans, i.snd_cwnd));
                }
            }
        }
        let t = start.elapsed().as_secs_f64();
        if let Some(t0) = first_moved {
            if burst_on.is_none() && t >= t0 + burst_at.as_secs_f64() {
                burst_on = Some(t);
                tb.set_loss(loss).expect("starting the loss burst");
            } else if let Some(on) = burst_on.filter(|_| burst_off.is_none()) {
                if t >= on + burst.as_secs_f64() {
                    tb.set_loss(0.0).expect("ending the loss burst");
                    burst_off = Some(start.elapsed().as_secs_f64());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let flows = running.wait().expect("the flow finishes");
    let _ = tb.destroy();
    let t0 = first_moved.expect("the data connection never moved data");
    let (on, off) = (
        burst_on.expect("the flow ended before the burst"),
        burst_off.expect("the flow ended during the burst"),
    );
    let data_port = flows[0]
        .local_port
        .expect("iperf3 reported its data connection");
    assert_eq!(flows[0].sender_cc.as_deref(), Some(cc));
    let mine: Vec<_> = readings.iter().filter(|r| r.1 == data_port).collect();
    let acked: Vec<(f64, u64)> = mine.iter().map(|r| (r.0, r.2)).collect();
    let acked_rate = |from: f64, to: f64| super::flows::acked_rate(&acked, from, to);
    let retrans_at = |t: f64| mine.iter().rev().find(|r| r.0 <= t).map_or(0, |r| r.3);
    assert!(
        mine.last()
            .is_some_and(|r| r.0 >= off + RECOVERY_SECS as f64 - 0.3),
        "the data connection was not seen until {RECOVERY_SECS} s after the burst"
    );
    BurstRecovery {
        before_bps: acked_rate(t0 + 1.0, on),
        retrans_in_burst: retrans_at(off + 1.0) - retrans_at(on),
        min_cwnd_after: mine
            .iter()
            .filter(|r| r.0 >= on)
            .map(|r| r.4)
            .min()
            .unwrap_or(0),
        per_second_bps: (0..RECOVERY_SECS)
            .map(|s| acked_rate(off + s as f64, off + s as f64 + 1.0))
            .collect(),
        burst_secs: off - on,
    }
}

/// One lone flow on a reordering path, as the sender's kernel saw it.
#[derive(Debug, Clone)]
pub struct ReorderedFlow {
    pub cc: String,
    /// Receiver-side goodput, bit/s, after the first 2 s (slow start).
    pub goodput_bps: f64,
    pub retransmits: u64,
    /// Segments the receiver reported as received twice (DSACK): the
    /// retransmissions that were spurious (`TcpExt.TCPDSACKRecv`).
    pub dsacks: u64,
    /// Loss episodes the kernel undid (`TCPFullUndo`, `TCPPartialUndo`,
    /// `TCPDSACKUndo`, `TCPLossUndo`).
    pub undos: u64,
    /// Packets the bottleneck dropped: real losses (the reordering drops
    /// none).
    pub bottleneck_drops: u64,
    /// Packets the path's reordering cell let overtake.
    pub overtook: u64,
    /// The testbed's own stalls, whatever the algorithm: packets the
    /// emulator read late (and the longest wait, ms), and packets the
    /// kernel dropped before the emulator read them (real losses).
    pub late_reads: u64,
    pub max_read_lag_ms: f64,
    pub socket_drops: u64,
}

/// The sender namespace's TcpExt counters (`/proc/net/netstat` read from
/// inside it: per network namespace, so a fresh testbed starts at 0).
fn sender_tcp_ext(tb: &Testbed) -> std::collections::BTreeMap<String, u64> {
    let out = tb
        .exec(Role::Sender(0), &["cat", "/proc/net/netstat"])
        .expect("reading /proc/net/netstat in the sender namespace");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let mut counters = std::collections::BTreeMap::new();
    for pair in lines.chunks(2) {
        if let [names, values] = pair {
            if names.starts_with("TcpExt:") && values.starts_with("TcpExt:") {
                for (n, v) in names
                    .split_whitespace()
                    .zip(values.split_whitespace())
                    .skip(1)
                {
                    counters.insert(n.to_string(), v.parse().unwrap_or(0));
                }
            }
        }
    }
    assert!(
        counters.contains_key("TCPDSACKRecv"),
        "no TcpExt counters in /proc/net/netstat: {text}"
    );
    counters
}

/// `net.ipv4.tcp_recovery` in the sender's namespace on a reordering
/// path: RACK (0x1) with its reordering window static (0x2, min_rtt / 4).
/// By default the kernel widens that window on every round with a DSACK
/// (and keeps it for 16 recoveries), so after a few spurious episodes in
/// the first second it retransmits nothing more (host, 2026-11-29: 0-2
/// retransmissions in the 14 s after it): the branch under test would
/// come only at the start. Static, the window (5 ms at a 20 ms min_rtt)
/// never covers a 20 ms displacement, so every run of overtaken packets
/// is retransmitted, DSACKed and undone, all through the flow.
pub const RACK_STATIC_REO_WND: &str = "3";

/// One lone flow of `cc` (registered) for `secs` on a fresh testbed built
/// from `cfg` (which should reorder: [`TestbedConfig::with_reorder`]),
/// the sender's RACK reordering window static ([`RACK_STATIC_REO_WND`]).
pub fn lone_flow_on_a_reordering_path(cc: &str, cfg: TestbedConfig, secs: u64) -> ReorderedFlow {
    let tb = testbed(cfg);
    let key = "net.ipv4.tcp_recovery";
    tb.exec(
        Role::Sender(0),
        &["sysctl", "-w", &format!("{key}={RACK_STATIC_REO_WND}")],
    )
    .expect("sysctl -w in the sender's namespace");
    let got = tb
        .exec(Role::Sender(0), &["sysctl", "-n", key])
        .expect("sysctl -n in the sender's namespace");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        RACK_STATIC_REO_WND
    );
    let flow = iperf::run_flow(
        &tb,
        &FlowSpec::new(0, cc, Duration::from_secs(secs)).omit(2),
    )
    .expect("iperf3");
    let ext = sender_tcp_ext(&tb);
    let bottleneck = tb.bottleneck_stats().expect("the bottleneck's counters");
    let path = tb.path_stats().unwrap_or_default();
    let _ = tb.destroy();
    assert_eq!(flow.sender_cc.as_deref(), Some(cc));
    let get = |n: &str| ext.get(n).copied().unwrap_or(0);
    ReorderedFlow {
        cc: cc.to_string(),
        goodput_bps: flow.goodput_bps,
        retransmits: flow.retransmits,
        dsacks: get("TCPDSACKRecv"),
        undos: [
            "TCPFullUndo",
            "TCPPartialUndo",
            "TCPDSACKUndo",
            "TCPLossUndo",
        ]
        .iter()
        .map(|n| get(n))
        .sum(),
        bottleneck_drops: bottleneck.drops,
        overtook: path.reordered,
        late_reads: path.late_reads,
        max_read_lag_ms: path.max_read_lag_us as f64 / 1000.0,
        socket_drops: path.socket_drops,
    }
}

/// The least modest_bbr / bpf_bbr goodput of one pair on the reordering
/// path, and of the pairs' median. Between what a Modest BBR that ignores
/// the undo carries (mutant `UNDO_IGNORED`: pairs 0.312-0.644 over four
/// runs, medians <= 0.55) and what the correct one carried: 0.977-1.027
/// here over 6 pairs, but 0.853, 0.864 and 0.999 in CI's host phase of
/// 2026-11-29 (under 10 % steal), which the earlier 0.9 / 0.95 failed.
pub const LEAST_PAIR_RATIO: f64 = 0.75;
pub const LEAST_MEDIAN_RATIO: f64 = 0.8;

/// Spurious losses do not hold Modest BBR down (departure 10): on a path
/// that reorders after the bottleneck (`reorder.share` of the data
/// packets, in short runs, overtake the rest by `reorder.delay`; the rest
/// of the RTT on the ACK path), the overtaken packets look lost until the
/// kernel has learnt the reordering, it retransmits them, and DSACKs show
/// the retransmissions were spurious, so the kernel undoes the episode.
/// Alg. 1 reads each as congestion; with the undo ending the search (and
/// the undone retransmissions never starting one), a lone modest_bbr flow
/// carries what a lone bpf_bbr flow carries on the same path: `pairs`
/// pairs run in turn (ABBA), every pair >= [`LEAST_PAIR_RATIO`] and their
/// median >= [`LEAST_MEDIAN_RATIO`].
/// Each run must show DSACKs in the sender's own kernel counters and
/// packets that overtook on the path (else it did not reorder) and no drop
/// at the bottleneck (else some loss was real).
pub fn reordering_does_not_hold_it_down(
    cfg: TestbedConfig,
    reorder: Reorder,
    pairs: usize,
    secs: u64,
) {
    let _clean = Clean::new();
    ccctl(&["load", "modest-bbr"]).ok();
    ccctl(&["load", "bpf-bbr"]).ok();
    let rate = cfg.rate_bps;
    let cfg = cfg.with_reorder(reorder);
    let run = |cc: &str| lone_flow_on_a_reordering_path(cc, cfg.clone(), secs);
    let line = |f: &ReorderedFlow| {
        format!(
            "{} {:.2} Mbit/s, {} retransmits, {} DSACKs, {} undos, {} overtook, \
             testbed: {} late reads (longest {:.1} ms), {} socket drops",
            f.cc,
            f.goodput_bps / 1e6,
            f.retransmits,
            f.dsacks,
            f.undos,
            f.overtook,
            f.late_reads,
            f.max_read_lag_ms,
            f.socket_drops
        )
    };
    let record = |lines: &[String], ratios: &[f64], median: Option<f64>| {
        super::equivalence::record(
            "modest_reordering.txt",
            &format!(
                "lone flows on a reordering path ({} Mbit/s, {:.1} % of packets {:?} early, {} kB buffer, {} path): {}; \
                 modest_bbr / bpf_bbr per pair {:.3?}, median {}",
                rate / 1_000_000,
                100.0 * reorder.share,
                reorder.delay,
                cfg.buffer_bytes / 1000,
                cfg.path.name(),
                lines.join("; "),
                ratios,
                median.map_or("(not reached)".to_string(), |m| format!("{m:.3}"))
            ),
        );
    };
    let mut ratios: Vec<f64> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    for i in 0..pairs {
        let (m, b) = if i % 2 == 0 {
            let m = run("modest_bbr");
            (m, run("bpf_bbr"))
        } else {
            let b = run("bpf_bbr");
            (run("modest_bbr"), b)
        };
        lines.push(line(&m));
        lines.push(line(&b));
        ratios.push(m.goodput_bps / b.goodput_bps);
        // What was measured is recorded whichever way the pair fails.
        if m.dsacks == 0 || b.dsacks == 0 {
            record(&lines, &ratios, None);
            panic!("a run saw no DSACK: the path did not reorder ({m:?}, {b:?})");
        }
        if m.bottleneck_drops > 0 || b.bottleneck_drops > 0 {
            record(&lines, &ratios, None);
            panic!("the bottleneck dropped packets: not every loss was spurious ({m:?}, {b:?})");
        }
        // Every pair must reach the least ratio, so a pair below it decides
        // the test now: the pairs still to come could not change the verdict
        // (a wrong implementation is failed in one pair, not three).
        if ratios[i] < LEAST_PAIR_RATIO {
            record(&lines, &ratios, None);
            panic!(
                "modest_bbr carried {ratios:.3?} x bpf_bbr on a reordering path (each >= {LEAST_PAIR_RATIO}, \
                 median >= {LEAST_MEDIAN_RATIO} needed; pair {} of {pairs} is below, the rest not run): {}",
                i + 1,
                lines.join("; ")
            );
        }
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    record(&lines, &ratios, Some(median));
    // Every pair reached LEAST_PAIR_RATIO above; the median is left.
    assert!(
        median >= LEAST_MEDIAN_RATIO,
        "modest_bbr carried {ratios:.3?} x bpf_bbr on a reordering path (each >= {LEAST_PAIR_RATIO}, \
         median >= {LEAST_MEDIAN_RATIO} needed): {}",
        lines.join("; ")
    );
}
