//! Modest BBR on a real kernel, and `ccctl tune` reaching a running flow.
//! Shared by the host and VM test binaries.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use ccctl::{
    diag::DiagSocket,
    iperf::{self, FlowResult, FlowSpec},
    testbed::{buffer_bdp, Role, Testbed, TestbedConfig},
};

use super::{ccctl, flows::*, Clean};

/// modest_bbr registers, carries a flow through the router's bottleneck at
/// `min_share` of its rate or more, and `ss -ti` names it on the socket.
pub fn modest_bbr_carries_a_flow(cfg: TestbedConfig, secs: u64, min_share: f64) {
    let _clean = Clean::new();
    let rate = cfg.rate_bps as f64;
    let (flow, seen) = modest_bbr_flow(cfg, secs);
    assert_carries(rate, &flow, &seen, min_share);
}

/// Loads modest-bbr (if it is not loaded) and runs one modest_bbr flow on
/// sender 0 of a testbed built from `cfg`, ss sampling its socket.
pub fn modest_bbr_flow(cfg: TestbedConfig, secs: u64) -> (FlowResult, Vec<String>) {
    ccctl(&["load", "modest-bbr"]).ok();
    assert!(
        super::registered("modest_bbr"),
        "modest_bbr is not in the kernel's list after load"
    );
    let tb = testbed(cfg);
    flow_with_ss(&tb, "modest_bbr", secs)
}

/// The flow ran modest_bbr (iperf3 and ss agree) at `min_share` of `rate`.
pub fn assert_carries(rate: f64, flow: &FlowResult, seen: &[String], min_share: f64) {
    println!(
        "modest_bbr: {:.1} Mbit/s of {:.0} ({:.0} %), {} retransmits, ss saw {:?}",
        mbit(flow.goodput_bps),
        mbit(rate),
        100.0 * flow.goodput_bps / rate,
        flow.retransmits,
        seen
    );
    assert_eq!(
        flow.sender_cc.as_deref(),
        Some("modest_bbr"),
        "iperf3 did not run modest_bbr"
    );
    assert!(!seen.is_empty(), "ss never saw the data socket");
    // iperf3 may set TCP_CONGESTION on its data socket just after ss first
    // lists it: the default (cubic) may come first, then only modest_bbr.
    let after_first: &[String] = if seen.first().is_some_and(|c| c != "modest_bbr") {
        &seen[1..]
    } else {
        seen
    };
    assert!(
        !after_first.is_empty() && after_first.iter().all(|c| c == "modest_bbr"),
        "ss saw {seen:?}"
    );
    assert!(
        flow.goodput_bps >= min_share * rate,
        "goodput {:.1} Mbit/s is below {:.0} % of {:.0} Mbit/s",
        mbit(flow.goodput_bps),
        100.0 * min_share,
        mbit(rate)
    );
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
    ccctl(&["load", "bbr"]).ok();
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
        let tune = run(&["tune", "bbr", "--cwnd-gain", "1"]);
        std::thread::sleep(Duration::from_secs(8));
        let reset = run(&["tune", "bbr", "--reset"]);
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
