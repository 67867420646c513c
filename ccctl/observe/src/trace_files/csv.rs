//! The CSV sink.
use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use ccctl_core::abi::ccctl_event;
use ccctl_core::registry::{self, EventGroup};
use ccctl_core::trace::{event, sink::Sink};

use super::COLUMNS;

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
        csv_row(&mut self.out, e)
    }
}

/// One column's text (`$v` its value).
macro_rules! csv_value {
    ($out:ident, Addr, $v:expr) => {
        write!($out, "{}", event::addr_string($v))
    };
    ($out:ident, Enum($f:path), $v:expr) => {
        $out.write_all($f($v).as_bytes())
    };
    ($out:ident, $kind:ident, $v:expr) => {
        write!($out, "{}", $v)
    };
}

/// Whether a row fills a group's columns.
macro_rules! csv_fills {
    ($e:ident, All) => {
        true
    };
    ($e:ident, $g:ident) => {
        registry::fills($e.algo, EventGroup::$g)
    };
}

macro_rules! define_csv_row {
    ($( $name:ident : $kind:ident $(($f:path))?, $group:ident, |$e:ident| $val:expr, $ty:literal, $doc:literal; )*) => {
        /// One event as a CSV line: the schema's columns in order; the
        /// columns of another algorithm empty (null), never 0.
        fn csv_row(out: &mut impl Write, e: &ccctl_event) -> std::io::Result<()> {
            let mut first = true;
            $(
                if !first {
                    out.write_all(b",")?;
                }
                first = false;
                if csv_fills!(e, $group) {
                    let v = { let $e = e; $val };
                    csv_value!(out, $kind $(($f))?, v)?;
                }
            )*
            let _ = first;
            out.write_all(b"\n")
        }
    };
}
ccctl_core::with_event_columns!(define_csv_row);

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
