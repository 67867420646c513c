//! Which congestion controls a scenario names, and making them available for
//! the run: kernel ones (loading their module if needed) and ours (loaded
//! for the run and unloaded after, unless the user had loaded them).
//!
//! Names: anything `iperf3 -C` takes (`cubic`, `reno`, `bbr`, …; `bbr` is
//! always the kernel's), plus ours by kernel name (`bpf_bbr`) or by user name
//! where that is not also a kernel name (`modest-bbr`).
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use crate::scenario::Scenario;
use ccctl_core::kernel::{self, Kernel};
use ccctl_core::loader::{self, LoadOptions, LoadOutcome};
use ccctl_core::registry::{self, Algorithm};

use super::LabError;

/// Kernel congestion controls that exist as modules or built-ins on common
/// kernels (`bbr` is the kernel's BBR; ours is `bpf-bbr` / `bpf_bbr`).
const KERNEL_NAMES: &[&str] = &[
    "reno",
    "cubic",
    "bbr",
    "bic",
    "htcp",
    "vegas",
    "westwood",
    "illinois",
    "hybla",
    "highspeed",
    "scalable",
    "veno",
    "yeah",
    "lp",
    "nv",
    "dctcp",
    "cdg",
];

pub enum Source {
    Kernel,
    Ours(&'static Algorithm),
}

/// Resolves `name` to what provides it.
pub fn resolve(name: &str) -> Source {
    if let Some(a) = registry::ALGORITHMS.iter().find(|a| a.kernel_name == name) {
        return Source::Ours(a);
    }
    if !KERNEL_NAMES.contains(&name) {
        if let Some(a) = registry::ALGORITHMS.iter().find(|a| a.name == name) {
            return Source::Ours(a);
        }
    }
    Source::Kernel
}

/// Tries `modprobe tcp_<name>` for a kernel congestion control not yet
/// registered; true when it is registered afterwards.
fn kernel_cc_available(name: &str) -> bool {
    if kernel::is_registered(name).unwrap_or(false) {
        return true;
    }
    let _ = Command::new("modprobe")
        .args(["-q", &format!("tcp_{name}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    kernel::is_registered(name).unwrap_or(false)
}

/// Checks every name of the scenario against this kernel and this binary,
/// before anything is created; returns scenario name -> `iperf3 -C` name.
/// The kernel's congestion controls the scenario names that this kernel
/// cannot provide (neither built in nor a module here): a run with them
/// needs a kernel that has them (the VM's).
pub fn missing_here(sc: &Scenario) -> Vec<String> {
    sc.algorithms()
        .into_iter()
        .filter(|name| matches!(resolve(name), Source::Kernel) && !kernel_cc_available(name))
        .filter(|name| KERNEL_NAMES.contains(&name.as_str()))
        .collect()
}

pub fn check(sc: &Scenario) -> Result<BTreeMap<String, String>, LabError> {
    let mut known: Vec<String> = kernel::available_congestion_controls().unwrap_or_default();
    let mut map = BTreeMap::new();
    let mut ours_needed = false;
    for name in sc.algorithms() {
        match resolve(&name) {
            Source::Ours(a) => {
                ours_needed = true;
                map.insert(name, a.kernel_name.to_string());
            }
            Source::Kernel => {
                if kernel_cc_available(&name) {
                    map.insert(name.clone(), name);
                }
            }
        }
    }
    map.insert(
        super::plan::CALIBRATION_CC.into(),
        super::plan::CALIBRATION_CC.into(),
    );
    for a in registry::ALGORITHMS {
        known.push(a.kernel_name.into());
        if !KERNEL_NAMES.contains(&a.name) {
            known.push(a.name.into());
        }
    }
    known.sort();
    known.dedup();
    let mut known_now: Vec<String> = known.into_iter().chain(map.keys().cloned()).collect();
    known_now.sort();
    known_now.dedup();
    sc.check_algorithms(&known_now)
        .map_err(LabError::Scenario)?;
    if ours_needed {
        // Our algorithms need struct_ops, BTF and bpffs: fail now, not mid-run.
        Kernel::probe().map_err(LabError::Load)?;
        kernel::ensure_bpffs(&kernel::bpffs_root()).map_err(LabError::Load)?;
    }
    Ok(map)
}

/// Before booting the VM: every name must at least be one the VM kernel
/// could have (ours, a kernel congestion control, or one the host has).
pub fn precheck(sc: &Scenario) -> Result<(), LabError> {
    let mut known: Vec<String> = kernel::available_congestion_controls().unwrap_or_default();
    known.extend(KERNEL_NAMES.iter().map(|s| s.to_string()));
    for a in registry::ALGORITHMS {
        known.push(a.kernel_name.into());
        known.push(a.name.into());
    }
    known.sort();
    known.dedup();
    sc.check_algorithms(&known).map_err(LabError::Scenario)
}

/// Where the lab notes which algorithms it loaded (`<name>.<pid>`), so a
/// lab killed with SIGKILL has them unloaded by the next lab run.
const MARKER_DIR: &str = "/run/ccctl/lab-loaded";

fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Unloads what dead lab processes had loaded for their runs; returns what
/// it did, one line each.
pub fn reap_stale() -> Vec<String> {
    let mut done = Vec::new();
    let Ok(rd) = std::fs::read_dir(MARKER_DIR) else {
        return done;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((algo, pid)) = name.rsplit_once('.') else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        if let Ok(a) = registry::find(algo) {
            match loader::unload(a) {
                Ok(_) => done.push(format!(
                    "unloaded {algo}, which a lab run (pid {pid}) that is gone had loaded"
                )),
                Err(err) => {
                    tracing::warn!(algo, error = %err, "could not unload after a crashed lab run")
                }
            }
        }
        let _ = std::fs::remove_file(e.path());
    }
    done
}

fn marker(a: &Algorithm) -> std::path::PathBuf {
    std::path::Path::new(MARKER_DIR).join(format!("{}.{}", a.name, std::process::id()))
}

/// Our algorithms loaded for this lab run; unloaded on drop.
#[derive(Default)]
pub struct Loaded {
    names: Vec<&'static Algorithm>,
}

impl Loaded {
    /// Loads every one of ours the scenario names that is not loaded yet
    /// (after unloading what crashed lab runs left behind).
    pub fn ensure(sc: &Scenario) -> Result<Loaded, LabError> {
        for what in reap_stale() {
            tracing::info!("{what}");
        }
        let mut loaded = Loaded::default();
        for name in sc.algorithms() {
            if let Source::Ours(a) = resolve(&name) {
                if loaded.names.iter().any(|l| l.kernel_name == a.kernel_name) {
                    continue;
                }
                match loader::load(a, &LoadOptions::default()).map_err(LabError::Load)? {
                    LoadOutcome::Loaded { .. } => {
                        tracing::info!(algo = a.name, "loaded for this lab run");
                        let _ = std::fs::create_dir_all(MARKER_DIR);
                        if let Err(e) = std::fs::write(marker(a), b"") {
                            tracing::warn!(error = %e, "cannot record the load in {MARKER_DIR}");
                        }
                        loaded.names.push(a);
                    }
                    LoadOutcome::AlreadyLoaded { .. } => {
                        tracing::info!(algo = a.name, "already loaded by the user; left loaded")
                    }
                }
            }
        }
        Ok(loaded)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.names.iter().map(|a| a.name).collect()
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        for a in self.names.drain(..) {
            match loader::unload(a) {
                Ok(_) => {
                    let _ = std::fs::remove_file(marker(a));
                }
                Err(e) => {
                    tracing::warn!(algo = a.name, error = %e, "could not unload after the lab run")
                }
            }
        }
    }
}
