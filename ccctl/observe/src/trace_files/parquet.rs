//! The Parquet sink: events transposed into column vectors, row groups
//! encoded and written by a thread of their own.
use std::{
    cell::RefCell,
    fs::File,
    io::{BufWriter, Cursor, Write},
    path::{Path, PathBuf},
    rc::Rc,
    sync::mpsc,
    thread::JoinHandle,
};

use anyhow::{anyhow, Context, Result};
use ccctl_core::abi::ccctl_event;
use ccctl_core::trace::sink::{Sink, TraceMeta};
use polars::prelude::*;
use polars_parquet::write::{DynIter, DynStreamingIterator};

use super::columns::{ColumnKinds, Columns};
use super::pages::{column_plans, encode_row_group, encoder_threads, EncodedPages};
use super::ROW_GROUP;

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
        let mut kinds = ColumnKinds::new()?;
        let empty = with_host_column(Columns::with_capacity(0).into_frame(&mut kinds)?, &host)?;
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
        let df = with_host_column(full.into_frame(&mut self.kinds)?, &self.host)?;
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
    // polars' writer only opens the file (the Parquet schema, the page
    // version and statistics of the footer) and writes the footer; the
    // encodings and the compression are the `options` below.
    let mut writer = ParquetWriter::new(SharedFile(out.clone())).batched(&schema)?;
    let columns = column_plans(&schema, writer.parquet_schema().fields());
    let threads = encoder_threads();

    let mut rows = 0u64;
    let dropped =
        loop {
            match rx.recv() {
                Ok(Msg::Batch(df)) => {
                    for chunk in df.iter_chunks(CompatLevel::newest(), false) {
                        let n = chunk.len() as u64;
                        if n == 0 {
                            continue;
                        }
                        let encoded = encode_row_group(chunk.into_arrays(), &columns, threads)?;
                        let mut file_writer = writer
                            .get_writer()
                            .lock()
                            .map_err(|_| anyhow!("the Parquet writer lock is poisoned"))?;
                        file_writer.write(
                            n,
                            DynIter::new(encoded.into_iter().map(|pages| {
                                Ok(DynStreamingIterator::new(EncodedPages::new(pages)))
                            })),
                        )?;
                    }
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
