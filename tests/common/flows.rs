//! Flows through the namespace testbed, shared by host and VM tests.
use std::time::Duration;

use ccctl::{
    iperf::{self, FlowResult, FlowSpec},
    ss::{SamplerConfig, SsSampler},
    testbed::{Role, Testbed, TestbedConfig},
};

/// One flow on sender 0 while `ss -tin` samples the sender every 100 ms.
/// Returns the flow and the congestion-control names ss saw on its socket.
pub fn flow_with_ss(tb: &Testbed, cc: &str, secs: u64) -> (FlowResult, Vec<String>) {
    let sampler = SsSampler::start(&tb.ns(Role::Sender(0)), SamplerConfig::default())
        .expect("starting ss sampler");
    let flow = iperf::run_flow(tb, &FlowSpec::new(0, cc, Duration::from_secs(secs)))
        .expect("running iperf3");
    let samples = sampler.stop().expect("stopping ss sampler");
    let port = flow
        .local_port
        .expect("iperf3 reported its data connection");
    let mut seen: Vec<String> = samples
        .for_local_port(port)
        .filter_map(|r| r.sock.cc.clone())
        .collect();
    seen.dedup();
    (flow, seen)
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
pub fn unload_mid_flow(cfg: TestbedConfig, min_link_share: Option<f64>) {
    let rate = cfg.rate_bps as f64;
    super::ccctl(&["load", "bbr"]).ok();
    let tb = testbed(cfg);
    let running = iperf::spawn_flows(&tb, &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs(8))])
        .expect("starting iperf3");
    std::thread::sleep(Duration::from_secs(3));
    super::ccctl(&["unload", "bbr"]).ok();
    assert!(
        !super::registered("bpf_bbr"),
        "still registered after unload"
    );
    let flows = running.wait().expect("iperf3 finished");
    let flow = &flows[0];
    assert_eq!(flow.sender_cc.as_deref(), Some("bpf_bbr"));
    // The unload happens ~3 s after launch; iperf3's clock starts a little later.
    let mean_over = |from: f64, to: f64| {
        let v: Vec<f64> = flow
            .intervals
            .iter()
            .filter(|i| i.start >= from && i.end <= to + 0.01)
            .map(|i| i.bits_per_second)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let before = mean_over(1.0, 3.0);
    let after = mean_over(4.0, 8.0);
    println!(
        "unload mid-flow: {:.1} Mbit/s before, {:.1} after, {:.1} overall, link {:.0} Mbit/s",
        mbit(before),
        mbit(after),
        mbit(flow.goodput_bps),
        mbit(rate)
    );
    assert!(
        before > 0.0,
        "no throughput before the unload: {:?}",
        flow.intervals
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
