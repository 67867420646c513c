//! Events transposed into column vectors, and the vectors into a
//! DataFrame (dictionary-encoded strings, nulls for other algorithms' columns).
use std::{collections::HashMap, hash::BuildHasherDefault};

use anyhow::Result;
use ccctl_core::abi::ccctl_event;
use ccctl_core::registry::{self, EventGroup};
use ccctl_core::trace::event;
use polars::prelude::*;

use super::COLUMNS;

/// Addresses as a Categorical column: each address is formatted and
/// given a category id once, and the Parquet writer stores the ids against
/// a dictionary instead of hashing every string of every row group.
struct AddrCache {
    ids: HashMap<u128, u32, BuildHasherDefault<U64Hasher>>,
    dtype: DataType,
}

impl AddrCache {
    pub(super) fn new() -> AddrCache {
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
    pub(super) fn new(name_of: fn(u8) -> &'static str) -> Result<EnumColumn> {
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
pub(super) struct ColumnKinds {
    addrs: AddrCache,
    algo: EnumColumn,
    bbr_mode: EnumColumn,
    modest_phase: EnumColumn,
    dstar_mode: EnumColumn,
}

impl ColumnKinds {
    pub(super) fn new() -> Result<ColumnKinds> {
        Ok(ColumnKinds {
            addrs: AddrCache::new(),
            algo: EnumColumn::new(registry::kernel_name_of)?,
            bbr_mode: EnumColumn::new(event::bbr_mode_name)?,
            modest_phase: EnumColumn::new(event::modest_phase_name)?,
            dstar_mode: EnumColumn::new(event::dstar_mode_name)?,
        })
    }
}

/// One row group being filled: [`COLUMNS`] as vectors, one push per event.
pub(super) struct Columns {
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
    pub(super) fn with_capacity(n: usize) -> Columns {
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

    pub(super) fn len(&self) -> usize {
        self.ts_ns.len()
    }

    #[inline]
    pub(super) fn push(&mut self, e: &ccctl_event, kinds: &mut ColumnKinds) -> Result<()> {
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
        self.has_bbr.push(registry::fills(e.algo, EventGroup::Bbr));
        self.has_modest
            .push(registry::fills(e.algo, EventGroup::Modest));
        self.has_theta
            .push(registry::fills(e.algo, EventGroup::Patched));
        self.has_dstar
            .push(registry::fills(e.algo, EventGroup::Dstar));
        Ok(())
    }

    /// The row group as a frame (the vectors move into polars, no copy).
    pub(super) fn into_frame(self, kinds: &ColumnKinds) -> Result<DataFrame> {
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
