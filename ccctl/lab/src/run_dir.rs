//! The run directory's layout and file formats, defined once: what `lab
//! run` writes, `lab merge` and the reproduction report read, and the tests
//! check.
//!
//! ```text
//! <out>/<scenario>-<UTC time>/
//!   scenario.toml     SCENARIO       the scenario as run (after command-line overrides)
//!   metadata.json     METADATA       Metadata: format, kernel, ccctl version and commit,
//!                                    host or VM, sysctls, every run's qdiscs, calibration, status
//!   records.json      RECORDS        Records: a shard's raw records, for `lab merge`
//!   samples.parquet   SAMPLES        one row per flow per 100 ms socket sample
//!   summary.parquet   SUMMARY        one SummaryRecord per flow and per run
//!   summary.txt       SUMMARY_TABLE  the printed summary table
//!   traces/           TRACES         per-ACK traces of our algorithms (run-NNN.parquet)
//!   plots/            PLOTS          PNG and SVG
//! ```
//!
//! **Versions.** `metadata.json` and `records.json` carry `format`, the
//! run directory's format ([`FORMAT`]). A reader reads every format from
//! [`OLDEST_FORMAT`] to [`FORMAT`] and refuses anything else with the file,
//! the format it found and the formats it reads. Files written before the
//! field existed have no `format`: they are format 1, whose layout is this
//! one without the field, and are read. Within a format, a field may be
//! added (readers ignore fields they do not know, and fields added after
//! a format's first files have defaults); removing or changing one is a
//! new format. A field missing or of the wrong type is refused naming the
//! file and the field (`runs[3].wall_secs`); a `summary.parquet` column
//! missing or of the wrong type, naming the file and the column.
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::analyze::{Calibration, SummaryRow};
use crate::exec::{FlowRecord, JobRecord, PathUsage, PingSample};
use crate::iperf::FlowResult;
use crate::plan::Job;
use crate::testbed::QdiscStats;
use ccctl_observe::sockdiag::Sample;

pub const SCENARIO: &str = "scenario.toml";
pub const METADATA: &str = "metadata.json";
pub const RECORDS: &str = "records.json";
pub const SAMPLES: &str = "samples.parquet";
pub const SUMMARY: &str = "summary.parquet";
pub const SUMMARY_TABLE: &str = "summary.txt";
pub const TRACES: &str = "traces";
pub const PLOTS: &str = "plots";

/// The run directory format this ccctl writes.
pub const FORMAT: u32 = 1;
/// The oldest format this ccctl reads.
pub const OLDEST_FORMAT: u32 = 1;

/// Why a run directory's file cannot be read (or written).
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: run directory format {found}{}, but this ccctl ({}) reads formats {OLDEST_FORMAT} to {FORMAT}: {}",
        written_by.as_ref().map(|v| format!(" (written by ccctl {v})")).unwrap_or_default(),
        env!("CARGO_PKG_VERSION"),
        if *found > FORMAT { "read it with a newer ccctl" } else { "read it with the ccctl that wrote it" }
    )]
    Unsupported {
        path: PathBuf,
        found: u32,
        written_by: Option<String>,
    },
    #[error("{path}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{path}: column `{column}`: {message}")]
    Column {
        path: PathBuf,
        column: &'static str,
        message: String,
    },
    #[error("{path}: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error("writing {path}: {message}")]
    Write { path: PathBuf, message: String },
}

fn write_err(path: &Path) -> impl Fn(String) -> RunDirError + '_ {
    move |message| RunDirError::Write {
        path: path.to_path_buf(),
        message,
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The version fields of a JSON file, read before the rest so that a newer
/// format is refused for its version, not for a field it changed.
#[derive(Deserialize)]
struct FormatProbe {
    #[serde(default)]
    format: Option<u32>,
}

#[derive(Deserialize)]
struct WriterProbe {
    ccctl_version: String,
}

/// Reads `path` as JSON of type `T`, after checking its `format`.
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, RunDirError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let probe: FormatProbe = serde_json::from_str(&text).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            RunDirError::Malformed {
                path: path.to_path_buf(),
                message: format!("not JSON: {e}"),
            }
        } else {
            RunDirError::Field {
                path: path.to_path_buf(),
                field: "format".into(),
                message: e.to_string(),
            }
        }
    })?;
    // No `format`: written before the field existed, format 1.
    let found = probe.format.unwrap_or(1);
    if !(OLDEST_FORMAT..=FORMAT).contains(&found) {
        return Err(RunDirError::Unsupported {
            path: path.to_path_buf(),
            found,
            written_by: serde_json::from_str::<WriterProbe>(&text)
                .ok()
                .map(|w| w.ccctl_version),
        });
    }
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let message = e.into_inner().to_string();
        // A missing field's path is its parent's: name the field itself.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next());
        let field = match (missing, at.as_str()) {
            (Some(f), ".") => f.to_string(),
            (Some(f), parent) => format!("{parent}.{f}"),
            (None, _) => at,
        };
        RunDirError::Field {
            path: path.to_path_buf(),
            field,
            message,
        }
    })
}

