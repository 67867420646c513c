//! Flows through the namespace testbed, shared by host and VM tests.
use std::time::{Duration, Instant};

use ccctl_lab::{
    iperf::{self, FlowResult, FlowSpec},
    testbed::{Role, Testbed, TestbedConfig},
};
use ccctl_observe::sockdiag::{DiagSocket, Sampler, SamplerConfig};

/// One flow on sender 0 while inet_diag samples the sender every 100 ms.
/// Returns the flow and the congestion-control names the kernel reported
/// on its socket (`INET_DIAG_CONG`, what `ss -ti` prints), in order.
pub fn flow_with_ss(tb: &Testbed, cc: &str, secs: u64) -> (FlowResult, Vec<String>) {
    let sender = ccctl_sys::netns::named(&tb.ns(Role::Sender(0)));
    let sampler =
        Sampler::start(&sender, SamplerConfig::default()).expect("starting the socket sampler");
    let flow = iperf::run_flow(tb, &FlowSpec::new(0, cc, Duration::from_secs(secs)))
        .expect("running iperf3");
    let samples = sampler.stop();
    let port = flow
        .local_port
        .expect("iperf3 reported its data connection");
    let mut seen: Vec<String> = samples
        .for_local_port(port)
        .flat_map(|s| s.cc.iter().cloned())
        .collect();
    seen.dedup();
    (flow, seen)
}

/// `ccctl load <algo>` (ccctl's name, e.g. `modest-bbr`), then one flow of
/// `cc` (the kernel's name, e.g. `modest_bbr`) on sender 0 of a testbed
/// built from `cfg`, inet_diag sampling its socket (see [`flow_with_ss`]).
pub fn loaded_flow(
    algo: &str,
    cc: &str,
    cfg: TestbedConfig,
    secs: u64,
) -> (FlowResult, Vec<String>) {
    super::ccctl(&["load", algo]).ok();
    assert!(
        super::registered(cc),
        "{cc} is not in the kernel's list after `ccctl load {algo}`"
    );
    let tb = testbed(cfg);
    let out = flow_with_ss(&tb, cc, secs);
    let _ = tb.destroy();
    out
}

/// The flow ran `cc` (iperf3 and the socket agree) at `min_share` of
/// `rate` (bit/s) or more.
pub fn assert_carries(cc: &str, rate: f64, flow: &FlowResult, seen: &[String], min_share: f64) {
    println!(
        "{cc}: {:.1} Mbit/s of {:.1} ({:.0} %), {} retransmits, mean RTT {:.1} ms, the socket named {seen:?}",
        mbit(flow.goodput_bps),
        mbit(rate),
        100.0 * flow.goodput_bps / rate,
        flow.retransmits,
        flow.mean_rtt_us.unwrap_or(0) as f64 / 1000.0
    );
    assert_eq!(
        flow.sender_cc.as_deref(),
        Some(cc),
        "iperf3 did not run {cc}"
    );
    assert!(!seen.is_empty(), "inet_diag never saw the data socket");
    // iperf3 may set TCP_CONGESTION on its data socket just after the
    // sampler first lists it: the default may come first, then only `cc`.
    let after_first: &[String] = if seen.first().is_some_and(|c| c != cc) {
        &seen[1..]
    } else {
        seen
    };
    assert!(
        !after_first.is_empty() && after_first.iter().all(|c| c == cc),
        "the socket named {seen:?}"
    );
    assert!(
        flow.goodput_bps >= min_share * rate,
        "goodput {:.1} Mbit/s is below {:.0} % of {:.1} Mbit/s",
        mbit(flow.goodput_bps),
        100.0 * min_share,
        mbit(rate)
    );
}

