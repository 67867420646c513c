//! Parquet files rotated by size, age and (Hive layout) UTC hour.
use std::{
    path::{Path, PathBuf},
    sync::atomic::Ordering,
    sync::Arc,
};

use anyhow::{Context, Result};
use ccctl_core::abi::ccctl_event;
use ccctl_core::trace::sink::{Sink, TraceMeta};

use super::{Layout, ParquetSink, SinkStats, ROW_GROUP};

/// Parquet files that rotate by size or age: `<dir>/<prefix>-<UTC>-<n>.parquet`.
/// Each file is complete on its own (footer, `ccctl.events_written`) and
/// records the events dropped while it was the current file, read through
/// `drops` (the session's cumulative count since it started).
///
/// Files appear atomically: the current one is written as a hidden
/// `.<name>.partial` and renamed to its `.parquet` name once its footer is
/// written, so a collector globbing `*.parquet` never reads half a file. A
/// daemon killed mid-file leaves the `.partial` (readable up to its last row
/// group, or not at all) for a human, never for the collector.
pub struct RotatingParquetSink {
    dir: std::path::PathBuf,
    layout: Layout,
    /// UTC hour (unix s / 3600) the current file was opened in (Hive layout
    /// rotates when it changes).
    hour: u64,
    /// Counters shared with the daemon's metrics endpoint.
    pub stats: Arc<SinkStats>,
    prefix: String,
    max_bytes: u64,
    max_age: std::time::Duration,
    meta: Box<dyn Fn() -> TraceMeta + Send>,
    drops: Box<dyn Fn() -> u64 + Send>,
    current: Option<(Box<ParquetSink>, std::path::PathBuf, std::time::Instant)>,
    seq: u32,
    /// Drops counted when the current file was opened.
    drops_at_open: u64,
    /// Events in files already closed.
    closed_written: u64,
    /// Files closed so far.
    pub files: Vec<std::path::PathBuf>,
}

/// How often (in events) the current file's size is looked at.
const ROTATE_CHECK_EVENTS: u64 = 4096;

impl RotatingParquetSink {
    pub fn new(
        dir: &Path,
        prefix: &str,
        max_bytes: u64,
        max_age: std::time::Duration,
        meta: Box<dyn Fn() -> TraceMeta + Send>,
        drops: Box<dyn Fn() -> u64 + Send>,
    ) -> Result<RotatingParquetSink> {
        Self::with_layout(dir, prefix, max_bytes, max_age, meta, drops, Layout::Flat)
    }

    /// A rotating sink writing its files in `layout` under `dir`.
    pub fn with_layout(
        dir: &Path,
        prefix: &str,
        max_bytes: u64,
        max_age: std::time::Duration,
        meta: Box<dyn Fn() -> TraceMeta + Send>,
        drops: Box<dyn Fn() -> u64 + Send>,
        layout: Layout,
    ) -> Result<RotatingParquetSink> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut s = RotatingParquetSink {
            dir: dir.to_path_buf(),
            layout,
            hour: 0,
            stats: Arc::default(),
            prefix: prefix.to_string(),
            max_bytes,
            max_age,
            meta,
            drops,
            current: None,
            seq: 0,
            drops_at_open: 0,
            closed_written: 0,
            files: Vec::new(),
        };
        s.open()?;
        Ok(s)
    }

    pub(super) fn open(&mut self) -> Result<()> {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let dir = self.layout.dir_for(&self.dir, secs);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        self.hour = secs / 3600;
        let path = dir.join(format!("{}-{secs}-{:04}.parquet", self.prefix, self.seq));
        self.seq += 1;
        let sink = ParquetSink::with_host(
            &partial_path(&path),
            (self.meta)(),
            ROW_GROUP,
            self.layout.host().map(str::to_string),
        )?;
        self.drops_at_open = (self.drops)();
        self.current = Some((Box::new(sink), path, std::time::Instant::now()));
        Ok(())
    }

    pub(super) fn close_current(&mut self) -> Result<()> {
        if let Some((sink, path, _)) = self.current.take() {
            let dropped = (self.drops)().saturating_sub(self.drops_at_open);
            self.closed_written += sink.finish(dropped)?;
            std::fs::rename(partial_path(&path), &path)
                .with_context(|| format!("renaming the finished {}", path.display()))?;
            self.stats.files_rotated.fetch_add(1, Ordering::Relaxed);
            tracing::info!(file = %path.display(), "trace file closed");
            self.files.push(path);
        }
        Ok(())
    }

    /// Rotate now if the current file is too old or too big.
    pub fn maybe_rotate(&mut self) -> Result<()> {
        let due = match &self.current {
            Some((sink, path, opened)) => {
                opened.elapsed() >= self.max_age
                    || (matches!(self.layout, Layout::Hive { .. })
                        && ccctl_core::sys::time::now_unix() / 3600 != self.hour)
                    || (sink.written() > 0
                        && std::fs::metadata(partial_path(path))
                            .map(|m| m.len())
                            .unwrap_or(0)
                            >= self.max_bytes)
            }
            None => true,
        };
        if due {
            self.close_current()?;
            self.open()?;
        }
        Ok(())
    }
}

/// Where a rotating file is written until it is complete: `.<name>.partial`.
fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}

impl Sink for RotatingParquetSink {
    fn push(&mut self, ev: &ccctl_event) -> Result<()> {
        let Some((sink, _, _)) = self.current.as_mut() else {
            anyhow::bail!("no current trace file");
        };
        sink.push(ev)?;
        self.stats.events_written.fetch_add(1, Ordering::Relaxed);
        if sink.written() % ROTATE_CHECK_EVENTS == 0 {
            self.maybe_rotate()?;
        }
        Ok(())
    }

    fn destination(&self) -> String {
        self.dir.display().to_string()
    }

    fn written(&self) -> u64 {
        self.closed_written
            + self
                .current
                .as_ref()
                .map(|(s, _, _)| s.written())
                .unwrap_or(0)
    }

    fn finish(mut self: Box<Self>, _dropped: u64) -> Result<u64> {
        self.close_current()?;
        Ok(self.closed_written)
    }

    fn tick(&mut self) -> Result<()> {
        self.maybe_rotate()
    }
}