fn write_json<T: Serialize>(path: &Path, value: &T, pretty: bool) -> Result<(), RunDirError> {
    let text = if pretty {
        serde_json::to_string_pretty(value).map(|t| t + "\n")
    } else {
        serde_json::to_string(value)
    }
    .map_err(|e| write_err(path)(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| write_err(path)(e.to_string()))
}

fn format_1() -> u32 {
    1
}

// ---------------------------------------------------------------- metadata.json

/// `--shard K/N`: the K-th of N parts, K from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// `metadata.json`: what ran where, and how it ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    /// The run directory's format ([`FORMAT`]); absent before it existed: 1.
    #[serde(default = "format_1")]
    pub format: u32,
    pub ccctl_version: String,
    pub git_commit: String,
    pub scenario: String,
    /// `host` or `vm`.
    pub ran_on: String,
    pub kernel: String,
    #[serde(default)]
    pub iperf3: String,
    #[serde(default)]
    pub sysctls: BTreeMap<String, String>,
    #[serde(default)]
    pub testbed: String,
    #[serde(default)]
    pub calibration_share: f64,
    #[serde(default)]
    pub planned_runs: usize,
    /// FNV-1a 64 of the plan (`ccctl lab merge` joins shards of one plan only).
    #[serde(default)]
    pub plan_digest: String,
    /// `--shard K/N`: which part of the plan this directory holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardMeta>,
    /// A merged run: each shard's directory, machine and calibrations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<MergedShard>,
    pub started_unix: f64,
    pub finished_unix: Option<f64>,
    /// `running`, `complete`, `failed: …`, `interrupted: …`.
    pub status: String,
    #[serde(default)]
    pub loaded_for_run: Vec<String>,
    /// The tunable parameters of each of our algorithms the scenario
    /// names, in force when its runs began (kernel name -> parameter name
    /// -> real value): a run made after `ccctl tune` says so.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, BTreeMap<String, f64>>,
    #[serde(default)]
    pub calibrations: Vec<Calibration>,
    #[serde(default)]
    pub runs: Vec<RunMeta>,
}

/// The status of a run that finished with every run made.
pub const STATUS_COMPLETE: &str = "complete";

impl Metadata {
    /// `<dir>/metadata.json`, read and checked ([`RunDirError`]).
    pub fn read(dir: &Path) -> Result<Metadata, RunDirError> {
        read_json(&dir.join(METADATA))
    }

    /// Writes `<dir>/metadata.json` (pretty JSON) at the current [`FORMAT`].
    pub fn write(&self, dir: &Path) -> Result<(), RunDirError> {
        let mut m = self.clone();
        m.format = FORMAT;
        write_json(&dir.join(METADATA), &m, true)
    }

    pub fn is_complete(&self) -> bool {
        self.status == STATUS_COMPLETE
    }

    /// Link settings marked testbed-limited.
    pub fn limited_links(&self) -> usize {
        self.calibrations
            .iter()
            .filter(|c| c.testbed_limited)
            .count()
    }
}

/// One run in `metadata.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunMeta {
    pub run_id: usize,
    pub kind: String,
    pub link_index: usize,
    pub started_unix: f64,
    pub wall_secs: f64,
    /// Building the testbed, running the flows, tearing down.
    pub setup_flows_teardown_secs: [f64; 3],
    pub sample_failures: u64,
    pub qdiscs: Vec<String>,
    /// Per-ACK trace of our algorithms' flows (relative to the run directory).
    pub trace: Option<String>,
    /// Per flow (in run order) its sender's On/Off gate, null when always On:
    /// the ground truth of patched BBR's Θ.
    #[serde(default)]
    pub schedules: Vec<Option<ScheduleMeta>>,
    /// The path emulator: which, its threads and CPU time.
    #[serde(default)]
    pub path: Option<PathUsage>,
}

/// A shard's place in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMeta {
    pub index: u32,
    pub count: u32,
    /// Run ids this shard ran (its calibrations included).
    pub runs: Vec<usize>,
}

