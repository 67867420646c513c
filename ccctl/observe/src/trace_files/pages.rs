//! A row group's columns as Parquet pages: encodings and statistics per
//! column, the columns shared out among threads, and the columns of one
//! algorithm family (which share one validity) written from one set of
//! definition levels.
use std::collections::HashMap;

use anyhow::{anyhow, Result};
use polars::prelude::*;
use polars_arrow::array::PrimitiveArray;
use polars_arrow::bitmap::Bitmap;
use polars_arrow::types::NativeType;
use polars_parquet::parquet::compression::Compression;
use polars_parquet::parquet::metadata::Descriptor;
use polars_parquet::parquet::page::{
    CompressedDataPage, CompressedDictPage, DataPage, DataPageHeader, DataPageHeaderV1, Page,
};
use polars_parquet::parquet::CowBuffer;
use polars_parquet::write::{
    array_to_columns, compress, write_def_levels, CompressedPage, CompressionOptions, Encoding,
    FallibleStreamingIterator, ParquetType, StatisticsOptions as PageStatistics, Version,
    WriteOptions,
};

/// How each column of `schema` is written. Row groups are encoded here, not
/// by polars' `write_batch`: polars tries a dictionary on every column (a
/// cardinality estimate, then a hash of every value), which took a fifth
/// of the writer's time on the trace's numeric columns, most of which are
/// wide (timestamps, rates, windows). Dictionaries where the column is one
/// already (enumerations, addresses) and for the constant `host` string;
/// plain values, then zstd, elsewhere.
pub(super) fn column_plans(schema: &Schema, fields: &[ParquetType]) -> Vec<ColumnPlan> {
    schema
        .iter()
        .zip(fields.iter().cloned())
        .map(|((name, dtype), field)| ColumnPlan {
            field,
            encoding: match dtype {
                DataType::Categorical(..) | DataType::Enum(..) | DataType::String => {
                    vec![Encoding::RleDictionary]
                }
                _ => vec![Encoding::Plain],
            },
            options: WriteOptions {
                statistics: statistics_of(name),
                version: Version::V1,
                compression: CompressionOptions::Zstd(None),
                data_page_size: None,
            },
        })
        .collect()
}

/// The columns whose pages carry min/max statistics: what a reader filters
/// a trace by (a time range, a flow, a port), so that polars, DuckDB or
/// Arrow can skip row groups. Every other column carries its null count
/// only: min/max of the rates and windows no reader filters on were 6 % of
/// the consumer's CPU (`perf record`, 2026-11-28).
const MIN_MAX_COLUMNS: [&str; 4] = ["ts_ns", "flow_id", "sport", "dport"];

fn statistics_of(column: &str) -> PageStatistics {
    let min_max = MIN_MAX_COLUMNS.contains(&column);
    PageStatistics {
        min_value: min_max,
        max_value: min_max,
        distinct_count: false,
        null_count: true,
        ..PageStatistics::default()
    }
}

/// How one column is written: its Parquet field, encoding and options.
pub(super) struct ColumnPlan {
    field: ParquetType,
    encoding: Vec<Encoding>,
    options: WriteOptions,
}

/// Threads that encode a row group's columns: the cores this process may
/// run on but one, which the consumer (the ring buffer's callback) needs
/// for itself; at least 1, at most 4 (~55 columns of similar size). On 2
/// cores that is the writer thread alone. Measured there (2026-11-28, the
/// trace bench): two encoders took ~9 % more CPU per event; for one
/// algorithm's stream (the consumer the bound) they slowed it from 4.45 to
/// 4.07 M events/s, for four algorithms interleaved (the writer the bound)
/// they raised 2.92 to 3.25 M/s. Sharing only while the consumer waited on
/// the writer: +10 to +30 % interleaved, -8 to -11 % for one algorithm
/// (medians of 6-8 runs, twice): not kept.
pub(super) fn encoder_threads() -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (cores - 1).clamp(1, 4)
}

