//! The pin tree, the whole state of what is loaded.
//!
//! A loaded algorithm is a directory of pins, `<bpffs>/ccctl/<name>/`:
//!   `link`  the struct_ops link (6.4+), whose existence keeps it registered;
//!   `ops`   the struct_ops map instead, on kernels without links (< 6.4),
//!           where registration outlives every fd until the entry is deleted;
//!   `meta`  bookkeeping (`struct ccctl_meta`): when, how, and the default
//!           congestion control to restore on unload;
//!   `params` the tunable parameters (`struct ccctl_params`);
//!   `heartbeat` patched_bbr's timer map;
//!   `<program>` the link of each tracing program the object carries
//!           (patched_bbr's transmit tracer), so it stays attached exactly
//!           as long as the registration.
//! Those pins are the whole state: `status` and `unload` read nothing else.
//!
//! Beside them, `<bpffs>/ccctl/shared/` holds the maps every algorithm
//! object shares (libbpf pins them by name and reuses them on the next
//! load): the per-ACK trace ring buffer `trace_events`, its configuration
//! `trace_cfg`, the per-CPU drop counters `trace_drops`, the flow-id counter
//! `trace_state` and the per-socket `trace_sk`. They go when the last
//! algorithm is unloaded.
use std::{
    fs,
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
};

use crate::{
    abi::{self, PinnedMap},
    error::{io, Error, Result},
    kernel,
    registry::{Algorithm, ALGORITHMS},
};

pub(crate) const MAP_OPS: &str = "ops";
pub(crate) const MAP_META: &str = "meta";
pub(crate) const PIN_LINK: &str = "link";
pub const MAP_PARAMS: &str = "params";
/// patched_bbr's heartbeat timer: pinned so the timer outlives this process
/// (a map's timers are cancelled when its last user reference goes).
pub(crate) const MAP_HEARTBEAT: &str = "heartbeat";

/// `<bpffs>/ccctl/shared`, the maps all algorithms share.
pub fn shared_dir() -> PathBuf {
    pin_root().join("shared")
}

/// Removes the shared maps' pins once no algorithm is loaded any more.
pub(crate) fn remove_shared_if_unused() {
    let any_loaded = ALGORITHMS.iter().any(|a| pin_dir(a).exists()) || !derived_dirs().is_empty();
    if !any_loaded {
        let _ = fs::remove_dir_all(shared_dir());
        let _ = fs::remove_dir(pin_root());
    }
}

/// A rollout policy rule's parameter set runs on a *derived registration*
/// of an algorithm (`crate::policy::kernel`): pinned as `<algo>@p<N>`
/// (bpffs refuses dots in names), registered as `<kernel name>_p<N>`.
pub fn derived_names(base: &Algorithm, n: u32) -> (String, String) {
    (
        format!("{}@p{n}", base.name),
        format!("{}_p{n}", base.kernel_name),
    )
}

/// The derived registrations' pin directories now: (base, N).
pub fn derived_dirs() -> Vec<(&'static Algorithm, u32)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(pin_root()) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        for base in ALGORITHMS {
            if let Some(n) = name
                .strip_prefix(base.name)
                .and_then(|r| r.strip_prefix("@p"))
                .and_then(|n| n.parse::<u32>().ok())
            {
                out.push((base, n));
            }
        }
    }
    out.sort_by_key(|(b, n)| (b.name, *n));
    out
}

/// A hot upgrade's staged pins beside the old ones (`crate::upgrade`).
pub(crate) const PIN_OPS_NEW: &str = "ops_new";
pub(crate) const PIN_META_NEW: &str = "meta_new";
pub(crate) const PIN_PARAMS_NEW: &str = "params_new";

pub(crate) fn remove_swap_pins(dir: &Path) {
    for p in [PIN_OPS_NEW, PIN_META_NEW, PIN_PARAMS_NEW] {
        let _ = fs::remove_file(dir.join(p));
    }
}

/// A hot upgrade's last step (`crate::upgrade`): the new maps take the old names.
pub(crate) fn finish_swap(dir: &Path) -> Result<()> {
    for (from, to) in [(PIN_META_NEW, "meta"), (PIN_PARAMS_NEW, "params")] {
        let (a, b) = (dir.join(from), dir.join(to));
        if a.exists() {
            fs::rename(&a, &b).map_err(io(format!(
                "renaming {} to {}",
                a.display(),
                b.display()
            )))?;
        }
    }
    let _ = fs::remove_file(dir.join(PIN_OPS_NEW));
    Ok(())
}

/// `<bpffs>/ccctl`, the root of all our pins.
pub fn pin_root() -> PathBuf {
    kernel::bpffs_root().join("ccctl")
}

