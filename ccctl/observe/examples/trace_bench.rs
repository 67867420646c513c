//! How fast the trace consumer takes events: synthetic events through
//! decode and the Parquet sink on one core (`cargo xtask bench consumer`
//! runs it in a release build; research tooling, not part of `ccctl`).
//!
//! usage: trace_bench [--events N] [--one-algorithm] --out FILE
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use ccctl_observe::consumer_bench::{consumer_rate_of, Mix};

fn main() -> Result<()> {
    let mut events: usize = 5_000_000;
    let mut out: Option<PathBuf> = None;
    let mut mix = Mix::Interleaved;
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
            other => {
                bail!(
                    "unknown argument `{other}`; usage: trace_bench [--events N] \
                     [--one-algorithm] --out FILE"
                )
            }
        }
    }
    let out = out.context("--out FILE is required")?;
    let rate = consumer_rate_of(events, &out, mix)?;
    let what = match mix {
        Mix::Interleaved => "four algorithms interleaved",
        Mix::One(_) => "bpf_bbr's events only",
    };
    println!(
        "consumer ({what}): {events} events through decode + Parquet in {:.2} s: {:.2} M events/s",
        events as f64 / rate,
        rate / 1e6
    );
    Ok(())
}
