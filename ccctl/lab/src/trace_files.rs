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
use std::{
    cell::RefCell,
    collections::HashMap,
    fs::File,
    hash::BuildHasherDefault,
    io::{BufWriter, Cursor, Write},
    path::{Path, PathBuf},
    rc::Rc,
    sync::atomic::{AtomicU64, Ordering},
    sync::{mpsc, Arc},
    thread::JoinHandle,
};

use anyhow::{anyhow, Context, Result};
use ccctl_core::abi::ccctl_event;
use ccctl_core::trace::{
    event,
    follow::FollowTable,
    sink::{Sink, TraceMeta},
    SharedMaps, Target, TraceLock, TraceOptions, TraceSummary,
};
use polars::prelude::*;

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

enum Msg {
    Batch(DataFrame),
    Finish(u64),
}

/// Parquet, one row group per `row_group` events. The consumer transposes
/// each event into column vectors as it arrives; a writer thread encodes,
/// compresses and writes full row groups, so the ring buffer keeps being
/// drained while a row group is written. At most three row groups exist at
/// a time (filling, queued, being written). If the sink is dropped without
/// [`Sink::finish`] (an error, a panic), the footer is still written, with
/// `ccctl.complete = false`, so the file stays readable.
pub struct ParquetSink {
    cols: Columns,
    kinds: ColumnKinds,
    /// A constant `host` column after [`COLUMNS`] (Hive layout), if any.
    host: Option<String>,
    row_group: usize,
    written: u64,
    tx: Option<mpsc::SyncSender<Msg>>,
    worker: Option<JoinHandle<Result<()>>>,
    path: PathBuf,
}

impl ParquetSink {
    /// Create (or truncate) `path`; rows are flushed every [`ROW_GROUP`] events.
    pub fn create(path: &Path, meta: TraceMeta) -> Result<ParquetSink> {
        Self::with_row_group(path, meta, ROW_GROUP)
    }

    pub fn with_row_group(path: &Path, meta: TraceMeta, row_group: usize) -> Result<ParquetSink> {
        Self::with_host(path, meta, row_group, None)
    }

    /// Like [`ParquetSink::with_row_group`], with a constant `host` column
    /// (string) after the event columns when `host` is given.
    pub fn with_host(
        path: &Path,
        meta: TraceMeta,
        row_group: usize,
        host: Option<String>,
    ) -> Result<ParquetSink> {
        let row_group = row_group.max(1);
        let kinds = ColumnKinds::new()?;
        let empty = with_host_column(Columns::with_capacity(0).into_frame(&kinds)?, &host)?;
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let (tx, rx) = mpsc::sync_channel(1);
        let what = path.display().to_string();
        let worker = std::thread::Builder::new()
            .name("ccctl-trace-parquet".into())
            .spawn(move || {
                parquet_worker(file, empty, meta, rx).with_context(|| format!("writing {what}"))
            })
            .context("starting the Parquet writer thread")?;
        Ok(ParquetSink {
            cols: Columns::with_capacity(row_group),
            kinds,
            host,
            row_group,
            written: 0,
            tx: Some(tx),
            worker: Some(worker),
            path: path.to_path_buf(),
        })
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let sent = match &self.tx {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The writer gave up: its error says why.
        self.tx = None;
        Err(self.join().err().unwrap_or_else(|| {
            anyhow!("writing {}: the writer thread stopped", self.path.display())
        }))
    }

    fn flush_row_group(&mut self) -> Result<()> {
        if self.cols.len() == 0 {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.cols, Columns::with_capacity(self.row_group));
        let df = with_host_column(full.into_frame(&self.kinds)?, &self.host)?;
        self.send(Msg::Batch(df))
    }

    fn join(&mut self) -> Result<()> {
        match self.worker.take() {
            Some(h) => h.join().map_err(|_| {
                anyhow!(
                    "writing {}: the writer thread panicked",
                    self.path.display()
                )
            })?,
            None => Ok(()),
        }
    }
}

impl Sink for ParquetSink {
    #[inline]
    fn push(&mut self, ev: &ccctl_event) -> Result<()> {
        self.cols.push(ev, &mut self.kinds)?;
        self.written += 1;
        if self.cols.len() >= self.row_group {
            self.flush_row_group()?;
        }
        Ok(())
    }

    fn destination(&self) -> String {
        self.path.display().to_string()
    }

    fn written(&self) -> u64 {
        self.written
    }

