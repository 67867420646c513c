//! What a trace session writes into: the [`Sink`] trait (implemented by
//! ccctl-lab's Parquet and CSV files) and the metadata a trace file records.
use anyhow::Result;

use crate::abi::ccctl_event;

/// What a trace file records about how it was made.
#[derive(Debug, Clone)]
pub struct TraceMeta {
    /// The filters in force, as JSON.
    pub filters: String,
    pub started_unix_ns: u128,
    /// Unix time minus CLOCK_MONOTONIC at the start, ns: add it to `ts_ns`.
    pub monotonic_offset_ns: i128,
    pub version: String,
    /// `uname -r`.
    pub kernel: String,
}

impl TraceMeta {
    /// Metadata for a trace starting now, with these filters.
    pub fn now(filters: String) -> TraceMeta {
        let unix = unix_ns();
        TraceMeta {
            filters,
            started_unix_ns: unix,
            monotonic_offset_ns: unix as i128 - monotonic_ns() as i128,
            version: format!("{} ({})", env!("CARGO_PKG_VERSION"), crate::GIT_COMMIT),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
        }
    }

    /// The key/value pairs of a finished trace.
    pub fn pairs(&self, written: u64, dropped: Option<u64>) -> Vec<(String, String)> {
        let mut kv = vec![
            ("ccctl.events_written".to_string(), written.to_string()),
            (
                "ccctl.events_dropped".to_string(),
                dropped.map_or_else(|| "unknown".to_string(), |d| d.to_string()),
            ),
            ("ccctl.filters".to_string(), self.filters.clone()),
            (
                "ccctl.started_unix".to_string(),
                unix_seconds(self.started_unix_ns),
            ),
            ("ccctl.finished_unix".to_string(), unix_seconds(unix_ns())),
            (
                "ccctl.monotonic_offset_ns".to_string(),
                self.monotonic_offset_ns.to_string(),
            ),
            ("ccctl.version".to_string(), self.version.clone()),
            ("ccctl.kernel".to_string(), self.kernel.clone()),
        ];
        if dropped.is_none() {
            kv.push(("ccctl.complete".into(), "false".into()));
        }
        kv
    }
}

fn unix_ns() -> u128 {
    crate::sys::time::now_unix_ns()
}

fn unix_seconds(ns: u128) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

pub use crate::sys::time::monotonic_ns;

/// A destination for events.
pub trait Sink {
    /// Take one event.
    fn push(&mut self, ev: &ccctl_event) -> Result<()>;
    /// Events taken so far.
    fn written(&self) -> u64;
    /// Write out everything and close the file, recording `dropped` (events
    /// the BPF side could not reserve room for). Returns the events written.
    fn finish(self: Box<Self>, dropped: u64) -> Result<u64>;
    /// Called every tick (100 ms) of a session: time-based work.
    fn tick(&mut self) -> Result<()> {
        Ok(())
    }
    /// Where the events go, for messages (a path).
    fn destination(&self) -> String {
        String::new()
    }
}
