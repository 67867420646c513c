//! Where decoded events go: a Parquet file written one row group at a time
//! (memory stays bounded however long the trace), or CSV.
//!
//! Both write the same columns, in this order ([`COLUMNS`]):
//!
//! | column | type | meaning |
//! | --- | --- | --- |
//! | `ts_ns` | u64 | CLOCK_MONOTONIC, ns (`ccctl.monotonic_offset_ns` + ts_ns = Unix time, ns) |
//! | `flow_id` | u64 | stable per socket, unique across algorithms until reboot |
//! | `saddr`, `daddr` | categorical string | local and remote address as text: `198.18.0.1`, `fd00:ccc::1` (an IPv4 peer of a dual-stack IPv6 socket as IPv4) |
//! | `sport`, `dport` | u32 | local and remote port |
//! | `family` | u32 | AF_INET (2) or AF_INET6 (10) |
//! | `algo` | enum string | kernel name of the algorithm (`bpf_bbr`, `modest_bbr`, `patched_bbr`, `dstar`, `unknown`) |
//! | `ca_state` | u32 | TCP_CA_Open (0) .. TCP_CA_Loss (4), as in the lab's samples.parquet |
//! | `cwnd`, `ssthresh` | u32 | packets |
//! | `mss` | u32 | bytes |
//! | `pacing_rate_bps` | u64 | bit/s (sk_pacing_rate x 8; u64::MAX: unlimited) |
//! | `delivery_rate_bps` | u64 | bit/s of this ACK's rate sample; 0 if none |
//! | `srtt_us`, `min_rtt_us` | u32 | microseconds |
//! | `in_flight`, `delivered`, `lost` | u32 | packets |
//! | `total_retrans` | u32 | segments |
//! | `param_version` | u32 | version of the tunable parameters in force |
//! | `param_digest` | u32 | FNV-1a of the whole parameter set this ACK used (`ccctl_abi.h`): with `param_version` it shows the set was one whole set |
//! | `bbr_mode` | enum string | `startup`, `drain`, `probe_bw`, `probe_rtt`, `unknown` (BBR family) |
//! | `modest_phase` | enum string | `inactive`, `binary`, `linear`, `unknown` (Modest BBR) |
//! | `pacing_gain`, `cwnd_gain` | f64 | factors (fixed point / 256); pacing_gain as applied on this ACK (Modest BBR: after eq. 1 scaling) (BBR family) |
//! | `btl_bw_bps` | u64 | bottleneck bandwidth estimate, bit/s (BBR family) |
//! | `min_win`, `max_win`, `last_cwnd` | u32 | packets (Modest BBR) |
//! | `quiet_rounds` | u32 | round trips since the last retransmission, saturating at 65535 (Modest BBR) |
//! | `theta` | f64 | Θ in force, estimated over the last round (fixed point / 1024) (patched BBR) |
//! | `alpha` | f64 | eq. 38's alpha in force, BDPs added to cwnd_gain (fixed point / 256) (patched BBR) |
//! | `on_us`, `off_us` | u32 | On and Off time of the current round so far, us (patched BBR) |
//! | `theta_on_us`, `theta_off_us` | u32 | On and Off time of the round `theta` was estimated over, us (patched BBR) |
//! | `bbr_pacing_gain` | f64 | BBR's pacing gain p before eq. 37 (fixed point / 256) (patched BBR) |
//! | `stall_us` | u32 | machine stall time left out of the current round's Off (stall_filter), us (patched BBR) |
//! | `bw_raw_bps`, `bw_corrected_bps` | u64 | this ACK's delivery-rate sample D, and what the max filter saw (D/Θ in probe_bw, eq. 36), bit/s; 0 if no sample (patched BBR) |
//! | `dstar_mode` | enum string | `drain`, `gain1`, `gain2`, `unknown`: Fig. 1's mode (TCP D*) |
//! | `dstar_slow_start` | bool | in slow start, Sec. 3.3 (TCP D*) |
//! | `dstar_bdp`, `dstar_last_bdp` | u32 | packets: the BDP estimate (eq. 2) and the one before (TCP D*) |
//! | `dstar_gain_cwnd`, `dstar_sigma` | u32 | packets: the window above the BDP, and abs(bdp - last_bdp) (TCP D*) |
//! | `dstar_delivery_rate_bps` | u64 | bit/s: eq. 1's estimate from the last GAIN 2 (TCP D*) |
//! | `dstar_min_rtt_us`, `dstar_rtt_us` | u32 | D*'s own min RTT and the latest RTT sample, Fig. 1's timer unit (TCP D*) |
//! | `dstar_min_rtt_stamp_ns` | u64 | when `dstar_min_rtt_us` was last refreshed, the clock of `ts_ns` (TCP D*) |
//! | `dstar_clock_lag_us` | u32 | `ts_ns` minus the ACK's own time that Fig. 1's timers read, us (TCP D*) |
//!
//! The columns from `bbr_mode` on belong to one algorithm or family (in
//! parentheses): on the rows of any other algorithm they are null (empty in
//! CSV), never 0.
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
pub const COLUMNS: [&str; 52] = [
    "ts_ns",
    "flow_id",
    "saddr",
    "daddr",
    "sport",
    "dport",
    "family",
    "algo",
    "ca_state",
    "cwnd",
    "ssthresh",
    "mss",
    "pacing_rate_bps",
    "delivery_rate_bps",
    "srtt_us",
    "min_rtt_us",
    "in_flight",
    "delivered",
    "lost",
    "total_retrans",
    "param_version",
    "param_digest",
    "bbr_mode",
    "modest_phase",
    "pacing_gain",
    "cwnd_gain",
    "btl_bw_bps",
    "min_win",
    "max_win",
    "last_cwnd",
    "quiet_rounds",
    "theta",
    "alpha",
    "on_us",
    "off_us",
    "theta_on_us",
    "theta_off_us",
    "bbr_pacing_gain",
    "stall_us",
    "bw_raw_bps",
    "bw_corrected_bps",
    "dstar_mode",
    "dstar_slow_start",
    "dstar_bdp",
    "dstar_last_bdp",
    "dstar_gain_cwnd",
    "dstar_sigma",
    "dstar_delivery_rate_bps",
    "dstar_min_rtt_us",
    "dstar_rtt_us",
    "dstar_min_rtt_stamp_ns",
    "dstar_clock_lag_us",
];