/// One row group's columns encoded and compressed, in schema order (each
/// column's leaves, then its pages). The columns are shared out among
/// `threads` threads (this one included), each taking the next column not
/// yet taken, so the writer keeps up with the consumer on more than one core.
pub(super) fn encode_row_group(
    arrays: Vec<ArrayRef>,
    plans: &[ColumnPlan],
    threads: usize,
) -> Result<Vec<Vec<CompressedPage>>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    if arrays.len() != plans.len() {
        return Err(anyhow!(
            "a row group of {} columns for a schema of {}",
            arrays.len(),
            plans.len()
        ));
    }
    let shared = shared_levels(&arrays, plans)?;
    let next = AtomicUsize::new(0);
    let work = || -> Result<Vec<(usize, Vec<Vec<CompressedPage>>)>> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let (Some(array), Some(plan)) = (arrays.get(i), plans.get(i)) else {
                return Ok(done);
            };
            let levels = match array.validity() {
                Some(v) if takes_shared_levels(array.as_ref(), plan) => {
                    shared.get(&validity_key(v))
                }
                _ => None,
            };
            let pages = match levels {
                Some(levels) => vec![vec![shared_levels_page(array.as_ref(), plan, levels)?]],
                None => encode_column(array, plan)?,
            };
            done.push((i, pages));
        }
    };
    let mut parts = std::thread::scope(|s| -> Result<Vec<_>> {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut parts = work()?;
        for h in helpers {
            parts.extend(
                h.join()
                    .map_err(|_| anyhow!("a Parquet encoder thread panicked"))??,
            );
        }
        Ok(parts)
    })?;
    parts.sort_unstable_by_key(|(i, _)| *i);
    Ok(parts.into_iter().flat_map(|(_, leaves)| leaves).collect())
}

/// One column's leaves as compressed pages.
fn encode_column(array: &ArrayRef, plan: &ColumnPlan) -> Result<Vec<Vec<CompressedPage>>> {
    let leaves = array_to_columns(array, plan.field.clone(), plan.options, &plan.encoding)?;
    leaves
        .into_iter()
        .map(|pages| {
            pages
                .map(|page| compress_page(page?, plan.options.compression))
                .collect()
        })
        .collect()
}

/// A column's pages, encoded beforehand, as the file writer takes them.
pub(super) struct EncodedPages {
    pages: std::vec::IntoIter<CompressedPage>,
    current: Option<CompressedPage>,
}

impl EncodedPages {
    pub(super) fn new(pages: Vec<CompressedPage>) -> EncodedPages {
        EncodedPages {
            pages: pages.into_iter(),
            current: None,
        }
    }
}

impl FallibleStreamingIterator for EncodedPages {
    type Item = CompressedPage;
    type Error = PolarsError;

    fn advance(&mut self) -> std::result::Result<(), PolarsError> {
        self.current = self.pages.next();
        Ok(())
    }

    fn get(&self) -> Option<&CompressedPage> {
        self.current.as_ref()
    }
}

/// The definition levels and valid rows of one validity bitmap. The columns
/// of an algorithm family share theirs (null on the other algorithms'
/// rows), so with several algorithms interleaved in a row group they are
/// computed once per family, not once per column: polars encodes each
/// column's levels bit by bit and walks its validity again for the values,
/// which was ~40 % of the writer's time on four interleaved algorithms
/// (`perf record`, 2026-11-28).
struct SharedLevels {
    /// Version 1 levels as a page holds them: their byte length (u32, little
    /// endian), then the RLE / bit-packed hybrid of one bit per row.
    def_levels: Vec<u8>,
    valid_rows: Vec<u32>,
    null_count: usize,
}

/// A validity bitmap's identity: the clones every column of a family holds
/// share one buffer.
type ValidityKey = (usize, usize, usize);

fn validity_key(v: &Bitmap) -> ValidityKey {
    let (bytes, offset, len) = v.as_slice();
    (bytes.as_ptr() as usize, offset, len)
}

/// Pages above this many bytes are split by polars (its default data page
/// size); the shared path writes one page, so it takes only columns that
/// fit in one with room to spare.
const ONE_PAGE_BYTES: usize = 1 << 20;

/// Whether a column is written from shared levels: plain values of a
/// nullable u32, u64 or f64 column with nulls, in one version-1 page whose
/// statistics are its null count only.
fn takes_shared_levels(array: &dyn polars_arrow::array::Array, plan: &ColumnPlan) -> bool {
    use polars_arrow::datatypes::ArrowDataType as A;
    let ParquetType::PrimitiveType(pt) = &plan.field else {
        return false;
    };
    let width = match array.dtype() {
        A::UInt32 => 4,
        A::UInt64 | A::Float64 => 8,
        _ => return false,
    };
    let stats = plan.options.statistics;
    plan.encoding == [Encoding::Plain]
        && plan.options.version == Version::V1
        && plan.options.data_page_size.is_none()
        && !stats.min_value
        && !stats.max_value
        && !stats.distinct_count
        && pt.field_info.repetition == polars_parquet::parquet::schema::Repetition::Optional
        && array.null_count() > 0
        && array.len() * (width + 2) <= ONE_PAGE_BYTES
}

