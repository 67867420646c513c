//! Hot upgrade: `ccctl load NAME --replace` swaps a loaded algorithm for a
//! freshly loaded object under the same kernel name, through the struct_ops
//! link's update (`BPF_LINK_UPDATE`, Linux 6.4+). The kernel adds the new
//! ops to its list before it removes the old ones
//! (`tcp_update_congestion_control`), so no connection ever finds the name
//! unregistered; running connections keep the ops they started with until
//! they close, new ones get the new object.
//!
//! The object is the embedded one today. The load path takes it from the
//! algorithm's `register` function, so an object given on the command line
//! (`ccctl load NAME --object FILE.bpf.o`, another branch) combines with
//! `--replace` by handing its own register function to [`replace`].
//!
//! Order, for a ccctl killed at any point:
//! 1. the new object is loaded, its `params` filled with the set in force
//!    and its `meta` with the old bookkeeping (when, `--default`'s restore);
//! 2. its `meta`, `params` and struct_ops map are pinned beside the old
//!    ones as `meta_new`, `params_new`, `ops_new` (bpffs refuses dots);
//! 3. the map's value is prepared (libbpf's `bpf_map__attach_struct_ops`
//!    writes it, then fails to register the taken name with EEXIST,
//!    changing nothing else) and the pinned link updated to it;
//! 4. `meta_new` and `params_new` are renamed over `meta` and `params`
//!    (one rename each: `tune` and `status` see the old or the new map),
//!    `ops_new` removed.
//!
//! [`repair`] finishes or undoes a swap a kill interrupted: if the link
//! already runs `ops_new`'s map, step 4 is completed; otherwise the `_new`
//! pins are removed and the old object stays, untouched.
//!
//! Why not libbpf's `bpf_link__update_map`: libbpf-rs 0.27 has no
//! `Link::update_map`, and libbpf's function needs the link object libbpf
//! made when it attached, which a link reopened from its pin is not.
//!
//! Before 6.4 there is no struct_ops link: the registration is the map
//! itself and cannot be swapped under its name; [`replace`] refuses with
//! `Error::NoHotUpgrade` and changes nothing (unload and load again: new
//! connections in between get the default).
use std::fs;
use std::path::Path;

use libbpf_rs::query::LinkTypeInfo;
use libbpf_rs::{Link, MapCore, MapHandle};

use crate::error::{bpf, Error, Result};
use crate::kernel;
use crate::register::{self, LoadPlan};
use crate::registry::Algorithm;
use crate::{loader, pins};

use crate::pins::{
    finish_swap as finish, remove_swap_pins as remove_new_pins, PIN_META_NEW, PIN_OPS_NEW,
    PIN_PARAMS_NEW,
};

/// What a replace did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    /// The link's struct_ops map id before and after.
    pub old_map_id: u32,
    pub new_map_id: u32,
}

/// The struct_ops map id the pinned link at `dir/link` runs.
pub fn link_map_id(dir: &Path) -> Result<u32> {
    let p = dir.join("link");
    let link = Link::open(&p).map_err(bpf(format!("opening {}", p.display())))?;
    let info = link
        .info()
        .map_err(bpf(format!("reading the link info of {}", p.display())))?;
    match info.info {
        LinkTypeInfo::StructOps(s) => Ok(s.map_id),
        _ => Err(Error::Io {
            what: format!("{} is not a struct_ops link", p.display()),
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        }),
    }
}

/// Whether a BPF map with this id exists (an object still alive).
pub fn map_exists(id: u32) -> bool {
    MapHandle::from_map_id(id).is_ok()
}

/// Swap `algo`'s registration for a new load of its object.
pub fn replace(algo: &Algorithm, fault_inject: u32) -> Result<Replaced> {
    kernel::check_privileges()?;
    let k = kernel::Kernel::probe()?;
    if !k.struct_ops_link {
        return Err(Error::NoHotUpgrade {
            algo: algo.name.into(),
            release: k.release.clone(),
        });
    }
    pins::check_pin_tree()?;
    let dir = pins::pin_dir(algo);
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = loader::loader_lock()?;
    repair_dir(&dir)?;
    if !kernel::is_registered(algo.kernel_name)? || !dir.join("link").exists() {
        return Err(Error::NotLoaded {
            algo: algo.name.into(),
        });
    }
    let old_map_id = link_map_id(&dir)?;
    let plan = LoadPlan {
        algo,
        kernel: &k,
        pin_dir: dir.clone(),
        fault_inject,
        params: pins::read_params(&dir)?,
        replace: true,
    };
    register::register(&plan)?;
    Ok(Replaced {
        old_map_id,
        new_map_id: link_map_id(&dir)?,
    })
}

/// Finish or undo a swap a killed ccctl left in `dir` (see the module docs).
fn repair_dir(dir: &Path) -> Result<Option<String>> {
    let ops_new = dir.join(PIN_OPS_NEW);
    if !ops_new.exists() && !dir.join(PIN_PARAMS_NEW).exists() && !dir.join(PIN_META_NEW).exists() {
        return Ok(None);
    }
    let new_id = MapHandle::from_pinned_path(&ops_new)
        .ok()
        .and_then(|m| m.info().ok())
        .map(|i| i.info.id);
    let running = link_map_id(dir).ok();
    if new_id.is_some() && new_id == running {
        finish(dir)?;
        Ok(Some(format!(
            "finished a hot upgrade in {} (the link already ran the new object)",
            dir.display()
        )))
    } else {
        remove_new_pins(dir);
        Ok(Some(format!(
            "undid a hot upgrade in {} that never reached the link (the old object stays)",
            dir.display()
        )))
    }
}

/// [`repair_dir`] for every algorithm directory; what was fixed.
pub fn repair() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(pins::pin_root()) else {
        return out;
    };
    let dirs: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(PIN_OPS_NEW).exists() || p.join(PIN_PARAMS_NEW).exists())
        .collect();
    if dirs.is_empty() {
        return out;
    }
    let Ok(_lock) = loader::loader_lock() else {
        return out;
    };
    for d in dirs {
        match repair_dir(&d) {
            Ok(Some(s)) => out.push(s),
            Ok(None) => {}
            Err(e) => tracing::debug!("repairing {}: {e}", d.display()),
        }
    }
    out
}
