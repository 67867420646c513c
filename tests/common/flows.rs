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
    let sampler = SsSampler::start(&tb.ns(Role::Sender(0)), SamplerConfig::default()).expect("starting ss sampler");
    let flow = iperf::run_flow(tb, &FlowSpec::new(0, cc, Duration::from_secs(secs))).expect("running iperf3");
    let samples = sampler.stop().expect("stopping ss sampler");
    let port = flow.local_port.expect("iperf3 reported its data connection");
    let mut seen: Vec<String> = samples.for_local_port(port).filter_map(|r| r.sock.cc.clone()).collect();
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
/// once; the running flow keeps its ops and finishes at >= 85 % of the link.
pub fn unload_mid_flow(cfg: TestbedConfig) {
    let rate = cfg.rate_bps as f64;
    super::ccctl(&["load", "bbr"]).ok();
    let tb = testbed(cfg);
    let running = iperf::spawn_flows(&tb, &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs(8))]).expect("starting iperf3");
    std::thread::sleep(Duration::from_secs(3));
    super::ccctl(&["unload", "bbr"]).ok();
    assert!(!super::registered("bpf_bbr"), "still registered after unload");
    let flows = running.wait().expect("iperf3 finished");
    let flow = &flows[0];
    println!("unload mid-flow: {:.1} of {:.0} Mbit/s", mbit(flow.goodput_bps), mbit(rate));
    assert_eq!(flow.sender_cc.as_deref(), Some("bpf_bbr"));
    assert!(
        flow.goodput_bps >= 0.85 * rate,
        "flow suffered from the unload: {:.1} Mbit/s",
        mbit(flow.goodput_bps)
    );
}