    fn finish(mut self: Box<Self>, dropped: u64) -> Result<u64> {
        self.flush_row_group()?;
        self.send(Msg::Finish(dropped))?;
        self.tx = None;
        self.join()?;
        Ok(self.written)
    }
}

impl Drop for ParquetSink {
    fn drop(&mut self) {
        if self.tx.is_some() {
            let _ = self.flush_row_group();
            // Closing the channel without Finish: the worker writes the
            // footer marked incomplete.
            self.tx = None;
            if let Err(e) = self.join() {
                tracing::warn!("{e:#}");
            }
        }
    }
}

/// `df` with a constant `host` string column appended, when there is a host.
fn with_host_column(mut df: DataFrame, host: &Option<String>) -> Result<DataFrame> {
    if let Some(h) = host {
        let n = df.height();
        df.with_column(Column::new_scalar(
            "host".into(),
            Scalar::new(DataType::String, AnyValue::StringOwned(h.as_str().into())),
            n,
        ))?;
    }
    Ok(df)
}

/// Writes into the file the writer thread shares with polars, so that it
/// can flush and sync after polars has written the footer.
struct SharedFile(Rc<RefCell<BufWriter<File>>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// The writer thread: row groups as they come, then the footer.
fn parquet_worker(
    file: File,
    mut empty: DataFrame,
    meta: TraceMeta,
    rx: mpsc::Receiver<Msg>,
) -> Result<()> {
    let schema = empty.schema().clone();
    // The `ARROW:schema` entry polars writes for this schema (see the
    // footer below), taken from a throwaway in-memory file.
    let arrow_schema_kv = {
        let mut buf = Vec::new();
        ParquetWriter::new(&mut buf).finish(&mut empty)?;
        let mut reader = ParquetReader::new(Cursor::new(buf));
        let md = reader.get_metadata()?;
        md.key_value_metadata
            .iter()
            .flatten()
            .find(|kv| kv.key == "ARROW:schema")
            .cloned()
            .ok_or_else(|| anyhow!("polars wrote no ARROW:schema entry"))?
    };

    let out = Rc::new(RefCell::new(BufWriter::with_capacity(1 << 20, file)));
    let mut writer = ParquetWriter::new(SharedFile(out.clone()))
        .with_compression(ParquetCompression::Zstd(None))
        .set_parallel(false)
        .batched(&schema)?;

    let mut rows = 0u64;
    let dropped = loop {
        match rx.recv() {
            Ok(Msg::Batch(df)) => {
                writer.write_batch(&df)?;
                rows += df.height() as u64;
            }
            Ok(Msg::Finish(dropped)) => break Some(dropped),
            // The sink was dropped without finish.
            Err(mpsc::RecvError) => break None,
        }
    };

    // The footer, with metadata known only now. Polars evaluates
    // KeyValueMetadata at finish, but its DynamicRust variant cannot be
    // built outside polars and the Static one is fixed when the writer is
    // made; so the footer is written through the BatchedWriter's FileWriter
    // with our pairs plus the Arrow schema entry polars itself would add.
    let KeyValueMetadata::Static(mut kv) = KeyValueMetadata::from_static(meta.pairs(rows, dropped))
    else {
        return Err(anyhow!(
            "polars built key/value metadata of an unexpected kind"
        ));
    };
    kv.insert(0, arrow_schema_kv);
    writer
        .get_writer()
        .lock()
        .map_err(|_| anyhow!("the Parquet writer lock is poisoned"))?
        .end(Some(kv))?;
    drop(writer);
    let mut out = out.borrow_mut();
    out.flush()?;
    out.get_ref().sync_all()?;
    Ok(())
}

/// Addresses as a Categorical column: each address is formatted and
/// given a category id once, and the Parquet writer stores the ids against
/// a dictionary instead of hashing every string of every row group.
struct AddrCache {
    ids: HashMap<u128, u32, BuildHasherDefault<U64Hasher>>,
    dtype: DataType,
}

impl AddrCache {
    fn new() -> AddrCache {
        let cats = Categories::new(
            "addr".into(),
            "ccctl.trace".into(),
            CategoricalPhysical::U32,
        );
        AddrCache {
            ids: HashMap::default(),
            dtype: DataType::from_categories(cats),
        }
    }

    #[inline]
    fn id(&mut self, addr: [u8; 16]) -> Result<u32> {
        let key = u128::from_ne_bytes(addr);
        if let Some(&id) = self.ids.get(&key) {
            return Ok(id);
        }
        let id = self
            .dtype
            .cat_mapping()?
            .insert_cat(&event::addr_string(addr))?;
        self.ids.insert(key, id);
        Ok(id)
    }

    fn column(&self, name: &str, ids: Vec<u32>) -> Column {
        let phys = UInt32Chunked::from_vec(name.into(), ids);
        // SAFETY: every id came from this dtype's mapping (`id`).
        unsafe { Categorical32Chunked::from_cats_and_dtype_unchecked(phys, self.dtype.clone()) }
            .into_series()
            .into()
    }
}

/// A hasher for one u64 or u128 key (SipHash costs more than the rest of a lookup).
#[derive(Default)]
struct U64Hasher(u64);

impl std::hash::Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

/// A small enumeration (`CCCTL_*` code -> name) as a polars Enum: the
/// names are the categories, each code maps to one of them.
struct EnumColumn {
    dtype: DataType,
    code: [u8; 256],
}

impl EnumColumn {
    fn new(name_of: fn(u8) -> &'static str) -> Result<EnumColumn> {
        let mut names: Vec<&str> = Vec::new();
        let mut code = [0u8; 256];
        for c in 0..=255u8 {
            let name = name_of(c);
            code[c as usize] = match names.iter().position(|n| *n == name) {
                Some(i) => i as u8,
                None => {
                    names.push(name);
                    (names.len() - 1) as u8
                }
            };
        }
        Ok(EnumColumn {
            dtype: DataType::from_frozen_categories(FrozenCategories::new(names)?),
            code,
        })
    }

    #[inline]
    fn code(&self, raw: u8) -> u8 {
        self.code[raw as usize]
    }

    fn column(&self, name: &str, codes: Vec<u8>) -> Column {
        self.column_of(UInt8Chunked::from_vec(name.into(), codes))
    }

    /// The column from its codes as a chunk (nulls where it has them).
    fn column_of(&self, phys: UInt8Chunked) -> Column {
        // SAFETY: the codes index the categories this dtype was built from.
        unsafe { Categorical8Chunked::from_cats_and_dtype_unchecked(phys, self.dtype.clone()) }
            .into_series()
            .into()
    }
}

/// The dtypes of the string-valued columns, and the address ids so far.
struct ColumnKinds {
    addrs: AddrCache,
    algo: EnumColumn,
    bbr_mode: EnumColumn,
    modest_phase: EnumColumn,
    dstar_mode: EnumColumn,
}

impl ColumnKinds {
    fn new() -> Result<ColumnKinds> {
        Ok(ColumnKinds {
            addrs: AddrCache::new(),
            algo: EnumColumn::new(event::algo_name)?,
            bbr_mode: EnumColumn::new(event::bbr_mode_name)?,
            modest_phase: EnumColumn::new(event::modest_phase_name)?,
            dstar_mode: EnumColumn::new(event::dstar_mode_name)?,
        })
    }
}

/// One row group being filled: [`COLUMNS`] as vectors, one push per event.
struct Columns {
    ts_ns: Vec<u64>,
    flow_id: Vec<u64>,
    saddr: Vec<u32>,
    daddr: Vec<u32>,
    sport: Vec<u32>,
    dport: Vec<u32>,
    family: Vec<u32>,
    algo: Vec<u8>,
    ca_state: Vec<u32>,
    cwnd: Vec<u32>,
    ssthresh: Vec<u32>,
    mss: Vec<u32>,
    pacing: Vec<u64>,
    delivery: Vec<u64>,
    srtt: Vec<u32>,
    min_rtt: Vec<u32>,
    in_flight: Vec<u32>,
    delivered: Vec<u32>,
    lost: Vec<u32>,
    retrans: Vec<u32>,
    param_version: Vec<u32>,
    param_digest: Vec<u32>,
    bbr_mode: Vec<u8>,
    modest_phase: Vec<u8>,
    pacing_gain: Vec<f64>,
    cwnd_gain: Vec<f64>,
    btl_bw: Vec<u64>,
    min_win: Vec<u32>,
    max_win: Vec<u32>,
    last_cwnd: Vec<u32>,
    quiet_rounds: Vec<u32>,
    theta: Vec<f64>,
    alpha: Vec<f64>,
    on_us: Vec<u32>,
    off_us: Vec<u32>,
    theta_on_us: Vec<u32>,
    theta_off_us: Vec<u32>,
    bbr_pacing_gain: Vec<f64>,
    stall_us: Vec<u32>,
    bw_raw: Vec<u64>,
    bw_corrected: Vec<u64>,
    dstar_mode: Vec<u8>,
    dstar_slow_start: Vec<bool>,
    dstar_bdp: Vec<u32>,
    dstar_last_bdp: Vec<u32>,
    dstar_gain_cwnd: Vec<u32>,
    dstar_sigma: Vec<u32>,
    dstar_delivery: Vec<u64>,
    dstar_min_rtt: Vec<u32>,
    dstar_rtt: Vec<u32>,
    dstar_min_rtt_stamp: Vec<u64>,
    dstar_clock_lag: Vec<u32>,
    /// Per row: does its algorithm have the BBR family's, Modest BBR's,
    /// patched BBR's, TCP D*'s columns? (null where not)
    has_bbr: Vec<bool>,
    has_modest: Vec<bool>,
    has_theta: Vec<bool>,
    has_dstar: Vec<bool>,
}

impl Columns {
    fn with_capacity(n: usize) -> Columns {
        fn v<T>(n: usize) -> Vec<T> {
            Vec::with_capacity(n)
        }
        Columns {
            ts_ns: v(n),
            flow_id: v(n),
            saddr: v(n),
            daddr: v(n),
            sport: v(n),
            dport: v(n),
            family: v(n),
            algo: v(n),
            ca_state: v(n),
            cwnd: v(n),
            ssthresh: v(n),
            mss: v(n),
            pacing: v(n),
            delivery: v(n),
            srtt: v(n),
            min_rtt: v(n),
            in_flight: v(n),
            delivered: v(n),
            lost: v(n),
            retrans: v(n),
            param_version: v(n),
            param_digest: v(n),
            bbr_mode: v(n),
            modest_phase: v(n),
            pacing_gain: v(n),
            cwnd_gain: v(n),
            btl_bw: v(n),
            min_win: v(n),
            max_win: v(n),
            last_cwnd: v(n),
            quiet_rounds: v(n),
            theta: v(n),
            alpha: v(n),
            on_us: v(n),
            off_us: v(n),
            theta_on_us: v(n),
            theta_off_us: v(n),
            bbr_pacing_gain: v(n),
            stall_us: v(n),
            bw_raw: v(n),
            bw_corrected: v(n),
            dstar_mode: v(n),
            dstar_slow_start: v(n),
            dstar_bdp: v(n),
            dstar_last_bdp: v(n),
            dstar_gain_cwnd: v(n),
            dstar_sigma: v(n),
            dstar_delivery: v(n),
            dstar_min_rtt: v(n),
            dstar_rtt: v(n),
            dstar_min_rtt_stamp: v(n),
            dstar_clock_lag: v(n),
            has_bbr: v(n),
            has_modest: v(n),
            has_theta: v(n),
            has_dstar: v(n),
        }
    }

    fn len(&self) -> usize {
        self.ts_ns.len()
    }

    #[inline]
    fn push(&mut self, e: &ccctl_event, kinds: &mut ColumnKinds) -> Result<()> {
        // Addresses first: the only step that can fail, so a failure leaves
        // every column the same length.
        let saddr = kinds.addrs.id(e.saddr)?;
        let daddr = kinds.addrs.id(e.daddr)?;
        self.ts_ns.push(e.ts_ns);
        self.flow_id.push(e.flow_id);
        self.saddr.push(saddr);
        self.daddr.push(daddr);
        self.sport.push(e.sport as u32);
        self.dport.push(e.dport as u32);
        self.family.push(e.family as u32);
        self.algo.push(kinds.algo.code(e.algo));
        self.ca_state.push(e.ca_state as u32);
        self.cwnd.push(e.cwnd);
        self.ssthresh.push(e.ssthresh);
        self.mss.push(e.mss);
        self.pacing.push(event::bits_per_s(e.pacing_rate));
        self.delivery.push(event::bits_per_s(e.delivery_rate));
        self.srtt.push(e.srtt_us);
        self.min_rtt.push(e.min_rtt_us);
        self.in_flight.push(e.in_flight);
        self.delivered.push(e.delivered);
        self.lost.push(e.lost);
        self.retrans.push(e.total_retrans);
        self.param_version.push(e.param_version);
        self.param_digest.push(e.param_digest);
        self.bbr_mode.push(kinds.bbr_mode.code(e.bbr_mode));
        self.modest_phase
            .push(kinds.modest_phase.code(e.modest_phase));
        self.pacing_gain.push(event::gain(e.pacing_gain));
        self.cwnd_gain.push(event::gain(e.cwnd_gain));
        self.btl_bw.push(event::bits_per_s(e.btl_bw));
        self.min_win.push(e.min_win);
        self.max_win.push(e.max_win);
        self.last_cwnd.push(e.last_cwnd);
        self.quiet_rounds.push(e.quiet_rounds);
        self.theta.push(event::theta(e.theta));
        self.alpha.push(event::gain(e.alpha));
        self.on_us.push(e.on_us);
        self.off_us.push(e.off_us);
        self.theta_on_us.push(e.theta_on_us);
        self.theta_off_us.push(e.theta_off_us);
        self.bbr_pacing_gain.push(event::gain(e.bbr_pacing_gain));
        self.stall_us.push(e.stall_us);
        self.bw_raw.push(event::bits_per_s(e.bw_raw));
        self.bw_corrected.push(event::bits_per_s(e.bw_corrected));
        self.dstar_mode.push(kinds.dstar_mode.code(e.dstar_mode));
        self.dstar_slow_start.push(e.dstar_slow_start != 0);
        self.dstar_bdp.push(e.dstar_bdp);
        self.dstar_last_bdp.push(e.dstar_last_bdp);
        self.dstar_gain_cwnd.push(e.dstar_gain_cwnd);
        self.dstar_sigma.push(e.dstar_sigma);
        self.dstar_delivery
            .push(event::bits_per_s(e.dstar_delivery_rate));
        self.dstar_min_rtt.push(e.dstar_min_rtt_us);
        self.dstar_rtt.push(e.dstar_rtt_us);
        self.dstar_min_rtt_stamp.push(e.dstar_min_rtt_stamp_ns);
        self.dstar_clock_lag.push(e.dstar_clock_lag_us);
        self.has_bbr.push(event::has_bbr_state(e.algo));
        self.has_modest.push(event::has_modest_state(e.algo));
        self.has_theta.push(event::has_theta(e.algo));
        self.has_dstar.push(event::has_dstar_state(e.algo));
        Ok(())
    }

    /// The row group as a frame (the vectors move into polars, no copy).
    fn into_frame(self, kinds: &ColumnKinds) -> Result<DataFrame> {
        fn num<T>(name: &str, v: Vec<T>) -> Column
        where
            Series: NamedFromOwned<Vec<T>>,
        {
            Series::from_vec(name.into(), v).into()
        }
        // One validity bitmap per group of columns, shared by its columns.
        fn validity(name: &str, mask: &[bool]) -> BooleanChunked {
            BooleanChunked::from_slice(name.into(), mask)
        }
        // A chunk with nulls where `$valid` (a BooleanChunked) is false.
        macro_rules! chunk {
            ($chunked:ty, $name:expr, $v:expr, $valid:expr) => {
                <$chunked>::from_vec_validity(
                    $name.into(),
                    $v,
                    $valid.downcast_iter().next().map(|a| a.values().clone()),
                )
            };
        }
        // ... as a numeric column.
        macro_rules! valid {
            ($chunked:ty, $name:expr, $v:expr, $valid:expr) => {
                chunk!($chunked, $name, $v, $valid).into_series().into()
            };
        }
        let n = self.len();
        let bbr = validity("has_bbr", &self.has_bbr);
        let modest = validity("has_modest", &self.has_modest);
        let theta = validity("has_theta", &self.has_theta);
        let dstar = validity("has_dstar", &self.has_dstar);
        let dstar_slow_start: Vec<Option<bool>> = self
            .dstar_slow_start
            .iter()
            .zip(&self.has_dstar)
            .map(|(&v, &has)| has.then_some(v))
            .collect();
        let columns = vec![
            num("ts_ns", self.ts_ns),
            num("flow_id", self.flow_id),
            kinds.addrs.column("saddr", self.saddr),
            kinds.addrs.column("daddr", self.daddr),
            num("sport", self.sport),
            num("dport", self.dport),
            num("family", self.family),
            kinds.algo.column("algo", self.algo),
            num("ca_state", self.ca_state),
            num("cwnd", self.cwnd),
            num("ssthresh", self.ssthresh),
            num("mss", self.mss),
            num("pacing_rate_bps", self.pacing),
            num("delivery_rate_bps", self.delivery),
            num("srtt_us", self.srtt),
            num("min_rtt_us", self.min_rtt),
            num("in_flight", self.in_flight),
            num("delivered", self.delivered),
            num("lost", self.lost),
            num("total_retrans", self.retrans),
            num("param_version", self.param_version),
            num("param_digest", self.param_digest),
            kinds
                .bbr_mode
                .column_of(chunk!(UInt8Chunked, "bbr_mode", self.bbr_mode, bbr)),
            kinds.modest_phase.column_of(chunk!(
                UInt8Chunked,
                "modest_phase",
                self.modest_phase,
                modest
            )),
            valid!(Float64Chunked, "pacing_gain", self.pacing_gain, bbr),
            valid!(Float64Chunked, "cwnd_gain", self.cwnd_gain, bbr),
            valid!(UInt64Chunked, "btl_bw_bps", self.btl_bw, bbr),
            valid!(UInt32Chunked, "min_win", self.min_win, modest),
            valid!(UInt32Chunked, "max_win", self.max_win, modest),
            valid!(UInt32Chunked, "last_cwnd", self.last_cwnd, modest),
            valid!(UInt32Chunked, "quiet_rounds", self.quiet_rounds, modest),
            valid!(Float64Chunked, "theta", self.theta, theta),
            valid!(Float64Chunked, "alpha", self.alpha, theta),
            valid!(UInt32Chunked, "on_us", self.on_us, theta),
            valid!(UInt32Chunked, "off_us", self.off_us, theta),
            valid!(UInt32Chunked, "theta_on_us", self.theta_on_us, theta),
            valid!(UInt32Chunked, "theta_off_us", self.theta_off_us, theta),
            valid!(
                Float64Chunked,
                "bbr_pacing_gain",
                self.bbr_pacing_gain,
                theta
            ),
            valid!(UInt32Chunked, "stall_us", self.stall_us, theta),
            valid!(UInt64Chunked, "bw_raw_bps", self.bw_raw, theta),
            valid!(UInt64Chunked, "bw_corrected_bps", self.bw_corrected, theta),
            kinds
                .dstar_mode
                .column_of(chunk!(UInt8Chunked, "dstar_mode", self.dstar_mode, dstar)),
            BooleanChunked::new("dstar_slow_start".into(), &dstar_slow_start)
                .into_series()
                .into(),
            valid!(UInt32Chunked, "dstar_bdp", self.dstar_bdp, dstar),
            valid!(UInt32Chunked, "dstar_last_bdp", self.dstar_last_bdp, dstar),
            valid!(
                UInt32Chunked,
                "dstar_gain_cwnd",
                self.dstar_gain_cwnd,
                dstar
            ),
            valid!(UInt32Chunked, "dstar_sigma", self.dstar_sigma, dstar),
            valid!(
                UInt64Chunked,
                "dstar_delivery_rate_bps",
                self.dstar_delivery,
                dstar
            ),
            valid!(UInt32Chunked, "dstar_min_rtt_us", self.dstar_min_rtt, dstar),
            valid!(UInt32Chunked, "dstar_rtt_us", self.dstar_rtt, dstar),
            valid!(
                UInt64Chunked,
                "dstar_min_rtt_stamp_ns",
                self.dstar_min_rtt_stamp,
                dstar
            ),
            valid!(
                UInt32Chunked,
                "dstar_clock_lag_us",
                self.dstar_clock_lag,
                dstar
            ),
        ];
        debug_assert!(columns.iter().map(|c| c.name().as_str()).eq(COLUMNS));
        Ok(DataFrame::new(n, columns)?)
    }
}

/// CSV with a header line, the same columns as Parquet.
pub struct CsvSink {
    out: BufWriter<File>,
    written: u64,
    path: PathBuf,
}

impl CsvSink {
    pub fn create(path: &Path) -> Result<CsvSink> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        writeln!(out, "{}", COLUMNS.join(","))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(CsvSink {
            out,
            written: 0,
            path: path.to_path_buf(),
        })
    }

    fn row(&mut self, e: &ccctl_event) -> std::io::Result<()> {
        // Columns of another algorithm are empty (null), never 0.
        fn opt<T: std::fmt::Display>(has: bool, v: T) -> String {
            if has {
                v.to_string()
            } else {
                String::new()
            }
        }
        let bbr = event::has_bbr_state(e.algo);
        let modest = event::has_modest_state(e.algo);
        let pt = event::has_theta(e.algo);
        let ds = event::has_dstar_state(e.algo);
        writeln!(
            self.out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            e.ts_ns,
            e.flow_id,
            event::addr_string(e.saddr),
            event::addr_string(e.daddr),
            e.sport,
            e.dport,
            e.family,
            event::algo_name(e.algo),
            e.ca_state,
            e.cwnd,
            e.ssthresh,
            e.mss,
            event::bits_per_s(e.pacing_rate),
            event::bits_per_s(e.delivery_rate),
            e.srtt_us,
            e.min_rtt_us,
            e.in_flight,
            e.delivered,
            e.lost,
            e.total_retrans,
            e.param_version,
            e.param_digest,
            opt(bbr, event::bbr_mode_name(e.bbr_mode)),
            opt(modest, event::modest_phase_name(e.modest_phase)),
            opt(bbr, event::gain(e.pacing_gain)),
            opt(bbr, event::gain(e.cwnd_gain)),
            opt(bbr, event::bits_per_s(e.btl_bw)),
            opt(modest, e.min_win),
            opt(modest, e.max_win),
            opt(modest, e.last_cwnd),
            opt(modest, e.quiet_rounds),
            opt(pt, event::theta(e.theta)),
            opt(pt, event::gain(e.alpha)),
            opt(pt, e.on_us),
            opt(pt, e.off_us),
            opt(pt, e.theta_on_us),
            opt(pt, e.theta_off_us),
            opt(pt, event::gain(e.bbr_pacing_gain)),
            opt(pt, e.stall_us),
            opt(pt, event::bits_per_s(e.bw_raw)),
            opt(pt, event::bits_per_s(e.bw_corrected)),
            opt(ds, event::dstar_mode_name(e.dstar_mode)),
            opt(ds, e.dstar_slow_start != 0),
            opt(ds, e.dstar_bdp),
            opt(ds, e.dstar_last_bdp),
            opt(ds, e.dstar_gain_cwnd),
            opt(ds, e.dstar_sigma),
            opt(ds, event::bits_per_s(e.dstar_delivery_rate)),
            opt(ds, e.dstar_min_rtt_us),
            opt(ds, e.dstar_rtt_us),
            opt(ds, e.dstar_min_rtt_stamp_ns),
            opt(ds, e.dstar_clock_lag_us),
        )
    }
}

impl Sink for CsvSink {
    fn push(&mut self, ev: &ccctl_event) -> Result<()> {
        self.row(ev)
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.written += 1;
        Ok(())
    }

