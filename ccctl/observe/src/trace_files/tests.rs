//! Round trips through the Parquet, CSV and rotating sinks.
use std::fs::File;
use std::sync::atomic::Ordering;

use ccctl_core::registry::{self, EventGroup};
use ccctl_core::trace::{event, sink::Sink, synthetic::synthetic_event};
use polars::prelude::*;

use super::*;

/// synthetic_event(i)'s local address as the files must show it,
/// written out independently of the code under test: every fourth flow
/// IPv6 `fd00:ccc::F:1`, the others IPv4 `198.18.F.1` (F the flow, hex in IPv6).
fn synthetic_saddr_text(i: u64) -> String {
    let flow = i % 16;
    if flow % 4 == 3 {
        format!("fd00:ccc::{flow:x}:1")
    } else {
        format!("198.18.{flow}.1")
    }
}

/// A collector globbing `*.parquet` sees only finished files: the current
/// one is a hidden `.partial` until rotation renames it.
#[test]
fn rotating_files_appear_only_when_complete() {
    let dir = tempdir();
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
}

/// Hive layout: `host=/date=/hour=` directories from the UTC time the
/// file was opened, a `host` column on every row, counters shared.
#[test]
fn hive_layout_partitions_and_names_the_host() {
    let dir = tempdir();
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
        assert_eq!(
            col("algo").get_str().unwrap(),
            registry::kernel_name_of(want.algo)
        );
        assert_eq!(
            col("pacing_rate_bps"),
            AnyValue::UInt64(want.pacing_rate * 8)
        );
        // Each algorithm's own columns; null on every other's rows.
        let a = want.algo;
        if registry::fills(a, EventGroup::Bbr) {
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
        if registry::fills(a, EventGroup::Modest) {
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
        if registry::fills(a, EventGroup::Patched) {
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
        if registry::fills(a, EventGroup::Dstar) {
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
        assert_eq!(row[col("algo")], registry::kernel_name_of(want.algo));
        assert_eq!(row[col("cwnd")].parse::<u32>().unwrap(), want.cwnd);
        let a = want.algo;
        if registry::fills(a, EventGroup::Bbr) {
            assert_eq!(
                row[col("cwnd_gain")].parse::<f64>().unwrap(),
                event::gain(want.cwnd_gain)
            );
        } else {
            assert_eq!(row[col("cwnd_gain")], "", "cwnd_gain on algo {a}");
        }
        if registry::fills(a, EventGroup::Patched) {
            assert_eq!(
                row[col("theta")].parse::<f64>().unwrap(),
                event::theta(want.theta)
            );
        } else {
            assert_eq!(row[col("theta")], "", "theta on algo {a}");
            assert_eq!(row[col("off_us")], "", "off_us on algo {a}");
        }
        if registry::fills(a, EventGroup::Dstar) {
            assert_eq!(
                row[col("dstar_mode")],
                event::dstar_mode_name(want.dstar_mode)
            );
            assert_eq!(row[col("dstar_bdp")], want.dstar_bdp.to_string());
        } else {
            assert_eq!(row[col("dstar_bdp")], "", "dstar_bdp on algo {a}");
            assert_eq!(
                row[col("min_win")].is_empty(),
                !registry::fills(a, EventGroup::Modest)
            );
        }
    }
}

/// A fresh directory under the temp dir, removed when the guard drops.
pub(crate) fn tempdir() -> ccctl_core::sys::ScratchDir {
    ccctl_core::sys::scratch_dir("trace-test").expect("temporary directory")
}

/// The pages' statistics: min/max on the columns a reader filters a trace
/// by (time, flow, ports), so a scan can skip row groups; a null count on
/// every column; no min/max on the others (they cost CPU per event and no
/// reader filters on them).
#[test]
fn parquet_min_max_only_where_readers_filter() {
    use polars_parquet::parquet::statistics::Statistics;
    let dir = tempdir();
    let path = dir.join("t.parquet");
    let n = 40_000u64;
    let mut sink: Box<dyn Sink> =
        Box::new(ParquetSink::with_row_group(&path, meta(), 16_384).unwrap());
    for i in 0..n {
        sink.push(&synthetic_event(i)).unwrap();
    }
    sink.finish(0).unwrap();

    let mut reader = ParquetReader::new(File::open(&path).unwrap());
    let md = reader.get_metadata().unwrap().clone();
    assert_eq!(md.row_groups.len(), 3);
    let stats = |group: usize, name: &str| {
        let col = md.row_groups[group]
            .parquet_columns()
            .iter()
            .find(|c| {
                c.descriptor()
                    .path_in_schema
                    .iter()
                    .map(|s| s.as_str())
                    .eq([name])
            })
            .unwrap_or_else(|| panic!("no column {name}"));
        col.statistics(&md.footer_buf)
            .unwrap_or_else(|| panic!("{name}: no statistics"))
            .unwrap()
    };
    // Row group 1 holds events 16384..32767.
    match stats(1, "ts_ns") {
        Statistics::Int64(s) => {
            assert_eq!(s.min_value, Some(synthetic_event(16_384).ts_ns as i64));
            assert_eq!(s.max_value, Some(synthetic_event(32_767).ts_ns as i64));
            assert_eq!(s.null_count, Some(0));
        }
        other => panic!("ts_ns: {other:?}"),
    }
    for name in ["flow_id", "sport", "dport"] {
        let has_min_max = match stats(1, name) {
            Statistics::Int64(s) => s.min_value.is_some() && s.max_value.is_some(),
            Statistics::Int32(s) => s.min_value.is_some() && s.max_value.is_some(),
            other => panic!("{name}: {other:?}"),
        };
        assert!(has_min_max, "{name}: min/max expected");
    }
    // A quarter of the rows are D*'s (every fourth flow).
    match stats(1, "dstar_bdp") {
        Statistics::Int32(s) => {
            assert_eq!((s.min_value, s.max_value), (None, None));
            assert_eq!(s.null_count, Some(16_384 * 3 / 4));
        }
        other => panic!("dstar_bdp: {other:?}"),
    }
    match stats(0, "cwnd") {
        Statistics::Int32(s) => {
            assert_eq!((s.min_value, s.max_value), (None, None));
            assert_eq!(s.null_count, Some(0));
        }
        other => panic!("cwnd: {other:?}"),
    }
}

/// Row groups that are no multiple of the consumer's staging block (256
/// events) keep every event, in order, in the row group it was pushed to.
#[test]
fn parquet_row_groups_cut_through_a_staged_block() {
    let dir = tempdir();
    let path = dir.join("t.parquet");
    let mut sink: Box<dyn Sink> =
        Box::new(ParquetSink::with_row_group(&path, meta(), 300).unwrap());
    for i in 0..1_000 {
        sink.push(&synthetic_event(i)).unwrap();
    }
    assert_eq!(sink.finish(0).unwrap(), 1_000);
    let mut reader = ParquetReader::new(File::open(&path).unwrap());
    let md = reader.get_metadata().unwrap().clone();
    let sizes: Vec<usize> = md.row_groups.iter().map(|g| g.num_rows()).collect();
    assert_eq!(sizes, [300, 300, 300, 100]);
    let df = reader.finish().unwrap();
    let ts: Vec<u64> = df
        .column("ts_ns")
        .unwrap()
        .u64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    let want: Vec<u64> = (0..1_000).map(|i| synthetic_event(i).ts_ns).collect();
    assert_eq!(ts, want);
}
