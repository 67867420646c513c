//! Bandwidth traces in Mahimahi's format: one line per delivery
//! opportunity of one 1500-byte packet, its time in milliseconds from the
//! trace's start, non-decreasing; the trace repeats with the last
//! timestamp as its period (as mahimahi's link shell replays it).
//! netem-trace turns the lines into rates per millisecond; a task on the
//! emulator's runtime sets the bottleneck cell's rate from them, starting
//! when the path starts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rattan_core::cells::bandwidth::{BwCellConfig, BwCellControlInterface};
use rattan_core::cells::{ControlInterface, StdPacket};
use rattan_core::metal::timer::Timer;
use rattan_core::netem_trace::model::BwTraceConfig;
use rattan_core::netem_trace::{self, Bandwidth};
use tokio_util::sync::CancellationToken;

use crate::queue::Bottleneck;
use crate::{Error, Result};

/// Lowest rate a trace step sets: rattan rescales a packet in flight by
/// old/new rate, which a rate of 0 would make infinite; 1 kbit/s holds a
/// full-size packet for 12 s, as good as stopped.
pub const FLOOR_BPS: u64 = 1_000;

/// Longest trace accepted: one week of milliseconds.
const MAX_MS: u64 = 7 * 24 * 3_600_000;

/// A bandwidth trace: (duration, rate) steps, repeated.
#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthTrace {
    pub steps: Vec<(Duration, u64)>,
}

impl BandwidthTrace {
    /// Parses Mahimahi's format; an error names the line.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let mut stamps = Vec::new();
        let mut last = 0u64;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let bad = |m: &str| Error::Config(format!("{origin}, line {}: {m}: {line:?}", i + 1));
            let ms: u64 = line
                .parse()
                .map_err(|_| bad("not a whole number of milliseconds"))?;
            if ms < last {
                return Err(bad(&format!("goes back in time (after {last})")));
            }
            if ms > MAX_MS {
                return Err(bad("more than a week"));
            }
            last = ms;
            stamps.push(ms);
        }
        if last == 0 {
            return Err(Error::Config(format!(
                "{origin}: no delivery opportunity after time 0 (a trace must last at least 1 ms)"
            )));
        }
        let cfg = netem_trace::load_mahimahi_trace(stamps, Some(1))
            .map_err(|m| Error::Config(format!("{origin}: {m}")))?;
        let mut model = Box::new(cfg).into_model();
        let mut steps = Vec::new();
        while let Some((bw, d)) = model.next_bw() {
            steps.push((d, (bw.as_bps() as u64).max(FLOOR_BPS)));
        }
        Ok(BandwidthTrace { steps })
    }

    /// Reads and parses a trace file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            what: format!("reading bandwidth trace {}", path.display()),
            source: e,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn first_bps(&self) -> u64 {
        self.steps.first().map_or(FLOOR_BPS, |s| s.1)
    }

    /// One pass of the trace.
    pub fn period(&self) -> Duration {
        self.steps.iter().map(|s| s.0).sum()
    }

    /// Mean rate over one pass, bit/s.
    pub fn mean_bps(&self) -> f64 {
        let bits: f64 = self
            .steps
            .iter()
            .map(|(d, r)| d.as_secs_f64() * *r as f64)
            .sum();
        bits / self.period().as_secs_f64().max(1e-9)
    }
}

/// Sets the bottleneck's rate step by step, repeating, until `stop`.
pub(crate) async fn drive(
    trace: BandwidthTrace,
    cell: Arc<BwCellControlInterface<StdPacket, Bottleneck<StdPacket>>>,
    stop: CancellationToken,
) {
    let Ok(mut timer) = Timer::new() else { return };
    let mut next = tokio::time::Instant::now();
    loop {
        for &(d, bps) in &trace.steps {
            if cell
                .set_config(BwCellConfig::new(Bandwidth::from_bps(bps), None, None))
                .is_err()
            {
                return;
            }
            next += d;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = timer.sleep_until(next) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mahimahi_lines_become_rates() {
        // 2 packets in ms 1, none in 2-3, 1 in 4: 24, 0 (floored), 12 Mbit/s.
        let t = BandwidthTrace::parse("1\n1\n4\n", "t").unwrap();
        assert_eq!(t.period(), Duration::from_millis(4));
        let ms = Duration::from_millis(1);
        assert_eq!(
            t.steps,
            vec![(ms, 24_000_000), (2 * ms, FLOOR_BPS), (ms, 12_000_000)]
        );
        // A constant 12 Mbit/s trace: one packet every millisecond.
        let flat: String = (1..=1000).map(|i| format!("{i}\n")).collect();
        let t = BandwidthTrace::parse(&flat, "flat").unwrap();
        assert!((t.mean_bps() - 12e6).abs() < 1.0, "{}", t.mean_bps());
    }

    #[test]
    fn malformed_traces_name_their_line() {
        let e = BandwidthTrace::parse("1\n2\nx3\n", "a.trace")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.trace, line 3") && e.contains("x3"), "{e}");
        let e = BandwidthTrace::parse("5\n4\n", "b")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("back in time"), "{e}");
        let e = BandwidthTrace::parse("\n0\n", "c").unwrap_err().to_string();
        assert!(e.contains("at least 1 ms"), "{e}");
        let e = BandwidthTrace::parse("-1\n", "d").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(BandwidthTrace::load(Path::new("/nonexistent/x.trace")).is_err());
    }
}
