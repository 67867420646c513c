//! Where decoded events go: a Parquet file written one row group at a time
//! (memory stays bounded however long the trace), or CSV.
//!
//! Both write the same columns, in this order ([`COLUMNS`]): the per-ACK
//! event schema of `ccctl_core::trace::schema` (one line per column; its
//! table is in `docs/tracing.md`, checked against the schema by a test).
//! The columns of one algorithm or family are null on the rows of any
//! other algorithm (empty in CSV), never 0.
//!
//! String-valued columns are dictionary-encoded in the file (polars Enum
//! and Categorical; Arrow `dictionary<string>`): they read as strings in
//! polars, pandas and pyarrow, and writing them costs no per-row hashing.
//! Narrow integers are widened to u32: the Parquet encodings make that free
//! on disk, and this polars build has no 8/16-bit integer dtypes.
//! In CSV every column is plain text.
//!
//! The Parquet file carries file-level key/value metadata written with its
//! footer: `ccctl.events_written`, `ccctl.events_dropped`, `ccctl.filters`
//! (JSON), `ccctl.started_unix`, `ccctl.finished_unix` (seconds),
//! `ccctl.monotonic_offset_ns`, `ccctl.version`, `ccctl.kernel`.
mod columns;
mod csv;
mod pages;
mod parquet;
mod rotate;
#[cfg(test)]
pub(crate) mod tests;

pub use csv::CsvSink;
pub use parquet::ParquetSink;
pub use rotate::RotatingParquetSink;

use std::{
    path::{Path, PathBuf},
    sync::atomic::AtomicU64,
    sync::Arc,
};

use anyhow::Result;
use ccctl_core::trace::{
    follow::FollowTable, sink::TraceMeta, SharedMaps, Target, TraceLock, TraceOptions, TraceSummary,
};

/// Where a trace session's events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Parquet(PathBuf),
    Csv(PathBuf),
    /// A live per-flow table on stdout, every second.
    Follow,
    /// Parquet files rotated by size and age (the daemon).
    Rotating {
        dir: PathBuf,
        prefix: String,
        max_bytes: u64,
        max_age: std::time::Duration,
        /// Flat files in `dir`, or a Hive-partitioned tree under it.
        layout: Layout,
        /// Counters the daemon's metrics endpoint reads while the files
        /// are written (shared across trace restarts).
        stats: Arc<SinkStats>,
    },
}

/// Where rotating files go under their directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `<dir>/<prefix>-<unix s>-<n>.parquet`.
    Flat,
    /// `<dir>/host=<host>/date=<YYYY-MM-DD>/hour=<HH>/<prefix>-<unix s>-<n>.parquet`
    /// (UTC, of the file's first row), with a `host` column in the data: a
    /// fleet's trees copied into one place read as one table (DuckDB
    /// `read_parquet('<dir>/**/*.parquet', hive_partitioning = true)`,
    /// polars `scan_parquet(..., hive_partitioning=True)`). A file never
    /// spans two hours: it is rotated when the UTC hour changes.
    Hive { host: String },
}

impl Layout {
    /// The `host` column's value, if the files carry one.
    fn host(&self) -> Option<&str> {
        match self {
            Layout::Flat => None,
            Layout::Hive { host } => Some(host),
        }
    }

    /// The directory a file opened at `unix_s` goes to.
    fn dir_for(&self, root: &Path, unix_s: u64) -> PathBuf {
        match self {
            Layout::Flat => root.to_path_buf(),
            Layout::Hive { host } => {
                let day = ccctl_core::units::utc(unix_s, "-", "", "", "");
                root.join(format!("host={host}"))
                    .join(format!("date={}", &day[..10]))
                    .join(format!("hour={:02}", unix_s / 3600 % 24))
            }
        }
    }
}

/// What a rotating sink has done so far, for the daemon's metrics.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Events written into files (closed and current).
    pub events_written: AtomicU64,
    /// Files finished and renamed to their `.parquet` name.
    pub files_rotated: AtomicU64,
}

impl PartialEq for SinkStats {
    /// The same counters (not equal values).
    fn eq(&self, other: &SinkStats) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for SinkStats {}

/// One session: open the shared maps, take the tracing lock, trace into
/// `output`.
pub fn run(opts: TraceOptions, output: &Output) -> Result<TraceSummary> {
    let maps = SharedMaps::open()?;
    let _lock = TraceLock::acquire()?;
    run_with(&maps, opts, output)
}

/// One session on maps already opened, by a caller holding the
/// [`TraceLock`]. The output is created first: a bad path fails before
/// tracing is switched on.
pub fn run_with(maps: &SharedMaps, opts: TraceOptions, output: &Output) -> Result<TraceSummary> {
    let filters = opts.filter.to_json();
    let target = match output {
        Output::Parquet(p) => {
            Target::Sink(Box::new(ParquetSink::create(p, TraceMeta::now(filters))?))
        }
        Output::Csv(p) => Target::Sink(Box::new(CsvSink::create(p)?)),
        Output::Follow => Target::Follow(FollowTable::default()),
        Output::Rotating {
            dir,
            prefix,
            max_bytes,
            max_age,
            layout,
            stats,
        } => {
            let drop_maps = SharedMaps::open_in(maps.dir())?;
            let base = drop_maps.drops().unwrap_or(0);
            let mut sink = RotatingParquetSink::with_layout(
                dir,
                prefix,
                *max_bytes,
                *max_age,
                Box::new(move || TraceMeta::now(filters.clone())),
                Box::new(move || drop_maps.drops().unwrap_or(base).saturating_sub(base)),
                layout.clone(),
            )?;
            sink.stats = stats.clone();
            Target::Sink(Box::new(sink))
        }
    };
    ccctl_core::trace::run_with(maps, opts, target)
}

/// Events per Parquet row group: ~10 MB of raw events.
pub const ROW_GROUP: usize = 65_536;

/// Column names, in file order (Parquet and CSV alike).
pub use ccctl_core::trace::schema::COLUMN_NAMES as COLUMNS;
