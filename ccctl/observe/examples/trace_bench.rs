//! How fast the trace consumer takes events: synthetic events through
//! decode and the Parquet sink (the consumer thread and the writer's), on
//! the cores the process may use, or with `--one-core` all on one
//! (`cargo xtask bench consumer` runs both in a release build; research
//! tooling, not part of `ccctl`).
//!
//! usage: trace_bench [--events N] [--one-algorithm] [--one-core] --out FILE
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use ccctl_observe::consumer_bench::{consumer_rate_of, Mix};

fn main() -> Result<()> {
    let mut events: usize = 5_000_000;
    let mut out: Option<PathBuf> = None;
    let mut mix = Mix::Interleaved;
    let mut one_core = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--events" => {
                let v = args.next().context("--events needs a count")?;
                events = v
                    .parse()
                    .with_context(|| format!("--events {v}: not a count"))?;
            }
            "--out" => out = Some(args.next().context("--out needs a file")?.into()),
            "--one-algorithm" => mix = Mix::One(ccctl_core::abi::CCCTL_ALGO_BBR as u8),
            "--one-core" => one_core = true,
            other => {
                bail!(
                    "unknown argument `{other}`; usage: trace_bench [--events N] \
                     [--one-algorithm] [--one-core] --out FILE"
                )
            }
        }
    }
    let out = out.context("--out FILE is required")?;
    if one_core {
        pin_to_one_core()?;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rate = consumer_rate_of(events, &out, mix)?;
    let what = match mix {
        Mix::Interleaved => "four algorithms interleaved",
        Mix::One(_) => "bpf_bbr's events only",
    };
    println!(
        "consumer ({what}, {cores} core{}): {events} events through decode + Parquet in {:.2} s: {:.2} M events/s",
        if cores == 1 { "" } else { "s" },
        events as f64 / rate,
        rate / 1e6
    );
    Ok(())
}

/// This process (and the threads it starts) on the first core it may use.
fn pin_to_one_core() -> Result<()> {
    // SAFETY: cpu_set_t is a plain bit set; sched_getaffinity and
    // sched_setaffinity read and write only the set we pass, of its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
        }
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .context("no core in this process's affinity")?;
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut one);
        if libc::sched_setaffinity(0, size, &one) != 0 {
            return Err(std::io::Error::last_os_error()).context("sched_setaffinity");
        }
    }
    Ok(())
}
