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
        // Columns of another algorithm are empty (null), never 0.
        fn opt<T: std::fmt::Display>(has: bool, v: T) -> String {
            if has {
                v.to_string()
            } else {
                String::new()
            }
        }
        let bbr = registry::fills(e.algo, EventGroup::Bbr);
        let modest = registry::fills(e.algo, EventGroup::Modest);
        let pt = registry::fills(e.algo, EventGroup::Patched);
        let ds = registry::fills(e.algo, EventGroup::Dstar);
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
            registry::kernel_name_of(e.algo),
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
