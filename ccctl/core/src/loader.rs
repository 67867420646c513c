//! Registering our congestion controls with the kernel and taking them out.
//!
//! A loaded algorithm is a directory of pins, `<bpffs>/ccctl/<name>/`:
//!   `link`  the struct_ops link (6.4+), whose existence keeps it registered;
//!   `ops`   the struct_ops map instead, on kernels without links (< 6.4),
//!           where registration outlives every fd until the entry is deleted;
//!   `meta`  bookkeeping (`struct ccctl_meta`): when, how, and the default
//!           congestion control to restore on unload;
//!   `params` the tunable parameters (`struct ccctl_params`);
//!   `<program>` the link of each tracing program the object carries
//!           (patched_bbr's transmit tracer `patched_bbr_skb_sent`), so it
//!           stays attached exactly as long as the registration.
//! Those pins are the whole state: `status` and `unload` read nothing else.
//!
//! Beside them, `<bpffs>/ccctl/shared/` holds the maps every algorithm
//! object shares (libbpf pins them by name and reuses them on the next
//! load): the per-ACK trace ring buffer `trace_events`, its configuration
//! `trace_cfg`, the per-CPU drop counters `trace_drops`, the flow-id counter
//! `trace_state` and the per-socket `trace_sk`. They go when the last
//! algorithm is unloaded.
use std::{
    ffi::OsStr,
    fs,
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use libbpf_rs::{
    skel::{OpenSkel, Skel},
    Link, MapCore, MapFlags, MapHandle, PrintLevel, ProgramType,
};
use serde::Serialize;

use crate::{
    abi::{self, PinnedMap, Plain},
    algos::{self, Algorithm},
    error::{bpf, io, Error, Result},
    kernel::{self, Kernel},
};

const BPF_F_LINK: u32 = 1 << 13;
const MAP_OPS: &str = "ops";
const MAP_OPS_PRE610: &str = "ops_pre610";
const MAP_META: &str = "meta";
const PIN_LINK: &str = "link";
const MAP_PARAMS: &str = "params";
/// patched_bbr's heartbeat timer: pinned so the timer outlives this process
/// (a map's timers are cancelled when its last user reference goes).
const MAP_HEARTBEAT: &str = "heartbeat";
const MAP_TRACE_EVENTS: &str = "trace_events";
/// Ring-buffer size override for the next first load (bytes, a power of two
/// of at least 4096); tests shrink it to force overflows.
pub const ENV_TRACE_RING_BYTES: &str = "CCCTL_TRACE_RING_BYTES";

/// `<bpffs>/ccctl/shared`, the maps all algorithms share.
pub fn shared_dir() -> PathBuf {
    pin_root().join("shared")
}

/// Default parameters (version 1), as the BPF side assumes for version 0:
/// every `CCCTL_PARAMS` row's default.
pub fn default_params() -> abi::ccctl_params {
    crate::params::defaults()
}

/// Size the trace ring buffer: the pinned one's if it exists (libbpf must
/// find an identical map to reuse it), else the override, else the
/// object's default.
fn ring_bytes_for_load() -> Result<Option<u32>> {
    let pinned = shared_dir().join(MAP_TRACE_EVENTS);
    if pinned.exists() {
        let map = MapHandle::from_pinned_path(&pinned)
            .map_err(bpf(format!("opening {}", pinned.display())))?;
        return Ok(Some(map.max_entries()));
    }
    match std::env::var(ENV_TRACE_RING_BYTES)
        .ok()
        .filter(|v| !v.is_empty())
    {
        None => Ok(None),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n >= 4096 && n.is_power_of_two() => Ok(Some(n)),
            _ => Err(Error::Io {
                what: format!("{ENV_TRACE_RING_BYTES}={v}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "must be a power of two of at least 4096 (bytes)",
                ),
            }),
        },
    }
}

