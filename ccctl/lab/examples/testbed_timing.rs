//! Times `Testbed::new` and `Testbed::destroy` (setup/teardown cost of the
//! namespace dumbbell), e.g. inside the VM where every process spawn is slow.
//!
//! usage: testbed_timing [ROUNDS]     (default 2)
//!
//! The first build of the process also pays the one-off module loading and
//! qdisc probes; it is reported separately.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ccctl_lab::testbed::{self, Testbed, TestbedConfig};

fn time_one(senders: usize, rtt: Duration) -> Result<(f64, f64)> {
    let cfg = TestbedConfig::new(20_000_000, 100_000).with_rtts(&vec![rtt; senders]);
    let t = Instant::now();
    let tb = Testbed::new(cfg).with_context(|| format!("building a {senders}-sender testbed"))?;
    let setup = t.elapsed().as_secs_f64();
    let t = Instant::now();
    tb.destroy().context("destroying the testbed")?;
    Ok((setup, t.elapsed().as_secs_f64()))
}

fn main() -> Result<()> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(s) => s
            .parse()
            .with_context(|| format!("ROUNDS must be a number, got {s:?}"))?,
        None => 2,
    };
    let rtt = if testbed::netem_available()? {
        Duration::from_millis(40)
    } else {
        Duration::ZERO
    };
    let (s, d) = time_one(1, rtt)?;
    println!("first (with probes), 1 sender: setup {s:.2} s, teardown {d:.2} s");
    for senders in [1, 10] {
        for r in 0..rounds {
            let (s, d) = time_one(senders, rtt)?;
            println!("{senders:>2} sender(s), round {r}: setup {s:.2} s, teardown {d:.2} s");
        }
    }
    Ok(())
}
