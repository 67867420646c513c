//! One or more flows through the userspace path emulator, with a ping
//! through the bottleneck first: a quick look at what the path carries.
//!
//! usage: path_probe CC RATE_MBIT RTT_MS SECONDS [FLOWS] [BUFFER_BDP]
use std::time::Duration;

use anyhow::{Context, Result};
use ccctl_lab::iperf::{self, FlowSpec};
use ccctl_lab::testbed::{self, Role, Testbed, TestbedConfig};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str, default: T) -> Result<T> {
    match args.get(i) {
        Some(s) => s
            .parse()
            .ok()
            .with_context(|| format!("{name}: cannot parse {s:?}")),
        None => Ok(default),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cc: String = arg(&args, 0, "CC", "cubic".to_string())?;
    let rate = arg(&args, 1, "RATE_MBIT", 100u64)? * 1_000_000;
    let rtt = Duration::from_millis(arg(&args, 2, "RTT_MS", 20u64)?);
    let secs = arg(&args, 3, "SECONDS", 10u64)?;
    let flows = arg(&args, 4, "FLOWS", 1usize)?;
    let bdp = arg(&args, 5, "BUFFER_BDP", 1.0f64)?;
    let buffer = testbed::buffer_bdp(rate, rtt, bdp, 1500);
    let tb = Testbed::new(
        TestbedConfig::new(rate, buffer)
            .with_rtts(&vec![rtt; flows])
            .userspace(),
    )?;
    let dst = tb.receiver_addr().to_string();
    let ping = tb.exec(
        Role::Sender(0),
        &["ping", "-c", "20", "-i", "0.05", "-q", &dst],
    )?;
    println!(
        "{}",
        String::from_utf8_lossy(&ping.stdout)
            .lines()
            .last()
            .unwrap_or("")
    );
    let specs: Vec<FlowSpec> = (0..flows)
        .map(|i| FlowSpec::new(i, &cc, Duration::from_secs(secs)))
        .collect();
    let res = iperf::run_flows(&tb, &specs)?;
    let total: f64 = res.iter().map(|r| r.goodput_bps).sum();
    for r in res.iter().take(4) {
        println!(
            "flow {}: {:.2} Mbit/s, {} retrans, mean rtt {:.1} ms",
            r.spec.sender,
            r.goodput_bps / 1e6,
            r.retransmits,
            r.mean_rtt_us.unwrap_or(0) as f64 / 1e3
        );
    }
    let cpu = tb.path_cpu().unwrap_or_default();
    println!(
        "total {:.2} Mbit/s of {} ({:.1} %); path {:?}; emulator {} threads, {:.2} s CPU ({:.1} % of one core over {secs} s)",
        total / 1e6,
        rate / 1_000_000,
        100.0 * total / rate as f64,
        tb.path_stats(),
        cpu.threads,
        cpu.cpu.as_secs_f64(),
        100.0 * cpu.cpu.as_secs_f64() / secs as f64
    );
    Ok(())
}
