//! `ccctl status` and `ccctl list`: what is loaded, read from the pins.
use std::{
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;

use crate::{
    error::Result,
    kernel::{self, Kernel},
    pins::{c_to_name, check_pin_tree, pin_dir, read_meta},
    registry::ALGORITHMS,
};

/// What `ccctl status` shows.
#[derive(Debug, Serialize)]
pub struct Status {
    pub kernel_release: String,
    /// ABI ccctl uses on this kernel.
    pub kernel_abi: String,
    pub default_congestion_control: String,
    pub loaded: Vec<LoadedStatus>,
}

#[derive(Debug, Serialize)]
pub struct LoadedStatus {
    pub name: &'static str,
    pub kernel_name: &'static str,
    /// Still registered in the kernel (false means stale pins).
    pub registered: bool,
    pub loaded_at_unix_s: u64,
    pub loaded_for_s: u64,
    /// ABI chosen when it was loaded.
    pub abi: String,
    pub is_default: bool,
    /// What `unload` will restore, if `load --default` changed the default.
    pub restores_default: Option<String>,
    pub pin_dir: PathBuf,
}

pub fn status() -> Result<Status> {
    check_pin_tree()?;
    let kernel = Kernel::probe()?;
    let default = kernel::default_congestion_control()?;
    let mut loaded = Vec::new();
    for algo in ALGORITHMS {
        let dir = pin_dir(algo);
        if !dir.exists() {
            continue;
        }
        let meta = read_meta(&dir).unwrap_or_default();
        let loaded_at_unix_s = meta.loaded_at_unix_ns / 1_000_000_000;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        loaded.push(LoadedStatus {
            name: algo.name,
            kernel_name: algo.kernel_name,
            registered: kernel::is_registered(algo.kernel_name)?,
            loaded_at_unix_s,
            loaded_for_s: now.saturating_sub(loaded_at_unix_s),
            abi: kernel::describe_abi(meta.abi),
            is_default: default == algo.kernel_name,
            restores_default: (meta.set_default != 0).then(|| c_to_name(&meta.prev_default_cc)),
            pin_dir: dir,
        });
    }
    Ok(Status {
        kernel_release: kernel.release.clone(),
        kernel_abi: kernel::describe_abi(kernel.abi()),
        default_congestion_control: default,
        loaded,
    })
}

#[derive(Debug, Serialize)]
pub struct ListEntry {
    pub name: &'static str,
    pub kernel_name: &'static str,
    pub loaded: bool,
    pub summary: &'static str,
}

pub fn list() -> Result<Vec<ListEntry>> {
    let available = kernel::available_congestion_controls()?;
    Ok(ALGORITHMS
        .iter()
        .map(|a| ListEntry {
            name: a.name,
            kernel_name: a.kernel_name,
            loaded: available.iter().any(|n| n == a.kernel_name) && pin_dir(a).exists(),
            summary: a.summary,
        })
        .collect())
}