impl ShardMeta {
    pub fn shard(&self) -> Shard {
        Shard {
            index: self.index,
            count: self.count,
        }
    }
}

/// One shard of a merged run, in the merged `metadata.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedShard {
    pub dir: String,
    pub index: u32,
    pub count: u32,
    pub ran_on: String,
    pub kernel: String,
    pub runs: Vec<usize>,
    pub calibrations: Vec<Calibration>,
    pub started_unix: f64,
    pub finished_unix: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleMeta {
    pub on_ms: f64,
    pub off_ms: f64,
    /// On / (On + Off).
    pub theta: f64,
}

// ---------------------------------------------------------------- records.json

/// `records.json`: every record a shard's analysis read, so `lab merge`
/// can analyse the joined shards again.
#[derive(Debug, Serialize, Deserialize)]
pub struct Records {
    #[serde(default = "format_1")]
    pub format: u32,
    pub plan_digest: String,
    pub shard: Shard,
    pub records: Vec<RunRecord>,
}

/// A [`JobRecord`] without its job (the plan has it, by `run_id`).
#[derive(Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: usize,
    pub flows: Vec<StoredFlow>,
    pub bottleneck: Option<QdiscStats>,
    pub started_unix: f64,
    pub wall_secs: f64,
    pub sample_failures: u64,
    pub qdiscs: Vec<String>,
    pub phase_secs: [f64; 3],
    pub t0_monotonic_ns: u64,
    /// File name under the shard's `traces/`.
    pub trace: Option<String>,
    /// The path emulator and its cost (absent in shards of ccctl before
    /// the `format` field).
    #[serde(default)]
    pub path: Option<PathUsage>,
    /// The ping prober's replies (absent before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ping: Vec<PingSample>,
}

/// One flow of a stored record (its plan is the job's, by position).
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredFlow {
    pub kernel_cc: String,
    pub sender: usize,
    pub result: FlowResult,
    pub samples: Vec<Sample>,
}

impl Records {
    pub fn new(plan_digest: String, shard: Shard, records: &[JobRecord]) -> Records {
        Records {
            format: FORMAT,
            plan_digest,
            shard,
            records: records.iter().map(RunRecord::of).collect(),
        }
    }

    pub fn read(dir: &Path) -> Result<Records, RunDirError> {
        read_json(&dir.join(RECORDS))
    }

    /// Writes `<dir>/records.json` (compact JSON) at the current [`FORMAT`].
    pub fn write(&self, dir: &Path) -> Result<(), RunDirError> {
        let path = dir.join(RECORDS);
        if self.format != FORMAT {
            return Err(RunDirError::Write {
                path,
                message: format!("format {} (this ccctl writes {FORMAT})", self.format),
            });
        }
        write_json(&path, self, false)
    }
}

impl RunRecord {
    pub fn of(r: &JobRecord) -> RunRecord {
        RunRecord {
            run_id: r.job.id,
            flows: r
                .flows
                .iter()
                .map(|f| StoredFlow {
                    kernel_cc: f.kernel_cc.clone(),
                    sender: f.sender,
                    result: f.result.clone(),
                    samples: f.samples.clone(),
                })
                .collect(),
            bottleneck: r.bottleneck.clone(),
            started_unix: r.started_unix,
            wall_secs: r.wall_secs,
            sample_failures: r.sample_failures,
            qdiscs: r.qdiscs.clone(),
            phase_secs: r.phase_secs,
            t0_monotonic_ns: r.t0_monotonic_ns,
            trace: r
                .trace
                .as_ref()
                .and_then(|p| p.file_name())
                .map(|f| f.to_string_lossy().into_owned()),
            path: r.path.clone(),
            ping: r.ping.clone(),
        }
    }

    /// The [`JobRecord`] of `job` (this record's planned job) in run
    /// directory `dir`. The caller checks the flows match the job's.
    pub fn to_job_record(&self, job: Job, dir: &Path) -> JobRecord {
        let flows = job
            .flows
            .iter()
            .zip(&self.flows)
            .map(|(plan, f)| FlowRecord {
                plan: plan.clone(),
                kernel_cc: f.kernel_cc.clone(),
                sender: f.sender,
                result: f.result.clone(),
                samples: f.samples.clone(),
            })
            .collect();
        JobRecord {
            job,
            flows,
            bottleneck: self.bottleneck.clone(),
            started_unix: self.started_unix,
            wall_secs: self.wall_secs,
            sample_failures: self.sample_failures,
            qdiscs: self.qdiscs.clone(),
            phase_secs: self.phase_secs,
            t0_monotonic_ns: self.t0_monotonic_ns,
            trace: self.trace.as_ref().map(|f| dir.join(TRACES).join(f)),
            path: self.path.clone(),
            ping: self.ping.clone(),
        }
    }
}