/// The levels of every validity that a column taking shared levels holds.
fn shared_levels(
    arrays: &[ArrayRef],
    plans: &[ColumnPlan],
) -> Result<HashMap<ValidityKey, SharedLevels>> {
    let mut out = HashMap::new();
    for (array, plan) in arrays.iter().zip(plans) {
        if !takes_shared_levels(array.as_ref(), plan) {
            continue;
        }
        let Some(v) = array.validity() else {
            continue;
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = out.entry(validity_key(v)) {
            let mut def_levels = Vec::new();
            write_def_levels(&mut def_levels, true, Some(v), v.len(), Version::V1)?;
            slot.insert(SharedLevels {
                def_levels,
                valid_rows: v.true_idx_iter().map(|i| i as u32).collect(),
                null_count: v.unset_bits(),
            });
        }
    }
    Ok(out)
}

/// A column's one page from its family's levels: the levels, then the
/// valid rows' values little endian (u32 as INT32, u64 as INT64, f64 as
/// DOUBLE: the same bytes), compressed. The same page polars writes (a
/// test compares them byte for byte).
fn shared_levels_page(
    array: &dyn polars_arrow::array::Array,
    plan: &ColumnPlan,
    levels: &SharedLevels,
) -> Result<CompressedPage> {
    let ParquetType::PrimitiveType(pt) = &plan.field else {
        return Err(anyhow!("shared levels for a column that is not primitive"));
    };
    let mut buffer = Vec::with_capacity(levels.def_levels.len() + 8 * levels.valid_rows.len());
    buffer.extend_from_slice(&levels.def_levels);
    fn gather<T: NativeType>(
        array: &dyn polars_arrow::array::Array,
        rows: &[u32],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let values = array
            .as_any()
            .downcast_ref::<PrimitiveArray<T>>()
            .ok_or_else(|| anyhow!("a column of an unexpected type"))?
            .values();
        for &r in rows {
            out.extend_from_slice(values[r as usize].to_le_bytes().as_ref());
        }
        Ok(())
    }
    match array.dtype() {
        polars_arrow::datatypes::ArrowDataType::UInt32 => {
            gather::<u32>(array, &levels.valid_rows, &mut buffer)?
        }
        polars_arrow::datatypes::ArrowDataType::UInt64 => {
            gather::<u64>(array, &levels.valid_rows, &mut buffer)?
        }
        polars_arrow::datatypes::ArrowDataType::Float64 => {
            gather::<f64>(array, &levels.valid_rows, &mut buffer)?
        }
        other => return Err(anyhow!("shared levels for a column of {other:?}")),
    }
    let statistics = polars_parquet::parquet::statistics::ParquetStatistics {
        null_count: plan
            .options
            .statistics
            .null_count
            .then_some(levels.null_count as i64),
        distinct_count: None,
        max_value: None,
        min_value: None,
        max: None,
        min: None,
        is_max_value_exact: None,
        is_min_value_exact: None,
    };
    let len = array.len();
    let page = DataPage::new(
        DataPageHeader::V1(DataPageHeaderV1 {
            num_values: len as i32,
            encoding: Encoding::Plain.into(),
            definition_level_encoding: Encoding::Rle.into(),
            repetition_level_encoding: Encoding::Rle.into(),
            statistics: Some(statistics),
        }),
        CowBuffer::Owned(buffer),
        Descriptor {
            primitive_type: pt.clone(),
            max_def_level: 0,
            max_rep_level: 0,
        },
        len,
    );
    compress_page(Page::Data(page), plan.options.compression)
}

thread_local! {
    /// This thread's zstd context and its level: polars creates (and
    /// zeroes) a context and an output buffer for every page, 7 % of the
    /// writer's time on 55 pages per row group (`perf record`, 2026-11-28).
    static ZSTD: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
}

/// A page compressed as polars' `compress` does it (the same bytes, a test
/// checks), zstd through this thread's context. Other codecs and version-2
/// pages go to polars.
fn compress_page(page: Page, compression: CompressionOptions) -> Result<CompressedPage> {
    let CompressionOptions::Zstd(level) = compression else {
        return Ok(compress(page, Vec::new(), compression)?);
    };
    if let Page::Data(p) = &page {
        if !matches!(p.header(), DataPageHeader::V1(_)) {
            return Ok(compress(page, Vec::new(), compression)?);
        }
    }
    // polars' level: the one given, else zstd's default (0).
    let level = level.map(|l| l.compression_level()).unwrap_or_default();
    ZSTD.with(|slot| -> Result<CompressedPage> {
        let mut slot = slot.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level)?));
        }
        let Some((_, zstd)) = slot.as_mut() else {
            return Err(anyhow!("no zstd context"));
        };
        Ok(match page {
            Page::Data(p) => {
                let compressed = zstd.compress(p.buffer())?;
                let num_rows = p
                    .num_rows
                    .ok_or_else(|| anyhow!("a data page without its number of rows"))?;
                CompressedPage::Data(CompressedDataPage::new(
                    p.header().clone(),
                    CowBuffer::Owned(compressed),
                    Compression::Zstd,
                    p.buffer().len(),
                    p.descriptor,
                    num_rows,
                ))
            }
            Page::Dict(d) => CompressedPage::Dict(CompressedDictPage::new(
                CowBuffer::Owned(zstd.compress(&d.buffer)?),
                Compression::Zstd,
                d.buffer.len(),
                d.num_values,
                d.is_sorted,
            )),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::super::columns::{ColumnKinds, Columns};
    use super::*;
    use ccctl_core::trace::synthetic::synthetic_event;

    /// `n` synthetic events (four algorithms interleaved) as one row
    /// group's arrays, with their columns' plans.
    fn arrays_and_plans(n: u64) -> (Vec<ArrayRef>, Vec<ColumnPlan>) {
        let kinds = &mut ColumnKinds::new().unwrap();
        let mut cols = Columns::with_capacity(n as usize);
        for i in 0..n {
            cols.push(&synthetic_event(i), kinds).unwrap();
        }
        let df = cols.into_frame(kinds).unwrap();
        let schema = df.schema().clone();
        let mut buf = Vec::new();
        let mut writer = ParquetWriter::new(&mut buf).batched(&schema).unwrap();
        let plans = column_plans(&schema, writer.parquet_schema().fields());
        let chunk = df.iter_chunks(CompatLevel::newest(), false).next().unwrap();
        (chunk.into_arrays(), plans)
    }

    /// A row group's pages are the same bytes whether one thread encodes
    /// its columns or several share them out (order kept).
    #[test]
    fn shared_encoding_writes_the_same_pages() {
        let (arrays, plans) = arrays_and_plans(5_000);
        let encode = |threads| {
            let pages = encode_row_group(arrays.clone(), &plans, threads).unwrap();
            format!("{pages:?}")
        };
        let alone = encode(1);
        assert!(alone.len() > 10_000, "{} bytes of pages", alone.len());
        assert_eq!(alone, encode(3));
        assert_eq!(alone, encode(4));
    }

    /// Every page of a row group, compressed through the thread's zstd
    /// context, is the page polars' `compress` makes of it, byte for byte.
    #[test]
    fn pages_compress_as_polars_does() {
        let (arrays, plans) = arrays_and_plans(5_000);
        let mut pages = 0;
        for (array, plan) in arrays.iter().zip(&plans) {
            let leaves =
                array_to_columns(array, plan.field.clone(), plan.options, &plan.encoding).unwrap();
            for leaf in leaves {
                for page in leaf {
                    let page = page.unwrap();
                    let copy = match &page {
                        Page::Data(p) => Page::Data(p.clone()),
                        Page::Dict(d) => Page::Dict(polars_parquet::parquet::page::DictPage::new(
                            d.buffer.clone(),
                            d.num_values,
                            d.is_sorted,
                        )),
                    };
                    let ours = compress_page(page, plan.options.compression).unwrap();
                    let polars = compress(copy, Vec::new(), plan.options.compression).unwrap();
                    assert_eq!(
                        format!("{ours:?}"),
                        format!("{polars:?}"),
                        "{}",
                        plan.field.name()
                    );
                    pages += 1;
                }
            }
        }
        // 55 columns, the six enumerations and addresses with a dictionary page.
        assert!(pages >= 55, "{pages} pages");
    }

    /// The columns written from their family's shared levels get the very
    /// pages polars writes for them (header, statistics, levels, values,
    /// compressed bytes); four algorithms interleaved give four families.
    #[test]
    fn shared_levels_pages_are_polars_pages() {
        let (arrays, plans) = arrays_and_plans(5_000);
        let shared = shared_levels(&arrays, &plans).unwrap();
        assert_eq!(shared.len(), 4, "one set of levels per family");
        let mut taken = Vec::new();
        for (array, plan) in arrays.iter().zip(&plans) {
            if !takes_shared_levels(array.as_ref(), plan) {
                continue;
            }
            let levels = &shared[&validity_key(array.validity().unwrap())];
            let ours = shared_levels_page(array.as_ref(), plan, levels).unwrap();
            let polars = encode_column(array, plan).unwrap();
            let name = plan.field.name().to_string();
            assert_eq!(format!("{:?}", [[ours]]), format!("{polars:?}"), "{name}");
            taken.push(name);
        }
        // Every u32, u64 and f64 column of a family (28 of the schema's
        // 32 family columns: not the three modes, not dstar_slow_start).
        assert!(taken.len() >= 25, "{taken:?}");
        for name in ["btl_bw_bps", "pacing_gain", "min_win", "theta", "dstar_bdp"] {
            assert!(taken.iter().any(|t| t == name), "{name} not in {taken:?}");
        }
        // Columns of every row, and those with min/max, stay with polars.
        for name in ["ts_ns", "cwnd", "flow_id"] {
            assert!(!taken.iter().any(|t| t == name), "{name} in {taken:?}");
        }
    }
}