/// Our pin tree is root's alone. Its directories are made 0700, and nothing
/// in it may be a symbolic link (bpffs has them): one planted at
/// `<bpffs>/ccctl/...` would make ccctl pin into, read, tune or unpin objects
/// that are not ours. Checked by every command that uses the pins; the
/// bpffs root itself is the administrator's.
///
/// Reading the pins needs the privileges loading does: without them this
/// is the one place that says which are missing ([`kernel::check_privileges`]),
/// for every command that reads pins (status, tune, trace, unload).
pub fn check_pin_tree() -> Result<()> {
    kernel::check_privileges()?;
    let mut todo = vec![(pin_root(), 0)];
    while let Some((path, depth)) = todo.pop() {
        let md = match fs::symlink_metadata(&path) {
            Ok(md) => md,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(format!("inspecting {}", path.display()))(e)),
        };
        if md.file_type().is_symlink() {
            return Err(Error::PlantedSymlink { path });
        }
        // <root>/ccctl/<algorithm or shared>/<pin>: three levels.
        if md.is_dir() && depth < 2 {
            let entries = fs::read_dir(&path).map_err(io(format!("reading {}", path.display())))?;
            for e in entries {
                let e = e.map_err(io(format!("reading {}", path.display())))?;
                todo.push((e.path(), depth + 1));
            }
        }
    }
    Ok(())
}

/// Creates `dir` and the pin root above it 0700 (also when an older ccctl
/// made them 0755), refusing planted links.
pub(crate) fn create_pin_dir(dir: &Path) -> Result<()> {
    check_pin_tree()?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(format!("creating {}", dir.display())))?;
    for d in [pin_root().as_path(), dir] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o700))
            .map_err(io(format!("setting mode 0700 on {}", d.display())))?;
    }
    check_pin_tree()
}

pub fn pin_dir(algo: &Algorithm) -> PathBuf {
    pin_root().join(algo.name)
}

/// Is there a registration pin (`link` or `ops`) in `dir`?
pub(crate) fn has_registration_pin(dir: &Path) -> bool {
    dir.join(PIN_LINK).exists() || dir.join(MAP_OPS).exists()
}

/// Remove a pin directory, and the ccctl root if it is then empty.
pub(crate) fn remove_pins(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    remove_shared_if_unused();
    if let Some(root) = dir.parent() {
        let _ = fs::remove_dir(root); // only succeeds when empty
    }
    Ok(())
}

pub(crate) fn read_meta(dir: &Path) -> Result<abi::ccctl_meta> {
    Ok(PinnedMap::<abi::ccctl_meta>::open(&dir.join(MAP_META))?.get()?)
}

/// The parameters in force for the algorithm pinned at `dir`.
/// Read under the entry's spin lock, so it is one whole set.
pub fn read_params(dir: &Path) -> Result<abi::ccctl_params> {
    Ok(
        PinnedMap::<abi::ccctl_params_entry>::open(&dir.join(MAP_PARAMS))?
            .get_locked()?
            .p,
    )
}

/// Replaces the whole parameter set at once: one map update with
/// `BPF_F_LOCK`, so the kernel copies it under the spin lock the BPF side
/// copies it out under (`ccctl_params_read`), and a flow sees the old set or
/// the new one, never a mix. The caller bumps `version`.
pub fn write_params(dir: &Path, p: &abi::ccctl_params) -> Result<()> {
    Ok(
        PinnedMap::<abi::ccctl_params_entry>::open(&dir.join(MAP_PARAMS))?
            .set_locked(&params_entry(p))?,
    )
}

/// The map's value for a set (the lock word is the kernel's: it never
/// copies it from or to user space).
pub(crate) fn params_entry(p: &abi::ccctl_params) -> abi::ccctl_params_entry {
    abi::ccctl_params_entry {
        p: *p,
        ..Default::default()
    }
}

pub(crate) fn write_meta(dir: &Path, meta: &abi::ccctl_meta) -> Result<()> {
    Ok(PinnedMap::<abi::ccctl_meta>::open(&dir.join(MAP_META))?.set(meta)?)
}

pub(crate) fn name_to_c(name: &str) -> [libc::c_char; abi::CCCTL_CA_NAME_MAX as usize] {
    let mut out = [0 as libc::c_char; abi::CCCTL_CA_NAME_MAX as usize];
    for (dst, src) in out
        .iter_mut()
        .zip(name.bytes().take(abi::CCCTL_CA_NAME_MAX as usize - 1))
    {
        *dst = src as libc::c_char;
    }
    out
}

pub(crate) fn c_to_name(raw: &[libc::c_char]) -> String {
    raw.iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect()
}

// ---- status and list ------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_round_trip_through_c_strings() {
        assert_eq!(c_to_name(&name_to_c("cubic")), "cubic");
        let long = "a_name_longer_than_sixteen";
        assert_eq!(c_to_name(&name_to_c(long)).len(), 15);
    }
}