// ---------------------------------------------------------------- summary.parquet

/// A Parquet column's Rust type: how a column of it is built and read.
trait Cell: Sized {
    const TYPE: &'static str;
    fn column(name: &str, values: Vec<Self>) -> Column;
    fn read(c: &Column) -> Result<Vec<Self>, String>;
    /// `n` empty cells, for a column a file predates; none for a type
    /// without an empty value.
    fn absent(_n: usize) -> Option<Vec<Self>> {
        None
    }
}

/// Columns added to `summary.parquet` after files of the same format were
/// written: a file without one reads as empty there.
const LATER_COLUMNS: &[&str] = &["ping_rtt_ms"];

fn series(c: &Column) -> &Series {
    c.as_materialized_series()
}

macro_rules! cells {
    ($($ty:ty, $name:literal, $get:ident, $own:expr;)*) => {$(
        impl Cell for Option<$ty> {
            const TYPE: &'static str = concat!($name, " or null");
            fn column(name: &str, values: Vec<Self>) -> Column {
                Column::new(name.into(), values)
            }
            fn read(c: &Column) -> Result<Vec<Self>, String> {
                let ca = series(c)
                    .$get()
                    .map_err(|_| format!("is {}, not {}", c.dtype(), Self::TYPE))?;
                Ok((0..ca.len()).map(|i| ca.get(i).map($own)).collect())
            }
            fn absent(n: usize) -> Option<Vec<Self>> {
                Some(vec![None; n])
            }
        }
        impl Cell for $ty {
            const TYPE: &'static str = $name;
            fn column(name: &str, values: Vec<Self>) -> Column {
                Column::new(name.into(), values)
            }
            fn read(c: &Column) -> Result<Vec<Self>, String> {
                let ca = series(c)
                    .$get()
                    .map_err(|_| format!("is {}, not {}", c.dtype(), Self::TYPE))?;
                (0..ca.len())
                    .map(|i| ca.get(i).map($own).ok_or_else(|| format!("null in row {i}")))
                    .collect()
            }
        }
    )*};
}

cells! {
    String, "string", str, str::to_string;
    u32, "u32", u32, |v| v;
    u64, "u64", u64, |v| v;
    f64, "f64", f64, |v| v;
    bool, "bool", bool, |v| v;
}

/// The columns of `summary.parquet`, in file order: name, type, and where
/// the writer takes it from an analysis row (`r`). One line per column: the
/// writer, the readers and [`SUMMARY_COLUMNS`] all come from here.
macro_rules! summary_columns {
    ($($name:ident: $ty:ty = |$r:ident| $get:expr;)*) => {
        /// One row of `summary.parquet`: a flow (`level = "flow"`) or a run
        /// (`level = "run"`).
        #[derive(Debug, Clone, PartialEq)]
        pub struct SummaryRecord {
            $(pub $name: $ty,)*
        }

        /// The column names of `summary.parquet`, in file order.
        pub const SUMMARY_COLUMNS: &[&str] = &[$(stringify!($name)),*];

        impl SummaryRecord {
            /// The row the lab writes for an analysis row.
            pub fn of(row: &SummaryRow) -> SummaryRecord {
                SummaryRecord {
                    $($name: { let $r = row; $get },)*
                }
            }

            fn columns(rows: &[SummaryRecord]) -> Vec<Column> {
                vec![$(
                    <$ty as Cell>::column(
                        stringify!($name),
                        rows.iter().map(|r| r.$name.clone()).collect(),
                    ),
                )*]
            }

            fn from_frame(df: &DataFrame, path: &Path) -> Result<Vec<SummaryRecord>, RunDirError> {
                $(
                    let $name: Vec<$ty> = {
                        let column = stringify!($name);
                        let bad = |message: String| RunDirError::Column {
                            path: path.to_path_buf(),
                            column,
                            message,
                        };
                        match df.column(column) {
                            Ok(c) => <$ty as Cell>::read(c).map_err(bad)?,
                            // A column added after files were written: read
                            // as empty where the type allows it.
                            Err(_) if LATER_COLUMNS.contains(&column) => {
                                <$ty as Cell>::absent(df.height()).ok_or_else(|| bad("missing".into()))?
                            }
                            Err(_) => return Err(bad("missing".into())),
                        }
                    };
                    let mut $name = $name.into_iter();
                )*
                Ok((0..df.height())
                    .map_while(|_| Some(SummaryRecord { $($name: $name.next()?,)* }))
                    .collect())
            }
        }
    };
}

