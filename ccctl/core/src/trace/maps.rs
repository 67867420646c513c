//! The tracing maps every ccctl algorithm shares, pinned under
//! `<bpffs>/ccctl/shared/` while at least one algorithm is loaded.
use std::{
    io::ErrorKind,
    mem::size_of,
    path::{Path, PathBuf},
};

use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use super::TraceError;
use crate::abi::{self, PinnedMap};

/// `<bpffs>/ccctl/shared`, where the loader pins them.
pub fn shared_dir() -> PathBuf {
    crate::pins::shared_dir()
}

pub const EVENTS: &str = "trace_events";
pub const CFG: &str = "trace_cfg";
pub const DROPS: &str = "trace_drops";
pub const PRODUCED: &str = "trace_produced";

/// Handles on the pinned tracing maps.
#[derive(Debug)]
pub struct SharedMaps {
    /// Ring buffer of `struct ccctl_event`.
    pub events: MapHandle,
    /// One `struct ccctl_trace_cfg`.
    pub cfg: PinnedMap<abi::ccctl_trace_cfg>,
    /// Per-CPU u64: failed reservations, never reset.
    pub drops: MapHandle,
    /// Per-CPU u64: reservations attempted (events that passed the filters
    /// and the sampling), never reset.
    pub produced: MapHandle,
    dir: PathBuf,
}

impl SharedMaps {
    /// Open the maps under [`shared_dir`].
    pub fn open() -> Result<SharedMaps, TraceError> {
        crate::pins::check_pin_tree()?;
        Self::open_in(&shared_dir())
    }

