//! The load verbs: load, unload, unload everything, and the repair of what
//! a killed ccctl left (under `/run/ccctl/loader.lock`). The pins are
//! [`crate::pins`], the registration itself [`crate::register`].
use std::path::{Path, PathBuf};

use crate::{
    abi,
    error::{io, Error, Result},
    kernel::{self, Kernel},
    params,
    pins::{
        c_to_name, check_pin_tree, has_registration_pin, name_to_c, pin_dir, pin_root, read_meta,
        remove_pins, remove_shared_if_unused, write_meta, MAP_META, MAP_PARAMS,
    },
    register::{self, unregister, wait_unregistered, LoadPlan},
    registry::{Algorithm, ALGORITHMS},
};

/// Pin directories older ccctl versions named by a former user name:
/// `bbr` was ours before it meant the kernel's BBR everywhere.
static RENAMED: &[(&str, &Algorithm)] = &[("bbr", &ALGORITHMS[0])];

#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    /// Also make it the system default (`net.ipv4.tcp_congestion_control`).
    pub set_default: bool,
    /// `CCCTL_FAULT_*` bits (tests only).
    pub fault_inject: u32,
    /// Initial parameter set, already validated (`params::initial`); `None`:
    /// the defaults. Refused with `AlreadyLoaded` if the algorithm is loaded,
    /// rather than silently ignored: `ccctl tune` changes a loaded one.
    pub params: Option<abi::ccctl_params>,
    /// Load the algorithm from this BPF object file instead of the object
    /// built into ccctl (`ccctl load NAME --object FILE`): a researcher's own
    /// build, or a test's deliberately wrong one. Checked to hold the
    /// algorithm's registration ([`crate::object_file`]); registered, pinned
    /// and configured exactly as the built-in one. Refused with
    /// `ObjectWhileLoaded` if the algorithm is loaded.
    pub object: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadOutcome {
    Loaded {
        abi: u32,
        previous_default: Option<String>,
    },
    AlreadyLoaded {
        made_default: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnloadOutcome {
    Unloaded { restored_default: Option<String> },
    NotLoaded,
}

/// Register `algo` with the kernel and pin it so it outlives this process.
pub fn load(algo: &Algorithm, opts: &LoadOptions) -> Result<LoadOutcome> {
    let kernel = preflight()?;
    let dir = pin_dir(algo);
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = loader_lock()?;

    if kernel::is_registered(algo.kernel_name)? {
        if !has_registration_pin(&dir) {
            return Err(Error::ForeignRegistration {
                kernel_name: algo.kernel_name.into(),
                pin_dir: dir,
            });
        }
        if opts.params.is_some() {
            return Err(Error::AlreadyLoaded {
                algo: algo.name.into(),
            });
        }
        if let Some(path) = &opts.object {
            return Err(Error::ObjectWhileLoaded {
                algo: algo.name.into(),
                path: path.clone(),
            });
        }
        let mut made_default = false;
        if opts.set_default && kernel::default_congestion_control()? != algo.kernel_name {
            // Recorded before the switch: killed in between, unload still
            // knows what to restore (and restores nothing if nothing changed).
            let mut meta = read_meta(&dir)?;
            let previous = kernel::default_congestion_control()?;
            meta.set_default = 1;
            meta.prev_default_cc = name_to_c(&previous);
            write_meta(&dir, &meta)?;
            kernel::set_default_congestion_control(algo.kernel_name)?;
            made_default = true;
        }
        return Ok(LoadOutcome::AlreadyLoaded { made_default });
    }
    // Pins without a registration: left by a crash or a reboot of bpffs' view. Start clean.
    if dir.exists() {
        tracing::warn!("removing stale pins in {}", dir.display());
        remove_pins(&dir)?;
    }

    let plan = LoadPlan {
        algo,
        kernel: &kernel,
        pin_dir: dir.clone(),
        fault_inject: opts.fault_inject,
        params: opts.params.unwrap_or_else(params::defaults),
        replace: false,
    };
    let attached = match &opts.object {
        Some(path) => crate::object_file::register(path, &plan)?,
        None => register::register(&plan)?,
    };

    let mut previous_default = None;
    if opts.set_default {
        let result = (|| {
            let previous = kernel::default_congestion_control()?;
            let mut meta = read_meta(&dir)?;
            meta.set_default = 1;
            meta.prev_default_cc = name_to_c(&previous);
            write_meta(&dir, &meta)?;
            kernel::set_default_congestion_control(algo.kernel_name)?;
            Ok(previous)
        })();
        match result {
            Ok(prev) => previous_default = Some(prev),
            Err(e) => {
                // Leave nothing half-done: take the registration back out.
                let _ = unregister(&dir);
                return Err(e);
            }
        }
    }
    Ok(LoadOutcome::Loaded {
        abi: attached.abi,
        previous_default,
    })
}

/// Unregister `algo` and remove its pins, restoring the default congestion
/// control if `load --default` changed it. Safe while flows use it: sockets
/// keep a reference to the ops they started with and finish on it.
pub fn unload(algo: &Algorithm) -> Result<UnloadOutcome> {
    kernel::check_privileges()?;
    check_pin_tree()?;
    let dir = pin_dir(algo);
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = loader_lock()?;

    if !dir.exists() {
        if kernel::is_registered(algo.kernel_name)? {
            return Err(Error::ForeignRegistration {
                kernel_name: algo.kernel_name.into(),
                pin_dir: dir,
            });
        }
        return Ok(UnloadOutcome::NotLoaded);
    }

    let mut restored_default = None;
    if let Ok(meta) = read_meta(&dir) {
        if meta.set_default != 0 && kernel::default_congestion_control()? == algo.kernel_name {
            let mut previous = c_to_name(&meta.prev_default_cc);
            if previous.is_empty() || !kernel::is_registered(&previous)? {
                previous = "cubic".into();
            }
            kernel::set_default_congestion_control(&previous)?;
            restored_default = Some(previous);
        }
    }
    // The default may also have been pointed at us by hand; never leave it dangling.
    if restored_default.is_none() && kernel::default_congestion_control()? == algo.kernel_name {
        kernel::set_default_congestion_control("cubic")?;
        restored_default = Some("cubic".into());
    }

    unregister(&dir)?;
    wait_unregistered(algo.kernel_name)?;
    Ok(UnloadOutcome::Unloaded { restored_default })
}

/// Unload every algorithm that has pins.
pub fn unload_all() -> Result<Vec<(&'static str, UnloadOutcome)>> {
    let mut out = Vec::new();
    for algo in ALGORITHMS {
        if pin_dir(algo).exists() {
            out.push((algo.name, unload(algo)?));
        }
    }
    Ok(out)
}

/// Serializes loads, unloads and [`repair`] across processes, so that a
/// repair never mistakes a load in progress for a crashed one. Held for the
/// length of one load or unload; released by the kernel if we die.
const LOADER_LOCK: &str = "/run/ccctl/loader.lock";

pub(crate) fn loader_lock() -> Result<ccctl_sys::lock::PidLock> {
    ccctl_sys::lock::PidLock::acquire(Path::new(LOADER_LOCK), ccctl_sys::lock::Wait::Yes).map_err(
        |e| Error::Io {
            what: format!("locking {LOADER_LOCK}"),
            source: std::io::Error::other(e.to_string()),
        },
    )
}

/// One thing [`repair`] found and fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub algo: &'static str,
    pub what: String,
}

/// Brings the pins and the kernel back to a consistent state after a ccctl
/// that was killed (SIGKILL, power loss) midway: afterwards, every algorithm
/// that has pins is registered and usable through them, and every one that
/// is not has no pins. Run by every command that touches algorithms, before
/// it does anything else; returns what it fixed, for the user to see.
///
/// - Pins without a registration (killed during load before registering,
///   or during unload after unregistering): removed.
/// - A registration whose pins are incomplete (no meta or params map):
///   unregistered through its pin and removed; it was never usable.
/// - A registration of one of our kernel names without any pins is left
///   alone and reported by `load`: ccctl's load order cannot leave one
///   (everything is pinned before registering), so it is not ours.
pub fn repair() -> Result<Vec<Repair>> {
    let root = pin_root();
    if !root.exists() {
        return Ok(Vec::new());
    }
    check_pin_tree()?;
    let _lock = loader_lock()?;
    let mut fixed = Vec::new();
    // Pins an older ccctl made under an algorithm's former user name move
    // to its name now, so that it stays visible, tunable and unloadable.
    for &(old, algo) in RENAMED {
        let (from, to) = (root.join(old), pin_dir(algo));
        if from.is_dir() && !to.exists() {
            std::fs::rename(&from, &to).map_err(io(format!(
                "moving {} to {}",
                from.display(),
                to.display()
            )))?;
            fixed.push(Repair {
                algo: algo.name,
                what: format!(
                    "moved the pins of {} from {} to {} (its user name is now {}; `{old}` is the kernel's)",
                    algo.kernel_name,
                    from.display(),
                    to.display(),
                    algo.name
                ),
            });
        }
    }
    for algo in ALGORITHMS {
        let dir = pin_dir(algo);
        if !dir.exists() {
            continue;
        }
        let registered = kernel::is_registered(algo.kernel_name)?;
        let complete = has_registration_pin(&dir)
            && dir.join(MAP_META).exists()
            && dir.join(MAP_PARAMS).exists();
        if !registered {
            remove_pins(&dir)?;
            fixed.push(Repair {
                algo: algo.name,
                what: format!(
                    "removed the pins of {} in {}: not registered with the kernel (a ccctl killed during load or unload)",
                    algo.name,
                    dir.display()
                ),
            });
        } else if !complete && has_registration_pin(&dir) {
            unregister(&dir)?;
            wait_unregistered(algo.kernel_name)?;
            fixed.push(Repair {
                algo: algo.name,
                what: format!(
                    "unloaded {}: its pins in {} were incomplete (a ccctl killed during load)",
                    algo.name,
                    dir.display()
                ),
            });
        }
    }
    remove_shared_if_unused();
    Ok(fixed)
}

/// Checks every load makes before touching anything.
fn preflight() -> Result<Kernel> {
    kernel::check_privileges()?;
    let kernel = Kernel::probe()?;
    kernel::ensure_bpffs(&kernel::bpffs_root())?;
    check_pin_tree()?;
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::RENAMED;

    #[test]
    fn the_old_name_bbr_moves_to_bpf_bbr() {
        assert_eq!(RENAMED.len(), 1);
        assert_eq!(RENAMED[0].0, "bbr");
        assert_eq!(RENAMED[0].1.kernel_name, "bpf_bbr");
        assert_eq!(RENAMED[0].1.name, "bpf-bbr");
    }
}
