//! How fast the consumer side takes events: synthetic ring-buffer records
//! through the same decode-and-sink path as a live trace, into Parquet.
use std::{path::Path, time::Instant};

use anyhow::Result;
use ccctl_core::trace::{
    event::{self, EVENT_SIZE},
    run::{Consumer, Target},
    sink::TraceMeta,
    synthetic::synthetic_event,
    Filter,
};

use crate::trace_files::ParquetSink;

/// At most this many distinct records are generated (~150 MB); longer runs
/// cycle through them.
const POOL: usize = 1 << 20;

/// Which algorithms' events the synthetic stream holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Four algorithms interleaved flow by flow (every algorithm-specific
    /// column is null in about half of each row group's rows): the worst
    /// case, a host tracing every algorithm at once.
    Interleaved,
    /// One algorithm's events only (`ccctl trace --algo bpf-bbr`): each
    /// column is either valid or null in a whole row group.
    One(u8),
}

/// Push `n` synthetic records through decode and a [`ParquetSink`] at
/// `path`, exactly as the ring-buffer callback does, and finish the file.
/// Returns events per second of wall-clock time, generation excluded,
/// finishing the file included.
pub fn consumer_rate(n: usize, path: &Path) -> Result<f64> {
    consumer_rate_of(n, path, Mix::Interleaved)
}

/// [`consumer_rate`] of a stream of the given algorithms.
pub fn consumer_rate_of(n: usize, path: &Path, mix: Mix) -> Result<f64> {
    let pool: Vec<[u8; EVENT_SIZE]> = (0..n.clamp(1, POOL) as u64)
        .map(|i| {
            let mut e = synthetic_event(i);
            if let Mix::One(algo) = mix {
                e.algo = algo;
            }
            event::to_bytes(&e)
        })
        .collect();
    let meta = TraceMeta::now(Filter::default().to_json());
    let mut consumer = Consumer::new(Target::Sink(Box::new(ParquetSink::create(path, meta)?)));

    let start = Instant::now();
    for i in 0..n {
        if consumer.on_sample(&pool[i % pool.len()]) != 0 {
            break;
        }
    }
    if let Some(e) = consumer.error.take() {
        return Err(e);
    }
    if let Target::Sink(sink) = consumer.target {
        sink.finish(0)?;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(n as f64 / secs.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_rate_writes_a_file() {
        let dir = crate::trace_files::tests::tempdir();
        let path = dir.join("bench.parquet");
        let rate = consumer_rate(10_000, &path).unwrap();
        assert!(rate > 0.0);
        let df = polars::prelude::ParquetReader::new(std::fs::File::open(&path).unwrap());
        use polars::prelude::SerReader;
        assert_eq!(df.finish().unwrap().height(), 10_000);
    }

    /// `cargo test --release -p ccctl-observe --lib consumer_bench -- --ignored --nocapture`;
    /// CCCTL_BENCH_EVENTS sets the count (default 4 M).
    #[test]
    #[ignore]
    fn consumer_rate_bench() {
        let n = std::env::var("CCCTL_BENCH_EVENTS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(4_000_000);
        let dir = crate::trace_files::tests::tempdir();
        let path = dir.join("bench.parquet");
        let cpu0 = cpu_seconds();
        let rate = consumer_rate(n, &path).unwrap();
        let cpu = cpu_seconds() - cpu0;
        let size = std::fs::metadata(&path).unwrap().len();
        println!(
            "consumer_rate: {n} events, {:.2} M events/s wall clock, {:.0} ns CPU/event \
             (all threads, generation included), {:.1} bytes/event on disk",
            rate / 1e6,
            cpu * 1e9 / n as f64,
            size as f64 / n as f64
        );
    }

    fn cpu_seconds() -> f64 {
        // SAFETY: rusage is plain integers, so all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct we pass and keeps no pointer.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}