summary_columns! {
    level: String = |r| r.level.to_string();
    run_id: u32 = |r| r.run_id as u32;
    kind: String = |r| r.kind.to_string();
    link_index: u32 = |r| r.link_index as u32;
    rate_bps: f64 = |r| r.rate_bps;
    rtt_ms: f64 = |r| r.rtt_ms;
    buffer: String = |r| r.buffer.clone();
    buffer_bytes: u64 = |r| r.buffer_bytes;
    loss: f64 = |r| r.loss;
    aqm: String = |r| r.aqm.clone();
    matchup: Option<u32> = |r| r.matchup.map(|m| m as u32);
    repetition: u32 = |r| r.repetition;
    flow: Option<u32> = |r| r.flow.map(|f| f as u32);
    cc: String = |r| r.cc.clone();
    start_s: Option<f64> = |r| r.start_s;
    duration_s: f64 = |r| r.duration_s;
    flow_rtt_ms: Option<f64> = |r| r.flow_rtt_ms;
    schedule_on_ms: Option<f64> = |r| r.schedule_on_ms;
    schedule_off_ms: Option<f64> = |r| r.schedule_off_ms;
    schedule_theta: Option<f64> = |r| r.schedule_theta;
    goodput_bps: Option<f64> = |r| r.metrics.goodput_bps;
    share: Option<f64> = |r| r.share;
    retransmits: Option<u64> = |r| r.metrics.retransmits;
    retransmits_total: u64 = |r| r.metrics.retransmits_total;
    mean_rtt_ms: Option<f64> = |r| r.metrics.mean_rtt_ms;
    p95_rtt_ms: Option<f64> = |r| r.metrics.p95_rtt_ms;
    min_rtt_ms: Option<f64> = |r| r.metrics.min_rtt_ms;
    samples: u32 = |r| r.metrics.samples as u32;
    goodput_source: String = |r| r.metrics.source.to_string();
    harm_tput: Option<f64> = |r| r.harm_tput;
    harm_rtt: Option<f64> = |r| r.harm_rtt;
    m_f_tput: Option<f64> = |r| r.m_f_tput;
    m_h_tput: Option<f64> = |r| r.m_h_tput;
    m_h_rtt: Option<f64> = |r| r.m_h_rtt;
    jain_index: Option<f64> = |r| r.jain_index;
    utilization: Option<f64> = |r| r.utilization;
    ping_rtt_ms: Option<f64> = |r| r.ping_rtt_ms;
    bottleneck_drops: Option<u64> = |r| r.bottleneck_drops;
    reference_bps: Option<f64> = |r| r.reference_bps;
    testbed_limited: bool = |r| r.testbed_limited;
}