/// Removes the shared maps' pins once no algorithm is loaded any more.
fn remove_shared_if_unused() {
    let any_loaded = algos::ALGORITHMS.iter().any(|a| pin_dir(a).exists());
    if !any_loaded {
        let _ = fs::remove_dir_all(shared_dir());
        let _ = fs::remove_dir(pin_root());
    }
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
pub fn check_pin_tree() -> Result<()> {
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
fn create_pin_dir(dir: &Path) -> Result<()> {
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

/// Everything the generic registration path needs to know.
pub struct LoadPlan<'a> {
    pub algo: &'a Algorithm,
    pub kernel: &'a Kernel,
    pub pin_dir: PathBuf,
    pub fault_inject: u32,
    /// Written into the params map before registration, so the first flow
    /// already runs on it.
    pub params: abi::ccctl_params,
}

/// Proof that an algorithm was registered and pinned.
pub struct Attached {
    pub abi: u32,
}

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
        params: opts.params.unwrap_or_else(default_params),
    };
    let attached = (algo.register)(&plan)?;

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
    for algo in algos::ALGORITHMS {
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

fn loader_lock() -> Result<ccctl_sys::lock::PidLock> {
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
    for algo in algos::ALGORITHMS {
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

fn has_registration_pin(dir: &Path) -> bool {
    dir.join(PIN_LINK).exists() || dir.join(MAP_OPS).exists()
}

/// The generic half of registration, shared by every algorithm's skeleton.
pub(crate) fn register_skeleton<'o, S>(mut open: S, plan: &LoadPlan<'_>) -> Result<Attached>
where
    S: OpenSkel<'o>,
    S::Output: Skel<'o>,
{
    let kernel = plan.kernel;
    // One object, two registrations: create the one whose cong_control
    // prototype matches this kernel; libbpf then skips the other's programs.
    let (wanted, unwanted) = if kernel.cong_control_4arg {
        (MAP_OPS, MAP_OPS_PRE610)
    } else {
        (MAP_OPS_PRE610, MAP_OPS)
    };
    for mut map in open.open_object_mut().maps_mut() {
        if map.name() == OsStr::new(unwanted) {
            map.set_autocreate(false)
                .map_err(bpf("disabling the unused struct_ops map"))?;
        } else if map.name() == OsStr::new(MAP_TRACE_EVENTS) {
            if let Some(bytes) = ring_bytes_for_load()? {
                map.set_max_entries(bytes)
                    .map_err(bpf("sizing the trace ring buffer"))?;
            }
        } else if map.name() == OsStr::new(wanted) && !kernel.struct_ops_link {
            // Before 6.4 a struct_ops map must not carry BPF_F_LINK.
            let flags = map.map_flags() & !BPF_F_LINK;
            map.set_map_flags(flags)
                .map_err(bpf("clearing BPF_F_LINK"))?;
        }
    }

    // libbpf creates only the last path component when it pins.
    create_pin_dir(&shared_dir())?;
    let log = LibbpfLog::capture();
    let mut skel = match open.load() {
        Ok(skel) => skel,
        Err(e) => {
            remove_shared_if_unused();
            return Err(log.load_error(plan.algo, e));
        }
    };
    drop(log);

    // Tracing programs (fentry) beside the struct_ops: attached now, pinned
    // with the rest below; dropped (detached) on any early return.
    let mut tracers: Vec<(String, Link)> = Vec::new();
    for prog in skel.object().progs_mut() {
        if prog.prog_type() != ProgramType::Tracing {
            continue;
        }
        let name = prog.name().to_string_lossy().into_owned();
        let link = prog
            .attach()
            .map_err(bpf(format!("attaching the tracing program {name}")))?;
        tracers.push((name, link));
    }

    let object = skel.object_mut();
    let mut maps: Vec<_> = object.maps_mut().collect();
    let ops_idx = maps
        .iter()
        .position(|m| m.name() == OsStr::new(wanted))
        .ok_or_else(|| missing_map(wanted))?;
    let params_idx = maps
        .iter()
        .position(|m| m.name() == OsStr::new(MAP_PARAMS))
        .ok_or_else(|| missing_map(MAP_PARAMS))?;
    // The initial parameters go in before registration: no flow can pick the
    // algorithm before they are in force.
    maps[params_idx]
        .update(
            &0u32.to_ne_bytes(),
            params_entry(&plan.params).as_bytes(),
            MapFlags::LOCK,
        )
        .map_err(bpf("writing the initial parameters"))?;
    // Crash safety: everything but the link is pinned *before* the
    // registration, so a ccctl killed at any point (SIGKILL: no cleanup runs)
    // leaves either pins without a registration, which the next command
    // removes ([`repair`]), or a complete, usable set. Before 6.4 the
    // registration is the struct_ops map itself and would outlive the process
    // unpinned and unfindable; pinned first, it can always be taken back.
    // From 6.4 the registration is a link that dies with the process until
    // it is pinned.
    let meta_idx = maps
        .iter()
        .position(|m| m.name() == OsStr::new(MAP_META))
        .ok_or_else(|| missing_map(MAP_META))?;
    let meta = abi::ccctl_meta {
        loaded_at_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        abi: kernel.abi(),
        kernel_features: kernel.features(),
        ..Default::default()
    };
    maps[meta_idx]
        .update(&0u32.to_ne_bytes(), meta.as_bytes(), MapFlags::ANY)
        .map_err(bpf("writing the meta map"))?;
    let mut pin_maps = || -> Result<()> {
        create_pin_dir(&plan.pin_dir)?;
        maps[meta_idx]
            .pin(plan.pin_dir.join(MAP_META))
            .map_err(bpf("pinning the meta map"))?;
        maps[params_idx]
            .pin(plan.pin_dir.join(MAP_PARAMS))
            .map_err(bpf("pinning the params map"))?;
        if !kernel.struct_ops_link {
            maps[ops_idx]
                .pin(plan.pin_dir.join(MAP_OPS))
                .map_err(bpf("pinning the struct_ops map"))?;
        }
        if let Some(i) = maps
            .iter()
            .position(|m| m.name() == OsStr::new(MAP_HEARTBEAT))
        {
            maps[i]
                .pin(plan.pin_dir.join(MAP_HEARTBEAT))
                .map_err(bpf("pinning the heartbeat map"))?;
        }
        for (name, tracer) in tracers.iter_mut() {
            tracer
                .pin(plan.pin_dir.join(name.as_str()))
                .map_err(bpf(format!("pinning the link of {name}")))?;
        }
        Ok(())
    };
    if let Err(e) = pin_maps() {
        let _ = remove_pins(&plan.pin_dir);
        return Err(e);
    }
    // Registration happens here; until `disconnect` below, dropping `link`
    // unregisters again, so every early return leaves the kernel as it was.
    let mut link = match maps[ops_idx].attach_struct_ops() {
        Ok(link) => link,
        Err(e) => {
            let _ = remove_pins(&plan.pin_dir);
            return Err(bpf(format!(
                "registering {} with the kernel",
                plan.algo.kernel_name
            ))(e));
        }
    };
    if kernel.struct_ops_link {
        if let Err(e) = link.pin(plan.pin_dir.join(PIN_LINK)) {
            let _ = remove_pins(&plan.pin_dir);
            return Err(bpf("pinning the struct_ops link")(e)); // `link` drops: unregistered
        }
    }
    link.disconnect();
    Ok(Attached { abi: kernel.abi() })
}

fn missing_map(name: &str) -> Error {
    Error::Bpf {
        what: format!("the BPF object has no `{name}` map"),
        source: libbpf_rs::Error::from_raw_os_error(libc::ENOENT),
    }
}

/// Take a registration out of the kernel and remove its pins.
fn unregister(dir: &Path) -> Result<()> {
    let link_pin = dir.join(PIN_LINK);
    let ops_pin = dir.join(MAP_OPS);
    if link_pin.exists() {
        let link = Link::open(&link_pin).map_err(bpf(format!("opening {}", link_pin.display())))?;
        // BPF_LINK_DETACH unregisters at once where supported (6.9+); elsewhere
        // the registration ends when the last reference, the pin, goes.
        if let Err(e) = link.detach() {
            tracing::debug!("link detach not supported here ({e}); dropping the pin instead");
        }
        drop(link);
    } else if ops_pin.exists() {
        let map = MapHandle::from_pinned_path(&ops_pin)
            .map_err(bpf(format!("opening {}", ops_pin.display())))?;
        map.delete(&0u32.to_ne_bytes())
            .map_err(bpf("unregistering the struct_ops map"))?;
    }
    remove_pins(dir)
}

/// Remove a pin directory, and the ccctl root if it is then empty.
fn remove_pins(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    remove_shared_if_unused();
    if let Some(root) = dir.parent() {
        let _ = fs::remove_dir(root); // only succeeds when empty
    }
    Ok(())
}

/// Unregistration through a dropped link completes when its last reference
/// goes; give the kernel a moment, then say so if it is still there.
fn wait_unregistered(kernel_name: &str) -> Result<()> {
    for _ in 0..50 {
        if !kernel::is_registered(kernel_name)? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Error::Io {
        what: format!("{kernel_name} is still registered after its pins were removed; another process may hold its link"),
        source: std::io::Error::from_raw_os_error(libc::EBUSY),
    })
}

fn read_meta(dir: &Path) -> Result<abi::ccctl_meta> {
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
fn params_entry(p: &abi::ccctl_params) -> abi::ccctl_params_entry {
    abi::ccctl_params_entry {
        p: *p,
        ..Default::default()
    }
}

fn write_meta(dir: &Path, meta: &abi::ccctl_meta) -> Result<()> {
    Ok(PinnedMap::<abi::ccctl_meta>::open(&dir.join(MAP_META))?.set(meta)?)
}

fn name_to_c(name: &str) -> [libc::c_char; abi::CCCTL_CA_NAME_MAX as usize] {
    let mut out = [0 as libc::c_char; abi::CCCTL_CA_NAME_MAX as usize];
    for (dst, src) in out
        .iter_mut()
        .zip(name.bytes().take(abi::CCCTL_CA_NAME_MAX as usize - 1))
    {
        *dst = src as libc::c_char;
    }
    out
}

fn c_to_name(raw: &[libc::c_char]) -> String {
    raw.iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect()
}

// ---- status and list ------------------------------------------------------

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
    for algo in algos::ALGORITHMS {
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
    Ok(algos::ALGORITHMS
        .iter()
        .map(|a| ListEntry {
            name: a.name,
            kernel_name: a.kernel_name,
            loaded: available.iter().any(|n| n == a.kernel_name) && pin_dir(a).exists(),
            summary: a.summary,
        })
        .collect())
}

// ---- libbpf's log, for verifier rejections ----------------------------------

static LIBBPF_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn libbpf_print(level: PrintLevel, msg: String) {
    tracing::debug!(target: "libbpf", "{}", msg.trim_end());
    if let Ok(mut log) = LIBBPF_LOG.lock() {
        log.extend(msg.lines().map(str::to_string));
        let _ = level;
    }
}

/// Collects libbpf's messages while an object loads.
struct LibbpfLog;

impl LibbpfLog {
    fn capture() -> Self {
        if let Ok(mut log) = LIBBPF_LOG.lock() {
            log.clear();
        }
        libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_print)));
        LibbpfLog
    }

    /// Turn a load failure into an error carrying the verifier's last words.
    fn load_error(&self, algo: &Algorithm, err: libbpf_rs::Error) -> Error {
        let log = LIBBPF_LOG.lock().map(|l| l.clone()).unwrap_or_default();
        match verifier_tail(&log, 20) {
            Some(tail) => Error::VerifierRejected {
                algo: algo.name.into(),
                log_tail: tail,
            },
            None => {
                let tail: Vec<_> = log.iter().rev().take(10).rev().cloned().collect();
                Error::Bpf {
                    what: format!("loading {} failed\n{}", algo.name, tail.join("\n")),
                    source: err,
                }
            }
        }
    }
}

impl Drop for LibbpfLog {
    fn drop(&mut self) {
        libbpf_rs::set_print(None);
    }
}

/// The last `n` lines of the verifier log libbpf printed, plus the line
/// naming the program that failed.
fn verifier_tail(log: &[String], n: usize) -> Option<String> {
    let begin = log
        .iter()
        .rposition(|l| l.contains("-- BEGIN PROG LOAD LOG --"))?;
    let end = log[begin..]
        .iter()
        .position(|l| l.contains("-- END PROG LOAD LOG --"))
        .map(|e| begin + e)
        .unwrap_or(log.len());
    let body = &log[begin + 1..end];
    let skip = body.len().saturating_sub(n);
    let mut out: Vec<String> = Vec::new();
    if let Some(head) = log[..begin].iter().rev().find(|l| l.contains("prog '")) {
        out.push(head.trim().to_string());
    }
    out.extend(body[skip..].iter().map(|l| format!("  {}", l.trim_end())));
    Some(out.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_tail_keeps_the_end_of_the_log_and_the_program() {
        let log: Vec<String> = [
            "libbpf: prog 'bbr_init': BPF program load failed: Permission denied",
            "libbpf: prog 'bbr_init': -- BEGIN PROG LOAD LOG --",
            "0: R1=ctx() R10=fp0",
            "1: (79) r6 = *(u64 *)(r1 +0)",
            "no write support to tcp_sock at off 1456",
            "-- END PROG LOAD LOG --",
            "libbpf: failed to load object",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let tail = verifier_tail(&log, 2).expect("log has a verifier section");
        assert!(tail.starts_with("libbpf: prog 'bbr_init'"));
        assert!(tail.contains("no write support to tcp_sock"));
        assert!(!tail.contains("R10=fp0"), "only the last 2 lines: {tail}");
    }

    #[test]
    fn verifier_tail_is_none_without_a_verifier_log() {
        let log = vec!["libbpf: failed to find BTF for extern".to_string()];
        assert!(verifier_tail(&log, 5).is_none());
    }

    #[test]
    fn kernel_names_round_trip_through_c_strings() {
        assert_eq!(c_to_name(&name_to_c("cubic")), "cubic");
        let long = "a_name_longer_than_sixteen";
        assert_eq!(c_to_name(&name_to_c(long)).len(), 15);
    }
}