    fn destination(&self) -> String {
        self.path.display().to_string()
    }

    fn written(&self) -> u64 {
        self.written
    }

    fn finish(mut self: Box<Self>, _dropped: u64) -> Result<u64> {
        let what = || format!("writing {}", self.path.display());
        self.out.flush().with_context(what)?;
        self.out.get_ref().sync_all().with_context(what)?;
        Ok(self.written)
    }
}

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

    fn open(&mut self) -> Result<()> {
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

    fn close_current(&mut self) -> Result<()> {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ccctl_core::trace::synthetic::synthetic_event;

    /// synthetic_event(i)'s local address as the files must show it,
    /// written out independently of the code under test: every fourth flow
    /// IPv6 `fd00:ccc::F:1`, the others IPv4 `10.0.F.1` (F the flow, hex in IPv6).
    fn synthetic_saddr_text(i: u64) -> String {
        let flow = i % 16;
        if flow % 4 == 3 {
            format!("fd00:ccc::{flow:x}:1")
        } else {
            format!("10.0.{flow}.1")
        }
    }

    /// A collector globbing `*.parquet` sees only finished files: the current
    /// one is a hidden `.partial` until rotation renames it.
    #[test]
    fn rotating_files_appear_only_when_complete() {
        let dir = std::env::temp_dir().join(format!("ccctl-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let visible = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .expect("dir")
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".parquet"))
                .collect();
            v.sort();
            v
        };
        let mut sink = RotatingParquetSink::new(
            &dir,
            "t",
            u64::MAX,
            std::time::Duration::from_secs(3600),
            Box::new(meta),
            Box::new(|| 0),
        )
        .expect("sink");
        for i in 0..10 {
            sink.push(&synthetic_event(i)).expect("push");
        }
        assert!(
            visible(&dir).is_empty(),
            "a file in progress is visible: {:?}",
            visible(&dir)
        );
        sink.close_current().expect("close");
        sink.open().expect("open");
        assert_eq!(visible(&dir).len(), 1, "{:?}", visible(&dir));
        sink.push(&synthetic_event(11)).expect("push");
        Box::new(sink).finish(0).expect("finish");
        let files = visible(&dir);
        assert_eq!(files.len(), 2, "{files:?}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
            .collect();
        assert!(left.is_empty(), "partial files left after finish");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Hive layout: `host=/date=/hour=` directories from the UTC time the
    /// file was opened, a `host` column on every row, counters shared.
    #[test]
    fn hive_layout_partitions_and_names_the_host() {
        let dir = std::env::temp_dir().join(format!("ccctl-hive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let before = ccctl_core::sys::time::now_unix();
        let mut sink = RotatingParquetSink::with_layout(
            &dir,
            "trace",
            u64::MAX,
            std::time::Duration::from_secs(3600),
            Box::new(meta),
            Box::new(|| 0),
            Layout::Hive {
                host: "web-1".into(),
            },
        )
        .expect("sink");
        let stats = sink.stats.clone();
        for i in 0..5 {
            sink.push(&synthetic_event(i)).expect("push");
        }
        Box::new(sink).finish(0).expect("finish");
        let after = ccctl_core::sys::time::now_unix();
        assert_eq!(stats.events_written.load(Ordering::Relaxed), 5);
        assert_eq!(stats.files_rotated.load(Ordering::Relaxed), 1);
        let host_dir = dir.join("host=web-1");
        let date_dir = std::fs::read_dir(&host_dir)
            .expect("host=")
            .next()
            .expect("date=")
            .expect("entry")
            .path();
        let date = date_dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        // The date and hour of the open time, UTC (either side of the call).
        let expect = |t: u64| {
            (
                format!("date={}", &ccctl_core::units::utc(t, "-", "", "", "")[..10]),
                format!("hour={:02}", t / 3600 % 24),
            )
        };
        let hour_dir = std::fs::read_dir(&date_dir)
            .expect("hour=")
            .next()
            .expect("hour")
            .expect("entry")
            .path();
        let hour = hour_dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        assert!(
            (date.clone(), hour.clone()) == expect(before)
                || (date.clone(), hour.clone()) == expect(after),
            "{date}/{hour} for {before}..{after}"
        );
        let files: Vec<_> = std::fs::read_dir(&hour_dir)
            .expect("files")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let name = files[0]
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("trace-") && name.ends_with(".parquet"),
            "{name}"
        );
        let df = ParquetReader::new(File::open(&files[0]).expect("open"))
            .finish()
            .expect("read");
        assert_eq!(df.height(), 5);
        let host = df.column("host").expect("host column");
        assert!((0..5).all(|i| host
            .get(i)
            .ok()
            .and_then(|v| v.get_str().map(str::to_string))
            == Some("web-1".into())));
        assert_eq!(df.get_column_names().len(), COLUMNS.len() + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn meta() -> TraceMeta {
        TraceMeta::now(r#"{"algos":[],"port":null}"#.into())
    }

    fn kv(md: &polars::prelude::FileMetadata, key: &str) -> Option<String> {
        md.key_value_metadata
            .iter()
            .flatten()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
    }

    #[test]
    fn parquet_round_trip_in_row_groups() {
        let dir = tempdir();
        let path = dir.join("t.parquet");
        let n = 200_000u64;
        let mut sink: Box<dyn Sink> =
            Box::new(ParquetSink::with_row_group(&path, meta(), 16_384).unwrap());
        for i in 0..n {
            let bytes = event::to_bytes(&synthetic_event(i));
            sink.push(&event::decode(&bytes).unwrap()).unwrap();
        }
        assert_eq!(sink.written(), n);
        assert_eq!(sink.finish(42).unwrap(), n);

        let mut reader = ParquetReader::new(File::open(&path).unwrap());
        let md = reader.get_metadata().unwrap().clone();
        assert_eq!(md.num_rows, n as usize);
        assert_eq!(md.row_groups.len(), 13, "200000 rows / 16384");
        assert_eq!(kv(&md, "ccctl.events_written").as_deref(), Some("200000"));
        assert_eq!(kv(&md, "ccctl.events_dropped").as_deref(), Some("42"));
        assert_eq!(kv(&md, "ccctl.complete"), None);
        assert!(kv(&md, "ccctl.filters").unwrap().contains("algos"));
        assert!(kv(&md, "ccctl.version")
            .unwrap()
            .starts_with(env!("CARGO_PKG_VERSION")));
        for key in [
            "ccctl.started_unix",
            "ccctl.finished_unix",
            "ccctl.kernel",
            "ARROW:schema",
        ] {
            assert!(kv(&md, key).is_some(), "{key}");
        }

        let df = reader.finish().unwrap();
        assert_eq!(df.height(), n as usize);
        assert!(matches!(
            df.column("algo").unwrap().dtype(),
            DataType::Enum(..)
        ));
        assert!(matches!(
            df.column("saddr").unwrap().dtype(),
            DataType::Categorical(..)
        ));
        assert_eq!(df.column("ts_ns").unwrap().dtype(), &DataType::UInt64);
        assert_eq!(df.column("theta").unwrap().dtype(), &DataType::Float64);
        let names: Vec<_> = df
            .get_column_names()
            .into_iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(names, COLUMNS);
        for i in [0u64, 1, 2, 3, 16_383, 16_384, 199_999] {
            let want = synthetic_event(i);
            let row = i as usize;
            let col = |name: &str| df.column(name).unwrap().get(row).unwrap().into_static();
            assert_eq!(col("ts_ns"), AnyValue::UInt64(want.ts_ns));
            assert_eq!(col("flow_id"), AnyValue::UInt64(want.flow_id));
            assert_eq!(col("cwnd"), AnyValue::UInt32(want.cwnd));
            assert_eq!(col("saddr").get_str().unwrap(), synthetic_saddr_text(i));
            assert_eq!(col("algo").get_str().unwrap(), event::algo_name(want.algo));
            assert_eq!(
                col("pacing_rate_bps"),
                AnyValue::UInt64(want.pacing_rate * 8)
            );
            // Each algorithm's own columns; null on every other's rows.
            let a = want.algo;
            if event::has_bbr_state(a) {
                assert_eq!(
                    col("bbr_mode").get_str().unwrap(),
                    event::bbr_mode_name(want.bbr_mode)
                );
                assert_eq!(
                    col("pacing_gain"),
                    AnyValue::Float64(event::gain(want.pacing_gain))
                );
            } else {
                for c in ["bbr_mode", "pacing_gain", "cwnd_gain", "btl_bw_bps"] {
                    assert_eq!(col(c), AnyValue::Null, "{c} on a row of algo {a}");
                }
            }
            if event::has_modest_state(a) {
                assert_eq!(col("min_win"), AnyValue::UInt32(want.min_win));
            } else {
                for c in [
                    "modest_phase",
                    "min_win",
                    "max_win",
                    "last_cwnd",
                    "quiet_rounds",
                ] {
                    assert_eq!(col(c), AnyValue::Null, "{c} on a row of algo {a}");
                }
            }
            if event::has_theta(a) {
                assert_eq!(col("theta"), AnyValue::Float64(event::theta(want.theta)));
                assert_eq!(col("on_us"), AnyValue::UInt32(want.on_us));
                assert_eq!(
                    col("bw_corrected_bps"),
                    AnyValue::UInt64(want.bw_corrected * 8)
                );
            } else {
                for c in ["theta", "alpha", "on_us", "stall_us", "bw_raw_bps"] {
                    assert_eq!(col(c), AnyValue::Null, "{c} on a row of algo {a}");
                }
            }
            if event::has_dstar_state(a) {
                assert_eq!(
                    col("dstar_mode").get_str().unwrap(),
                    event::dstar_mode_name(want.dstar_mode)
                );
                assert_eq!(col("dstar_bdp"), AnyValue::UInt32(want.dstar_bdp));
                assert_eq!(
                    col("dstar_gain_cwnd"),
                    AnyValue::UInt32(want.dstar_gain_cwnd)
                );
                assert_eq!(col("dstar_slow_start"), AnyValue::Boolean(false));
            } else {
                for c in [
                    "dstar_mode",
                    "dstar_slow_start",
                    "dstar_bdp",
                    "dstar_min_rtt_stamp_ns",
                ] {
                    assert_eq!(col(c), AnyValue::Null, "{c} on a row of algo {a}");
                }
            }
        }
        assert!(matches!(
            df.column("dstar_mode").unwrap().dtype(),
            DataType::Enum(..)
        ));
        assert_eq!(
            df.column("dstar_slow_start").unwrap().dtype(),
            &DataType::Boolean
        );
        // A quarter of the rows are D*'s: the rest of dstar_bdp is null.
        assert_eq!(
            df.column("dstar_bdp").unwrap().null_count(),
            n as usize * 3 / 4
        );
    }

    #[test]
    fn parquet_without_events_is_valid() {
        let dir = tempdir();
        let path = dir.join("empty.parquet");
        let sink = Box::new(ParquetSink::create(&path, meta()).unwrap());
        assert_eq!(sink.finish(3).unwrap(), 0);
        let mut reader = ParquetReader::new(File::open(&path).unwrap());
        let md = reader.get_metadata().unwrap().clone();
        assert_eq!(kv(&md, "ccctl.events_dropped").as_deref(), Some("3"));
        assert_eq!(reader.finish().unwrap().height(), 0);
    }

    #[test]
    fn dropped_parquet_sink_still_leaves_a_valid_file() {
        let dir = tempdir();
        let path = dir.join("dropped.parquet");
        {
            let mut sink = ParquetSink::with_row_group(&path, meta(), 100).unwrap();
            for i in 0..250 {
                sink.push(&synthetic_event(i)).unwrap();
            }
        }
        let mut reader = ParquetReader::new(File::open(&path).unwrap());
        let md = reader.get_metadata().unwrap().clone();
        assert_eq!(kv(&md, "ccctl.complete").as_deref(), Some("false"));
        assert_eq!(kv(&md, "ccctl.events_written").as_deref(), Some("250"));
        assert_eq!(reader.finish().unwrap().height(), 250);
    }

    #[test]
    fn parquet_create_fails_on_a_bad_path() {
        let err = ParquetSink::create(Path::new("/nonexistent-dir/x.parquet"), meta())
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("creating /nonexistent-dir/x.parquet"));
    }

    #[test]
    fn csv_round_trip() {
        let dir = tempdir();
        let path = dir.join("t.csv");
        let mut sink: Box<dyn Sink> = Box::new(CsvSink::create(&path).unwrap());
        for i in 0..100 {
            sink.push(&synthetic_event(i)).unwrap();
        }
        assert_eq!(sink.finish(0).unwrap(), 100);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header, COLUMNS);
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 100);
        let col = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        for (i, row) in rows.iter().enumerate() {
            let want = synthetic_event(i as u64);
            assert_eq!(row.len(), COLUMNS.len());
            assert_eq!(row[col("ts_ns")], want.ts_ns.to_string());
            assert_eq!(row[col("saddr")], synthetic_saddr_text(i as u64));
            assert_eq!(row[col("algo")], event::algo_name(want.algo));
            assert_eq!(row[col("cwnd")].parse::<u32>().unwrap(), want.cwnd);
            let a = want.algo;
            if event::has_bbr_state(a) {
                assert_eq!(
                    row[col("cwnd_gain")].parse::<f64>().unwrap(),
                    event::gain(want.cwnd_gain)
                );
            } else {
                assert_eq!(row[col("cwnd_gain")], "", "cwnd_gain on algo {a}");
            }
            if event::has_theta(a) {
                assert_eq!(
                    row[col("theta")].parse::<f64>().unwrap(),
                    event::theta(want.theta)
                );
            } else {
                assert_eq!(row[col("theta")], "", "theta on algo {a}");
                assert_eq!(row[col("off_us")], "", "off_us on algo {a}");
            }
            if event::has_dstar_state(a) {
                assert_eq!(
                    row[col("dstar_mode")],
                    event::dstar_mode_name(want.dstar_mode)
                );
                assert_eq!(row[col("dstar_bdp")], want.dstar_bdp.to_string());
            } else {
                assert_eq!(row[col("dstar_bdp")], "", "dstar_bdp on algo {a}");
                assert_eq!(row[col("min_win")].is_empty(), !event::has_modest_state(a));
            }
        }
    }

    /// A fresh directory under the target's temp dir (no tempfile crate here).
    pub(crate) fn tempdir() -> PathBuf {
        ccctl_core::sys::scratch_dir("trace-test").expect("temporary directory")
    }
}
