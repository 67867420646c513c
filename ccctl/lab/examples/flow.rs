//! One iperf3 flow through a namespace testbed: sender -> router (tbf
//! bottleneck on its egress) -> receiver, with inet_diag sampling the sender.
//! `cargo xtask demo` runs it; the lab (`ccctl lab`) will supersede it.
//!
//! usage: flow [CC] [RATE_MBIT] [SECONDS]     (defaults: bpf_bbr 50 10)
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ccctl_lab::{
    iperf::{self, FlowSpec},
    testbed::{self, Role, Testbed, TestbedConfig},
};
use ccctl_observe::sockdiag::{Sampler, SamplerConfig};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cc = args.first().map(String::as_str).unwrap_or("bpf_bbr");
    let rate_mbit: u64 = match args.get(1) {
        Some(s) => s
            .parse()
            .with_context(|| format!("RATE_MBIT must be a whole number of Mbit/s, got {s:?}"))?,
        None => 50,
    };
    let secs: u64 = match args.get(2) {
        Some(s) => s
            .parse()
            .with_context(|| format!("SECONDS must be a whole number, got {s:?}"))?,
        None => 10,
    };
    if !(1..=10_000).contains(&rate_mbit) || !(1..=3600).contains(&secs) {
        bail!("RATE_MBIT must be in 1..=10000 and SECONDS in 1..=3600");
    }

    // 10 ms of base RTT where the kernel has netem; the host kernel may not.
    let rate = rate_mbit * 1_000_000;
    let rtt = if testbed::netem_available()? {
        Duration::from_millis(10)
    } else {
        Duration::ZERO
    };
    let buffer = testbed::buffer_bdp(rate, rtt.max(Duration::from_millis(10)), 1.0, 1500);
    let tb = Testbed::new(TestbedConfig::new(rate, buffer).with_rtts(&[rtt]))?;
    println!(
        "testbed: {} -> {} -> {}: tbf {rate_mbit} Mbit/s, buffer {} KB on the router, base RTT {} ms{}",
        tb.ns(Role::Sender(0)),
        tb.ns(Role::Router),
        tb.ns(Role::Receiver),
        buffer / 1000,
        rtt.as_millis(),
        if rtt.is_zero() { " (no netem in this kernel)" } else { "" }
    );

    let sender = ccctl_sys::netns::named(&tb.ns(Role::Sender(0)));
    let sampler = Sampler::start(&sender, SamplerConfig::default())?;
    let flow = iperf::run_flow(&tb, &FlowSpec::new(0, cc, Duration::from_secs(secs)))?;
    let samples = sampler.stop();

    for iv in &flow.intervals {
        println!(
            "  {:>4.1}-{:<4.1} s  {:>7.2} Mbit/s  cwnd {:>4} KB  rtt {:>6.1} ms",
            iv.start,
            iv.end,
            iv.bits_per_second / 1e6,
            iv.snd_cwnd_bytes.unwrap_or(0) / 1000,
            iv.rtt_us.unwrap_or(0) as f64 / 1000.0
        );
    }
    let port = flow.local_port.unwrap_or(0);
    let seen: Vec<_> = samples.for_local_port(port).collect();
    let cc_seen = seen
        .iter()
        .find_map(|s| s.cc.first().cloned())
        .unwrap_or_default();
    println!(
        "{}: {:.1} Mbit/s of {rate_mbit} ({:.0} %), {} retransmits, mean RTT {:.1} ms; inet_diag: `{cc_seen}` in {} samples",
        flow.sender_cc.as_deref().unwrap_or(cc),
        flow.goodput_bps / 1e6,
        100.0 * flow.goodput_bps / rate as f64,
        flow.retransmits,
        flow.mean_rtt_us.unwrap_or(0) as f64 / 1000.0,
        seen.iter().map(|s| s.samples.len()).sum::<usize>()
    );
    tb.destroy()?;
    Ok(())
}
