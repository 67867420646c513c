//! Modest BBR on a real kernel, and `ccctl tune` reaching a running flow.
//! Shared by the host and VM test binaries.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use ccctl::{
    diag::DiagSocket,
    iperf::{self, FlowSpec},
    testbed::{buffer_bdp, Role, Testbed, TestbedConfig},
};

use super::{ccctl, flows::*, Clean};

/// modest_bbr registers, carries a flow through the router's bottleneck at
/// `min_share` of its rate or more, and `ss -ti` names it on the socket.
pub fn modest_bbr_carries_a_flow(cfg: TestbedConfig, secs: u64, min_share: f64) {
    let _clean = Clean::new();
    let rate = cfg.rate_bps as f64;
    ccctl(&["load", "modest-bbr"]).ok();
    assert!(
        super::registered("modest_bbr"),
        "modest_bbr is not in the kernel's list after load"
    );
    let tb = testbed(cfg);
    let (flow, seen) = flow_with_ss(&tb, "modest_bbr", secs);
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
    assert!(seen.iter().all(|c| c == "modest_bbr"), "ss saw {seen:?}");
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
/// buffer (8 BDP: no loss, so Modest BBR's search stays inactive and the
/// window is BBR's) PROBE_BW holds cwnd at cwnd_gain x BDP plus small
/// allowances. One modest_bbr flow runs 24 s; its socket's cwnd is read
/// every 100 ms through inet_diag. At 8 s `tune --cwnd-gain 1`, at 16 s
/// `tune --reset`. The median cwnd of each phase's last 4 s: tuned at most
/// 75 % of the default's, reset at least 85 % of it; the same socket
/// (local port) all along.
pub fn live_tune_reaches_a_running_flow(rate_bps: u64, rtt: Duration) {
    let _clean = Clean::new();
    ccctl(&["load", "modest-bbr"]).ok();
    let tb: Testbed = testbed(
        TestbedConfig::new(rate_bps, buffer_bdp(rate_bps, rtt, 8.0, 1500)).with_rtts(&[rtt]),
    );
    let port = tb.alloc_port();
    let running = iperf::spawn_flows(
        &tb,
        &[FlowSpec::new(0, "modest_bbr", Duration::from_secs(24)).port(port)],
    )
    .expect("flow");
    let diag = DiagSocket::open_in_netns(&Path::new("/run/netns").join(tb.ns(Role::Sender(0))))
        .expect("diag socket");

    // (seconds since start, local port, cwnd) of the data connection: the
    // busiest socket toward the server port (iperf3 also keeps a control one).
    let mut readings: Vec<(f64, u16, u32, u64)> = Vec::new();
    let start = Instant::now();
    let mut tuned = false;
    let mut reset = false;
    while start.elapsed() < Duration::from_secs(23) {
        let t = start.elapsed().as_secs_f64();
        if !tuned && t >= 8.0 {
            let out = ccctl(&["tune", "modest-bbr", "--cwnd-gain", "1"]).ok();
            println!(
                "t={t:.1}s: ccctl tune modest-bbr --cwnd-gain 1\n{}",
                out.stdout.trim_end()
            );
            tuned = true;
        }
        if !reset && t >= 16.0 {
            let out = ccctl(&["tune", "modest-bbr", "--reset"]).ok();
            println!(
                "t={t:.1}s: ccctl tune modest-bbr --reset\n{}",
                out.stdout.trim_end()
            );
            reset = true;
        }
        for s in diag.tcp_sockets().expect("inet_diag") {
            if s.remote.port() == port {
                if let Some(i) = s.info {
                    readings.push((t, s.local.port(), i.snd_cwnd, i.bytes_acked.unwrap_or(0)));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let flows = running.wait().expect("the flow finishes");
    let flow = &flows[0];
    assert_eq!(flow.sender_cc.as_deref(), Some("modest_bbr"));
    let data_port = flow
        .local_port
        .expect("iperf3 reported its data connection");

    let mine: Vec<&(f64, u16, u32, u64)> = readings.iter().filter(|r| r.1 == data_port).collect();
    let phase = |from: f64, to: f64| {
        median(
            mine.iter()
                .filter(|r| r.0 >= from && r.0 < to)
                .map(|r| r.2)
                .collect(),
        )
    };
    let (default, gain1, back) = (phase(4.0, 8.0), phase(12.0, 16.0), phase(19.0, 23.0));
    let ratio = gain1 / default;
    let text = format!(
        "live tune, {} Mbit/s, {} ms, 8 BDP, one modest_bbr flow: median cwnd {default:.0} pkt at cwnd_gain 2, \
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
        mine.len() >= 150,
        "only {} readings of the data connection",
        mine.len()
    );
    let first_acked = mine.first().map(|r| r.3).unwrap_or(0);
    assert!(
        mine.last().map(|r| r.3).unwrap_or(0) > first_acked,
        "the data connection stalled"
    );
    assert!(ratio <= 0.75, "cwnd did not follow the tune: {text}");
    assert!(
        back / default >= 0.85,
        "--reset did not bring cwnd back: {text}"
    );
}