    /// Open the maps under `dir`, checking they are what this binary expects.
    pub fn open_in(dir: &Path) -> Result<SharedMaps, TraceError> {
        let events = open_pinned(dir, EVENTS)?;
        // Opened as a handle first, for open_pinned's errors (not loaded,
        // not permitted), then as the typed map.
        open_pinned(dir, CFG)?;
        let cfg = PinnedMap::<abi::ccctl_trace_cfg>::open(&dir.join(CFG)).map_err(map_err)?;
        let drops = open_pinned(dir, DROPS)?;
        let produced = open_pinned(dir, PRODUCED)?;
        let mismatch = |name: &str, detail: String| TraceError::AbiMismatch {
            path: dir.join(name),
            detail,
        };
        if events.map_type() != MapType::RingBuf {
            return Err(mismatch(
                EVENTS,
                format!("a {:?} map, not a ring buffer", events.map_type()),
            ));
        }
        if !cfg.value_size_matches() {
            return Err(mismatch(
                CFG,
                format!(
                    "values of {} bytes, struct ccctl_trace_cfg has {}",
                    cfg.handle().value_size(),
                    size_of::<abi::ccctl_trace_cfg>()
                ),
            ));
        }
        if drops.map_type() != MapType::PercpuArray || drops.value_size() != 8 {
            return Err(mismatch(
                DROPS,
                format!(
                    "a {:?} map of {}-byte values, not a per-CPU array of u64",
                    drops.map_type(),
                    drops.value_size()
                ),
            ));
        }
        if produced.map_type() != MapType::PercpuArray || produced.value_size() != 8 {
            return Err(mismatch(
                PRODUCED,
                format!(
                    "a {:?} map of {}-byte values, not a per-CPU array of u64",
                    produced.map_type(),
                    produced.value_size()
                ),
            ));
        }
        Ok(SharedMaps {
            events,
            cfg,
            drops,
            produced,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `trace_cfg` entry.
    pub fn read_cfg(&self) -> Result<abi::ccctl_trace_cfg, TraceError> {
        self.cfg.get().map_err(map_err)
    }

    /// Replace the `trace_cfg` entry (one atomic map update).
    pub fn write_cfg(&self, cfg: &abi::ccctl_trace_cfg) -> Result<(), TraceError> {
        self.cfg.set(cfg).map_err(map_err)
    }

    /// Other maps are pinned under our directory now: every algorithm was
    /// unloaded (unpinning these, which live on while we hold them) and one
    /// was loaded again, pinning new ones. False while these are pinned or
    /// none are (nothing loaded: events may come once something is).
    pub fn replaced(&self) -> bool {
        let id = |m: &MapHandle| m.info().map(|i| i.info.id).ok();
        match MapHandle::from_pinned_path(self.dir.join(CFG)) {
            Ok(pinned) => id(&pinned).is_some_and(|p| Some(p) != id(self.cfg.handle())),
            Err(_) => false,
        }
    }

    /// Events the BPF side failed to reserve, summed over CPUs, since load.
    pub fn drops(&self) -> Result<u64, TraceError> {
        Self::sum_per_cpu(&self.drops).map_err(self.bpf_err(DROPS, "reading"))
    }

    /// Events the BPF side tried to reserve (written or dropped), summed
    /// over CPUs, since load.
    pub fn produced(&self) -> Result<u64, TraceError> {
        Self::sum_per_cpu(&self.produced).map_err(self.bpf_err(PRODUCED, "reading"))
    }

    fn sum_per_cpu(map: &MapHandle) -> Result<u64, libbpf_rs::Error> {
        let per_cpu = map
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .unwrap_or_default();
        Ok(per_cpu
            .iter()
            .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
            .map(u64::from_ne_bytes)
            .fold(0u64, u64::wrapping_add))
    }

    fn bpf_err(&self, name: &str, verb: &str) -> impl FnOnce(libbpf_rs::Error) -> TraceError {
        let what = format!("{verb} {}", self.dir.join(name).display());
        move |source| TraceError::Bpf { what, source }
    }
}

fn map_err(e: abi::MapError) -> TraceError {
    TraceError::Bpf {
        what: format!("{} {}", e.what, e.path.display()),
        source: e.source,
    }
}

fn open_pinned(dir: &Path, name: &str) -> Result<MapHandle, TraceError> {
    let path = dir.join(name);
    match std::fs::metadata(&path) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(TraceError::NotLoaded { path }),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            return Err(TraceError::NotPermitted { path })
        }
        Err(source) => {
            return Err(TraceError::Io {
                what: format!("reading {}", path.display()),
                source,
            })
        }
    }
    MapHandle::from_pinned_path(&path).map_err(|source| {
        if source.kind() == libbpf_rs::ErrorKind::PermissionDenied {
            TraceError::NotPermitted { path }
        } else {
            TraceError::Bpf {
                what: format!("opening {}", path.display()),
                source,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_pins_mean_nothing_is_loaded() {
        let dir = crate::sys::scratch_dir("trace-test").unwrap();
        let err = SharedMaps::open_in(&dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "no ccctl algorithm is loaded (no {}); load one with `ccctl load bpf-bbr`",
                dir.join("trace_events").display()
            )
        );
    }

    #[test]
    fn trace_cfg_has_no_padding() {
        // write_cfg hands the struct's bytes to the kernel as they are.
        // Field sizes add up to the struct's size: no implicit padding.
        let c = abi::ccctl_trace_cfg::default();
        let fields = [
            size_of_val(&c.enabled),
            size_of_val(&c.algo_mask),
            size_of_val(&c.port),
            size_of_val(&c.sport),
            size_of_val(&c.dport),
            size_of_val(&c.sample_every),
            size_of_val(&c.once_per_rtt),
            size_of_val(&c.saddr),
            size_of_val(&c.daddr),
            size_of_val(&c.saddr_prefix),
            size_of_val(&c.daddr_prefix),
            size_of_val(&c.pad0),
            size_of_val(&c.pad1),
            size_of_val(&c.session),
        ];
        assert_eq!(
            fields.iter().sum::<usize>(),
            size_of::<abi::ccctl_trace_cfg>()
        );
        assert_eq!(size_of::<abi::ccctl_trace_cfg>(), 72);
        assert_eq!(std::mem::offset_of!(abi::ccctl_trace_cfg, saddr), 24);
        assert_eq!(std::mem::offset_of!(abi::ccctl_trace_cfg, daddr), 40);
        assert_eq!(std::mem::offset_of!(abi::ccctl_trace_cfg, saddr_prefix), 56);
        assert_eq!(std::mem::offset_of!(abi::ccctl_trace_cfg, session), 64);
    }
}
