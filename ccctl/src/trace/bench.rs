//! How fast the consumer side takes events: synthetic ring-buffer records
//! through the same decode-and-sink path as a live trace.
use std::{path::Path, time::Instant};

use anyhow::Result;

use super::{
    event::{self, EVENT_SIZE},
    run::{Consumer, Target},
    sink::{ParquetSink, TraceMeta},
    Filter,
};
use crate::abi;

/// At most this many distinct records are generated (~150 MB); longer runs
/// cycle through them.
const POOL: usize = 1 << 20;

/// A plausible event, different for every `i`: 16 flows of four algorithms
/// with drifting windows, rates and RTTs.
pub fn synthetic_event(i: u64) -> abi::ccctl_event {
    let flow = i % 16;
    let algo = (flow % 4 + 1) as u8;
    let wave = (i * 7919) % 1000;
    abi::ccctl_event {
        ts_ns: 1_000_000_000 + i * 1_500,
        flow_id: flow + 1,
        saddr: u32::from_be_bytes([10, 0, flow as u8, 1]).to_be(),
        daddr: u32::from_be_bytes([10, 1, flow as u8, 2]).to_be(),
        sport: 40_000 + flow as u16,
        dport: 5201,
        family: libc::AF_INET as u16,
        algo,
        ca_state: if wave < 950 { 0 } else { 3 },
        cwnd: 10 + wave as u32,
        ssthresh: 0x7fff_ffff,
        pacing_rate: 1_000_000 + wave * 12_345,
        delivery_rate: if i % 3 == 0 {
            0
        } else {
            900_000 + wave * 11_111
        },
        mss: 1448,
        srtt_us: 40_000 + (wave as u32) * 7,
        min_rtt_us: 40_000,
        in_flight: 5 + wave as u32,
        delivered: i as u32,
        lost: (i / 1000) as u32,
        total_retrans: (i / 900) as u32,
        param_version: 1,
        bbr_mode: (i / 10_000 % 4) as u8,
        modest_phase: if algo as u32 == abi::CCCTL_ALGO_MODEST_BBR {
            (i / 5_000 % 3) as u8
        } else {
            0
        },
        pacing_gain: [256, 320, 192, 256][(i % 4) as usize],
        cwnd_gain: 512,
        btl_bw: 1_100_000 + wave * 10_000,
        min_win: if algo as u32 == abi::CCCTL_ALGO_MODEST_BBR {
            50
        } else {
            0
        },
        max_win: if algo as u32 == abi::CCCTL_ALGO_MODEST_BBR {
            150
        } else {
            0
        },
        last_cwnd: 9 + wave as u32,
        theta_fp: if algo as u32 == abi::CCCTL_ALGO_PATCHED_BBR {
            (wave as i64 - 500) * 655
        } else {
            0
        },
        dstar: [wave as u32, (i % 7) as u32, 0, (i % 2) as u32],
        ..Default::default()
    }
}

/// Push `n` synthetic records through decode and a [`ParquetSink`] at
/// `path`, exactly as the ring-buffer callback does, and finish the file.
/// Returns events per second of wall-clock time, generation excluded,
/// finishing the file included.
pub fn consumer_rate(n: usize, path: &Path) -> Result<f64> {
    let pool: Vec<[u8; EVENT_SIZE]> = (0..n.clamp(1, POOL) as u64)
        .map(|i| event::to_bytes(&synthetic_event(i)))
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
        let dir = crate::trace::sink::tests::tempdir();
        let path = dir.join("bench.parquet");
        let rate = consumer_rate(10_000, &path).unwrap();
        assert!(rate > 0.0);
        let df = polars::prelude::ParquetReader::new(std::fs::File::open(&path).unwrap());
        use polars::prelude::SerReader;
        assert_eq!(df.finish().unwrap().height(), 10_000);
    }

    /// `cargo test --release -p ccctl --lib trace::bench -- --ignored --nocapture`;
    /// CCCTL_BENCH_EVENTS sets the count (default 4 M).
    #[test]
    #[ignore]
    fn consumer_rate_bench() {
        let n = std::env::var("CCCTL_BENCH_EVENTS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(4_000_000);
        let dir = crate::trace::sink::tests::tempdir();
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
        let _ = std::fs::remove_dir_all(dir);
    }

    fn cpu_seconds() -> f64 {
        // SAFETY: getrusage fills the struct we pass.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}
