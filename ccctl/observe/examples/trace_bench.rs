//! How fast the trace consumer takes events: synthetic events through
//! decode and the Parquet sink on one core (`cargo xtask bench consumer`
//! runs it in a release build; research tooling, not part of `ccctl`).
//!
//! usage: trace_bench [--events N] --out FILE
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let mut events: usize = 5_000_000;
    let mut out: Option<PathBuf> = None;
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
            other => {
                bail!("unknown argument `{other}`; usage: trace_bench [--events N] --out FILE")
            }
        }
    }
    let out = out.context("--out FILE is required")?;
    let rate = ccctl_observe::consumer_bench::consumer_rate(events, &out)?;
    println!(
        "consumer: {events} events through decode + Parquet in {:.2} s: {:.2} M events/s",
        events as f64 / rate,
        rate / 1e6
    );
    Ok(())
}
