//! bpf_bbr's modes and gains read back from its per-ACK trace against BBR
//! v1 as published (Cardwell et al., ACM Queue 2016; tcp_bbr.c): the
//! expected numbers are BBR's constants, written here from their
//! definitions (2/ln 2, ln 2/2, the 8-phase cycle, 4 packets for 200 ms),
//! not read from bbr_core.h. cwnd is the socket's own (`tp->snd_cwnd`).
use std::time::Duration;

use ccctl_lab::{
    iperf::{self, FlowSpec},
    testbed::TestbedConfig,
};

use super::flows::testbed;
use super::lab::{f64s, strs};
use super::tracing::{u64s, FlowTrace};
use super::{ccctl, tempdir, Clean};

/// STARTUP's pacing and cwnd gain: the smallest gain that doubles the
/// delivery rate every round, 2/ln 2.
pub fn startup_gain() -> f64 {
    2.0 / std::f64::consts::LN_2
}

/// DRAIN's pacing gain: the inverse, ln 2 / 2.
pub fn drain_gain() -> f64 {
    std::f64::consts::LN_2 / 2.0
}

/// Gains go through 1/256 fixed point (BBR_SCALE 8): one step of slack.
const GAIN_SLACK: f64 = 1.5 / 256.0;

#[derive(Debug, Default)]
pub struct Phases {
    pub events: usize,
    pub startup_events: usize,
    pub drain_events: usize,
    /// PROBE_BW up-probes (1.25) whose next phase was seen in PROBE_BW.
    pub probes_followed: usize,
    /// Gaps between consecutive up-probe starts, in min RTTs.
    pub cycle_min_rtts: Vec<f64>,
    /// (ms at 4 packets or less, events) of each complete PROBE_RTT.
    pub probe_rtts: Vec<(f64, usize)>,
    /// PROBE_RTTs (complete or not) during which the socket was in loss
    /// recovery or marked a packet lost.
    pub probe_rtts_under_loss: usize,
    pub goodput_bps: f64,
}