/// bit/s acknowledged between the first of `points` (seconds, bytes_acked)
/// at or after `from` and the last at or before `to`; 0 if they do not
/// span any time.
pub fn acked_rate(points: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let a = points.iter().find(|r| r.0 >= from);
    let b = points.iter().rev().find(|r| r.0 <= to);
    match (a, b) {
        (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 * 8.0 / (b.0 - a.0),
        _ => 0.0,
    }
}

pub fn mbit(bps: f64) -> f64 {
    bps / 1e6
}

/// Build a testbed or fail the test with the reason.
pub fn testbed(cfg: TestbedConfig) -> Testbed {
    Testbed::new(cfg).expect("creating the namespace testbed")
}

/// Unloading while a flow uses bpf_bbr takes it out of the kernel's list at
/// once; the running flow keeps its ops: its throughput in the seconds after
/// the unload is at least 85 % of what it had before, and (where the machine
/// is fast enough to promise it, `min_link_share`) of the link.
///
/// Throughput is what the receiver acknowledged: the data socket's
/// `bytes_acked`, read through inet_diag every 100 ms. iperf3's per-second
/// sender intervals count bytes written into the socket buffer, which in
/// the seconds after startup exceed the link (a VM run saw 12.0 Mbit/s
/// "before" on a 10 Mbit/s link).
pub fn unload_mid_flow(cfg: TestbedConfig, min_link_share: Option<f64>) {
    let rate = cfg.rate_bps as f64;
    super::ccctl(&["load", "bpf-bbr"]).ok();
    let tb = testbed(cfg);
    let port = tb.alloc_port();
    let secs = 8.0;
    let running = iperf::spawn_flows(
        &tb,
        &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs_f64(secs)).port(port)],
    )
    .expect("starting iperf3");
    let diag = DiagSocket::open_in_netns(&ccctl_sys::netns::named(&tb.ns(Role::Sender(0))))
        .expect("diag socket");
    let start = Instant::now();
    // Timed from when the data socket first shows up: iperf3 may take a
    // second to connect in the emulated VM, and its 8 s start then.
    let mut first_seen: Option<f64> = None;
    let mut unloaded_at = None;
    // (seconds since start, local port, bytes acked) toward the server port.
    let mut readings: Vec<(f64, u16, u64)> = Vec::new();
    loop {
        let t = start.elapsed().as_secs_f64();
        let t0 = first_seen.unwrap_or(t);
        if t >= t0 + secs - 0.3 || t > secs + 20.0 {
            break;
        }
        if first_seen.is_some() && unloaded_at.is_none() && t >= t0 + 3.0 {
            super::ccctl(&["unload", "bpf-bbr"]).ok();
            unloaded_at = Some(start.elapsed().as_secs_f64());
            assert!(
                !super::registered("bpf_bbr"),
                "still registered after unload"
            );
        }
        let t = start.elapsed().as_secs_f64();
        for s in diag.tcp_sockets().expect("inet_diag") {
            if s.remote.port() == port {
                if let Some(i) = s.info {
                    let acked = i.bytes_acked.unwrap_or(0);
                    if acked > 0 && first_seen.is_none() {
                        first_seen = Some(t);
                    }
                    readings.push((t, s.local.port(), acked));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0 = first_seen.expect("the data connection never moved data");
    let unloaded_at = unloaded_at.expect("the flow outlived the unload");
    let flows = running.wait().expect("iperf3 finished");
    let flow = &flows[0];
    assert_eq!(flow.sender_cc.as_deref(), Some("bpf_bbr"));
    let data_port = flow
        .local_port
        .expect("iperf3 reported its data connection");
    let mine: Vec<&(f64, u16, u64)> = readings.iter().filter(|r| r.1 == data_port).collect();
    let acked: Vec<(f64, u64)> = mine.iter().map(|r| (r.0, r.2)).collect();
    let acked_rate = |from: f64, to: f64| acked_rate(&acked, from, to);
    // From 1 s into the flow (past startup) to the unload; from 1 s after
    // the unload to the end.
    let before = acked_rate(t0 + 1.0, unloaded_at);
    let after = acked_rate(unloaded_at + 1.0, t0 + secs);
    println!(
        "unload mid-flow ({:.1} s into the flow): {:.1} Mbit/s acked before, {:.1} after, {:.1} goodput overall, link {:.0} Mbit/s",
        unloaded_at - t0,
        mbit(before),
        mbit(after),
        mbit(flow.goodput_bps),
        mbit(rate)
    );
    assert!(
        before > 0.0,
        "no throughput before the unload: {} readings of the data socket",
        mine.len()
    );
    assert!(
        after >= 0.85 * before,
        "the unload hurt the running flow: {:.1} -> {:.1} Mbit/s",
        mbit(before),
        mbit(after)
    );
    if let Some(share) = min_link_share {
        assert!(
            flow.goodput_bps >= share * rate,
            "flow reached only {:.1} of {:.0} Mbit/s",
            mbit(flow.goodput_bps),
            mbit(rate)
        );
    }
}