/// Writes a Parquet file of `columns`.
pub(crate) fn write_parquet(path: &Path, columns: Vec<Column>) -> Result<(), RunDirError> {
    let err = write_err(path);
    let mut df = DataFrame::new_infer_height(columns).map_err(|e| err(e.to_string()))?;
    let file = File::create(path).map_err(|e| err(e.to_string()))?;
    ParquetWriter::new(file)
        .finish(&mut df)
        .map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Writes `<dir>/summary.parquet`.
pub fn write_summary(dir: &Path, rows: &[SummaryRecord]) -> Result<(), RunDirError> {
    write_parquet(&dir.join(SUMMARY), SummaryRecord::columns(rows))
}

/// Reads `<dir>/summary.parquet`, every column checked.
pub fn read_summary(dir: &Path) -> Result<Vec<SummaryRecord>, RunDirError> {
    let path = dir.join(SUMMARY);
    let f = File::open(&path).map_err(io_err(&path))?;
    let df = ParquetReader::new(f)
        .finish()
        .map_err(|e| RunDirError::Malformed {
            path: path.clone(),
            message: format!("not a Parquet file: {e}"),
        })?;
    SummaryRecord::from_frame(&df, &path)
}

/// A finished run directory, read through this module: its metadata
/// (format checked) and its summary.
pub struct RunDir {
    pub dir: PathBuf,
    pub metadata: Metadata,
    pub summary: Vec<SummaryRecord>,
}

impl RunDir {
    pub fn read(dir: &Path) -> Result<RunDir, RunDirError> {
        Ok(RunDir {
            dir: dir.to_path_buf(),
            metadata: Metadata::read(dir)?,
            summary: read_summary(dir)?,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use std::time::Duration;

    /// A fresh directory, removed when the guard drops.
    pub(crate) fn tempdir(name: &str) -> ccctl_sys::ScratchDir {
        ccctl_sys::scratch_dir(&format!("rundir-{name}")).expect("temp dir")
    }

    /// A complete run's metadata, as the writer fills it.
    pub(crate) fn metadata() -> Metadata {
        Metadata {
            format: FORMAT,
            ccctl_version: "0.1.0".into(),
            git_commit: "abc123".into(),
            scenario: "t".into(),
            ran_on: "host".into(),
            kernel: "6.1.0".into(),
            iperf3: "iperf 3.12".into(),
            sysctls: [("net.core.default_qdisc".to_string(), "fq".to_string())].into(),
            testbed: "dumbbell".into(),
            calibration_share: 0.85,
            planned_runs: 1,
            plan_digest: "0123456789abcdef".into(),
            shard: None,
            shards: Vec::new(),
            started_unix: 1000.0,
            finished_unix: Some(1060.0),
            status: STATUS_COMPLETE.into(),
            loaded_for_run: vec!["bpf_bbr".into()],
            params: [(
                "bpf_bbr".to_string(),
                [("cwnd_gain".to_string(), 2.0)].into(),
            )]
            .into(),
            calibrations: vec![Calibration {
                link_index: 0,
                rate_bps: 20e6,
                reference_bps: Some(19e6),
                share: Some(0.95),
                paced_bps: None,
                paced_share: None,
                testbed_limited: false,
            }],
            runs: vec![RunMeta {
                run_id: 0,
                kind: "calibration".into(),
                link_index: 0,
                started_unix: 1000.0,
                wall_secs: 20.0,
                setup_flows_teardown_secs: [1.0, 18.0, 1.0],
                sample_failures: 0,
                qdiscs: vec!["tbf".into()],
                trace: None,
                schedules: vec![Some(ScheduleMeta {
                    on_ms: 10.0,
                    off_ms: 70.0,
                    theta: 0.125,
                })],
                path: None,
            }],
        }
    }

    /// A flow row with every optional figure empty.
    pub(crate) fn summary_row(kind: &str, run_id: u32, cc: &str) -> SummaryRecord {
        SummaryRecord {
            level: "flow".into(),
            run_id,
            kind: kind.into(),
            link_index: 0,
            rate_bps: 20e6,
            rtt_ms: 40.0,
            buffer: "1bdp".into(),
            buffer_bytes: 100_000,
            loss: 0.0,
            aqm: "tail_drop".into(),
            matchup: Some(0),
            repetition: 0,
            flow: Some(0),
            cc: cc.into(),
            start_s: Some(0.0),
            duration_s: 20.0,
            flow_rtt_ms: Some(40.0),
            schedule_on_ms: None,
            schedule_off_ms: None,
            schedule_theta: None,
            goodput_bps: None,
            share: None,
            retransmits: None,
            retransmits_total: 0,
            mean_rtt_ms: None,
            p95_rtt_ms: None,
            min_rtt_ms: None,
            samples: 0,
            goodput_source: "inet_diag".into(),
            harm_tput: None,
            harm_rtt: None,
            m_f_tput: None,
            m_h_tput: None,
            m_h_rtt: None,
            jain_index: None,
            utilization: None,
            ping_rtt_ms: None,
            bottleneck_drops: None,
            reference_bps: None,
            testbed_limited: false,
        }
    }

    fn json(m: &Metadata) -> String {
        serde_json::to_string(m).expect("serializes")
    }

    /// Rewrites `dir/file` as JSON changed by `f`.
    fn tamper(dir: &Path, file: &str, f: impl FnOnce(&mut serde_json::Value)) {
        let path = dir.join(file);
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        f(&mut v);
        std::fs::write(&path, v.to_string()).expect("write");
    }

    #[test]
    fn metadata_round_trips_with_its_format() {
        let dir = tempdir("meta-rt");
        let m = metadata();
        m.write(&dir).expect("write");
        let text = std::fs::read_to_string(dir.join(METADATA)).expect("file");
        assert!(
            text.starts_with(&format!("{{\n  \"format\": {FORMAT},")),
            "{text}"
        );
        let back = Metadata::read(&dir).expect("read");
        assert_eq!(json(&back), json(&m));
        assert!(back.is_complete());
        assert_eq!(back.limited_links(), 0);
        // Written before the field existed: read as format 1.
        tamper(&dir, METADATA, |v| {
            v.as_object_mut().expect("object").remove("format");
        });
        assert_eq!(Metadata::read(&dir).expect("legacy").format, 1);
    }

    #[test]
    fn a_newer_format_is_refused_naming_both_versions() {
        let dir = tempdir("meta-new");
        metadata().write(&dir).expect("write");
        tamper(&dir, METADATA, |v| {
            v["format"] = (FORMAT + 1).into();
            v["ccctl_version"] = "9.0.0".into();
            // What a newer format might change: refused for its version
            // all the same, not for this field.
            v["runs"] = "elsewhere".into();
        });
        let e = Metadata::read(&dir).expect_err("newer format");
        assert!(matches!(e, RunDirError::Unsupported { found, .. } if found == FORMAT + 1));
        let msg = e.to_string();
        for part in [
            METADATA,
            &format!("format {}", FORMAT + 1),
            "written by ccctl 9.0.0",
            &format!("reads formats {OLDEST_FORMAT} to {FORMAT}"),
            env!("CARGO_PKG_VERSION"),
            "newer ccctl",
        ] {
            assert!(msg.contains(part), "`{part}` not in: {msg}");
        }
        // Format 0 never existed: refused too.
        tamper(&dir, METADATA, |v| v["format"] = 0.into());
        assert!(Metadata::read(&dir)
            .expect_err("format 0")
            .to_string()
            .contains("format 0"));
    }

    #[test]
    fn missing_or_garbled_fields_are_named() {
        let dir = tempdir("meta-bad");
        type Tamper = fn(&mut serde_json::Value);
        let cases: [(&str, Tamper); 4] = [
            ("status", |v| {
                v.as_object_mut().expect("object").remove("status");
            }),
            ("runs[0].wall_secs", |v| {
                v["runs"][0]["wall_secs"] = "slow".into()
            }),
            ("calibrations[0].testbed_limited", |v| {
                v["calibrations"][0]["testbed_limited"] = 1.into()
            }),
            ("format", |v| v["format"] = "two".into()),
        ];
        for (field, f) in cases {
            metadata().write(&dir).expect("write");
            tamper(&dir, METADATA, f);
            let e = Metadata::read(&dir).expect_err(field);
            match &e {
                RunDirError::Field { field: got, .. } => assert_eq!(got, field, "{e}"),
                other => panic!("{field}: {other}"),
            }
            let msg = e.to_string();
            assert!(msg.contains(METADATA) && msg.contains(field), "{msg}");
        }
        std::fs::write(dir.join(METADATA), "{\"format\": 1, \"ccctl_v").expect("write");
        let e = Metadata::read(&dir).expect_err("cut file");
        assert!(matches!(e, RunDirError::Malformed { .. }), "{e}");
        std::fs::remove_file(dir.join(METADATA)).expect("rm");
        let e = Metadata::read(&dir).expect_err("no file");
        assert!(
            matches!(e, RunDirError::Io { .. }) && e.to_string().contains(METADATA),
            "{e}"
        );
    }

    #[test]
    fn summary_round_trips_and_names_a_bad_column() {
        let dir = tempdir("summary");
        let mut a = summary_row("main", 3, "cubic");
        a.goodput_bps = Some(9.5e6);
        a.retransmits = Some(12);
        a.schedule_theta = Some(0.125);
        a.bottleneck_drops = Some(7);
        a.testbed_limited = true;
        let mut b = summary_row("main", 3, "bbr");
        b.level = "run".into();
        b.flow = None;
        b.jain_index = Some(0.99);
        let rows = vec![a, b];
        write_summary(&dir, &rows).expect("write");
        assert_eq!(read_summary(&dir).expect("read"), rows);
        // The file's columns are the list, in its order.
        let df = ParquetReader::new(File::open(dir.join(SUMMARY)).expect("open"))
            .finish()
            .expect("parquet");
        let names: Vec<String> = df
            .get_column_names()
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(names, SUMMARY_COLUMNS);
        // A file from before the ping prober (no ping_rtt_ms) reads, empty there.
        let mut cols = SummaryRecord::columns(&rows);
        cols.retain(|c| c.name().as_str() != "ping_rtt_ms");
        write_parquet(&dir.join(SUMMARY), cols).expect("write");
        let old = read_summary(&dir).expect("a file without ping_rtt_ms reads");
        assert!(old.iter().all(|r| r.ping_rtt_ms.is_none()));
        assert_eq!(old.len(), rows.len());
        // A column missing, and one of another type: named.
        let mut cols = SummaryRecord::columns(&rows);
        cols.retain(|c| c.name().as_str() != "cc");
        write_parquet(&dir.join(SUMMARY), cols).expect("write");
        let e = read_summary(&dir).expect_err("no cc");
        assert!(matches!(e, RunDirError::Column { column: "cc", .. }), "{e}");
        let mut cols = SummaryRecord::columns(&rows);
        for c in cols.iter_mut() {
            if c.name().as_str() == "run_id" {
                *c = Column::new("run_id".into(), vec!["three"; 2]);
            }
        }
        write_parquet(&dir.join(SUMMARY), cols).expect("write");
        let msg = read_summary(&dir).expect_err("run_id").to_string();
        assert!(
            msg.contains(SUMMARY) && msg.contains("`run_id`") && msg.contains("not u32"),
            "{msg}"
        );
    }

    /// Two shard directories of one plan, written by the writers as `lab
    /// run --shard K/2` writes them, merged by `lab merge`'s own function;
    /// the merged directory read back. Then a shard whose records.json is
    /// of a newer format: the merge refuses it by its version.
    #[test]
    fn merge_reads_shards_through_the_run_directory_types() {
        let work = tempdir("merge");
        let sc = Scenario::from_toml(
            "name = \"t\"\nduration = \"10s\"\nwarmup = \"1s\"\nflows = \"cubic:1, reno:1\"\n\
             [link]\nrate = \"20mbit\"\nrtt = \"40ms\"\nbuffer = \"1bdp\"\n",
        )
        .expect("scenario");
        let plan = crate::plan::plan(&sc);
        let report = crate::iperf::parse_report(
            r#"{"start":{"connected":[],"version":"x"},"intervals":[],"end":{}}"#,
        )
        .expect("minimal report");
        let mut dirs = Vec::new();
        for k in 1..=2 {
            let shard = Shard { index: k, count: 2 };
            let dir = work.join(format!("shard{k}"));
            std::fs::create_dir_all(&dir).expect("dir");
            let ids = crate::shard::select(&plan, shard);
            let records: Vec<JobRecord> = ids
                .iter()
                .map(|&id| {
                    let job = plan.jobs[id].clone();
                    let flows = job
                        .flows
                        .iter()
                        .map(|f| FlowRecord {
                            plan: f.clone(),
                            kernel_cc: f.cc.clone(),
                            sender: 0,
                            result: crate::iperf::FlowResult::from_report(
                                crate::iperf::FlowSpec::new(0, &f.cc, Duration::from_secs(10)),
                                5201,
                                0.0,
                                report.clone(),
                            ),
                            samples: Vec::new(),
                        })
                        .collect();
                    JobRecord {
                        job,
                        flows,
                        bottleneck: None,
                        started_unix: 1000.0,
                        wall_secs: 10.0,
                        sample_failures: 0,
                        qdiscs: Vec::new(),
                        phase_secs: [0.0; 3],
                        t0_monotonic_ns: 0,
                        trace: None,
                        path: None,
                        ping: Vec::new(),
                    }
                })
                .collect();
            let mut meta = Metadata::new(&sc, "host", &plan);
            meta.shard = Some(ShardMeta {
                index: k,
                count: 2,
                runs: ids,
            });
            meta.finish(&records, None);
            crate::output::write_scenario(&dir.join(SCENARIO), &sc).expect("scenario");
            meta.write(&dir).expect("metadata");
            crate::shard::write_records(&dir, &plan, shard, &records).expect("records");
            dirs.push(dir);
        }
        let out = work.join("merged");
        crate::merge(&dirs, &out).expect("merge");
        let merged = RunDir::read(&out).expect("merged run directory");
        assert_eq!(merged.metadata.format, FORMAT);
        assert_eq!(merged.metadata.shards.len(), 2);
        assert_eq!(merged.metadata.planned_runs, plan.jobs.len());
        assert!(merged.metadata.is_complete());
        assert!(merged
            .summary
            .iter()
            .any(|r| r.kind == "main" && r.cc == "reno"));

        tamper(&dirs[1], RECORDS, |v| v["format"] = (FORMAT + 1).into());
        let Err(e) = crate::merge(&dirs, &work.join("merged2")) else {
            panic!("a records.json of a newer format was merged");
        };
        let msg = e.to_string();
        assert!(
            msg.contains(RECORDS) && msg.contains(&format!("format {}", FORMAT + 1)),
            "{msg}"
        );
    }
}