/// One traced bpf_bbr flow of `secs` on `cfg`; checks every event:
/// - STARTUP paces and sizes cwnd at 2/ln 2;
/// - DRAIN paces at ln 2/2 (cwnd gain still 2/ln 2), and follows STARTUP;
/// - PROBE_BW's up-probe (1.25) is followed by the 0.75 drain phase, and
///   consecutive up-probes are at least 7 min RTTs apart (the up-probe
///   and six cruise phases last more than one min RTT each);
/// - PROBE_RTT comes (the flow outlives min_rtt's 10 s window) and holds
///   the socket's cwnd at 4 packets or less on every ACK, for at least
///   200 ms.
///
/// `under_loss`: `cfg`'s loss list keeps dropping packets through the
/// flow, and at least one PROBE_RTT must then run in loss recovery (or see
/// a packet marked lost), holding its 4 packets all the same.
pub fn bpf_bbr_phases_follow_bbr_v1(cfg: TestbedConfig, secs: u64, under_loss: bool) -> Phases {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let dir = tempdir("bbr-phases");
    let out = dir.join("bbr.parquet");
    let tb = testbed(cfg);
    let trace = FlowTrace::start(&tb, "bpf-bbr", &out);
    let flows = iperf::run_flows(
        &tb,
        &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs(secs)).port(trace.port)],
    )
    .expect("flow");
    let df = trace.finish();
    let _ = tb.destroy();
    let data_port = flows[0].local_port.expect("local port") as u64;
    let sport = u64s(&df, "sport");
    let (ts, cwnd, min_rtt) = (
        u64s(&df, "ts_ns"),
        u64s(&df, "cwnd"),
        u64s(&df, "min_rtt_us"),
    );
    let (ca_state, lost) = (u64s(&df, "ca_state"), u64s(&df, "lost"));
    let mode = strs(&df, "bbr_mode");
    let pg: Vec<f64> = f64s(&df, "pacing_gain")
        .into_iter()
        .map(|v| v.unwrap_or(f64::NAN))
        .collect();
    let cg: Vec<f64> = f64s(&df, "cwnd_gain")
        .into_iter()
        .map(|v| v.unwrap_or(f64::NAN))
        .collect();
    let idx: Vec<usize> = (0..df.height())
        .filter(|&i| sport[i] == data_port)
        .collect();
    assert!(idx.len() > 1000, "{} events of the data socket", idx.len());
    let mut s = Phases {
        events: idx.len(),
        goodput_bps: flows[0].goodput_bps,
        ..Default::default()
    };
    let near = |a: f64, b: f64| (a - b).abs() <= GAIN_SLACK;
    let ms = |a: usize, b: usize| (ts[b] - ts[a]) as f64 / 1e6;

    // Runs of equal (mode, pacing gain): (first index into idx, last).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (k, &i) in idx.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if mode[idx[r.0]] == mode[i] && pg[idx[r.0]] == pg[i] => r.1 = k,
            _ => runs.push((k, k)),
        }
    }
    let mut seen_drain = false;
    let mut last_probe_start: Option<usize> = None;
    for (n, &(a, b)) in runs.iter().enumerate() {
        let (i, last) = (idx[a], idx[b]);
        let at = format!(
            "events {a}..={b} ({}, pacing gain {}, cwnd gain {}, {:.1} ms)",
            mode[i],
            pg[i],
            cg[i],
            ms(i, last)
        );
        match mode[i].as_str() {
            "startup" => {
                assert!(
                    near(pg[i], startup_gain()) && near(cg[i], startup_gain()),
                    "STARTUP must pace and size cwnd at 2/ln 2 = {:.3}: {at}",
                    startup_gain()
                );
                assert!(!seen_drain, "STARTUP again after DRAIN: {at}");
                s.startup_events += b - a + 1;
            }
            "drain" => {
                assert!(
                    near(pg[i], drain_gain()) && near(cg[i], startup_gain()),
                    "DRAIN must pace at ln 2/2 = {:.3} with cwnd gain 2/ln 2: {at}",
                    drain_gain()
                );
                seen_drain = true;
                s.drain_events += b - a + 1;
            }
            "probe_bw" => {
                assert!(near(cg[i], 2.0), "PROBE_BW's cwnd gain must be 2: {at}");
                assert!(
                    near(pg[i], 1.25) || near(pg[i], 0.75) || near(pg[i], 1.0),
                    "PROBE_BW's pacing gains are 1.25, 0.75 and 1: {at}"
                );
                if near(pg[i], 1.25) {
                    if let Some(p) = last_probe_start {
                        let min_rtt_ms = min_rtt[i] as f64 / 1000.0;
                        let gap = ms(p, i) / min_rtt_ms;
                        assert!(
                            gap >= 7.0 * 0.97,
                            "up-probes {:.1} ms apart, {gap:.2} min RTTs of {min_rtt_ms:.2} ms: \
                             the up-probe and six 1.0 phases last more than one min RTT each: {at}",
                            ms(p, i)
                        );
                        s.cycle_min_rtts.push(gap);
                    }
                    last_probe_start = Some(i);
                    if let Some(&(na, _)) = runs.get(n + 1) {
                        let j = idx[na];
                        if mode[j] == "probe_bw" {
                            assert!(
                                near(pg[j], 0.75),
                                "the up-probe (1.25) must be followed by the 0.75 drain phase, \
                                 not {}: {at}",
                                pg[j]
                            );
                            s.probes_followed += 1;
                        }
                    }
                }
            }
            "probe_rtt" => {
                last_probe_start = None;
                // TCP_CA_Recovery is 3, TCP_CA_Loss 4.
                if (a..=b).any(|k| ca_state[idx[k]] >= 3)
                    || lost[last] > lost[idx[a.saturating_sub(1)]]
                {
                    s.probe_rtts_under_loss += 1;
                }
                let over = (a..=b).find(|&k| cwnd[idx[k]] > 4);
                assert!(
                    over.is_none(),
                    "PROBE_RTT must hold cwnd at 4 packets or less; cwnd {} at event {}: {at}",
                    over.map_or(0, |k| cwnd[idx[k]]),
                    over.unwrap_or(0)
                );
                if let Some(&(na, _)) = runs.get(n + 1) {
                    // Complete: from its first ACK to the first after it.
                    let held = ms(i, idx[na]);
                    assert!(
                        held >= 200.0,
                        "PROBE_RTT held 4 packets for {held:.1} ms, not 200: {at}"
                    );
                    s.probe_rtts.push((held, b - a + 1));
                }
            }
            other => panic!("unknown BBR mode {other:?}: {at}"),
        }
    }
    println!("bpf_bbr phases: {s:?}");
    assert!(s.startup_events > 0, "no STARTUP: {s:?}");
    assert!(s.drain_events > 0, "no DRAIN: {s:?}");
    assert!(
        s.probes_followed >= 3,
        "fewer than 3 up-probes were followed in PROBE_BW: {s:?}"
    );
    assert!(
        !s.probe_rtts.is_empty(),
        "no complete PROBE_RTT in a {secs} s flow (min_rtt's window is 10 s): {s:?}"
    );
    if under_loss {
        assert!(
            s.probe_rtts_under_loss > 0,
            "the loss list did not put a loss into PROBE_RTT: {s:?}"
        );
    }
    s
}
