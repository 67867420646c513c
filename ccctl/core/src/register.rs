//! Registering an algorithm's BPF object with the kernel: open its
//! embedded skeleton, fill its load-time configuration, load it (a verifier
//! refusal is reported with the tail of its log), pin it and register it
//! as a `tcp_congestion_ops`; and taking a registration back out.
use std::{
    ffi::OsStr,
    os::fd::{AsFd, AsRawFd},
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use libbpf_rs::{
    skel::{OpenSkel, Skel},
    Link, MapCore, MapFlags, MapHandle, Object as LoadedObject, OpenObject, PrintLevel,
    ProgramType,
};

use crate::{
    abi::{self, Plain},
    error::{bpf, Error, Result},
    kernel::{self, Kernel},
    pins::{
        create_pin_dir, params_entry, remove_pins, remove_shared_if_unused, shared_dir,
        MAP_HEARTBEAT, MAP_META, MAP_OPS, MAP_PARAMS, PIN_LINK,
    },
    registry::{Algorithm, Object},
};

const BPF_F_LINK: u32 = 1 << 13;
const MAP_OPS_PRE610: &str = "ops_pre610";
const MAP_TRACE_EVENTS: &str = "trace_events";
/// Ring-buffer size override for the next first load (bytes, a power of two
/// of at least 4096); tests shrink it to force overflows.
pub const ENV_TRACE_RING_BYTES: &str = "CCCTL_TRACE_RING_BYTES";

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

/// Everything the generic registration path needs to know.
pub struct LoadPlan<'a> {
    pub algo: &'a Algorithm,
    pub kernel: &'a Kernel,
    pub pin_dir: PathBuf,
    pub fault_inject: u32,
    /// Written into the params map before registration, so the first flow
    /// already runs on it.
    pub params: abi::ccctl_params,
    /// Swap the pinned registration for this load instead of registering
    /// (`ccctl load --replace`, `crate::upgrade`).
    pub replace: bool,
}

/// Proof that an algorithm was registered and pinned.
pub struct Attached {
    pub abi: u32,
}

/// Open a skeleton, fill in its load-time configuration, and hand it to the
/// generic registration path.
macro_rules! open_and_register {
    ($plan:expr, $skel:ident :: $builder:ident) => {{
        use libbpf_rs::skel::SkelBuilder as _;
        let plan = $plan;
        let mut storage = std::mem::MaybeUninit::uninit();
        let mut builder = crate::bpf::$skel::$builder::default();
        builder
            .obj_builder
            .btf_custom_path(&plan.kernel.btf_path)
            .map_err(bpf("setting the kernel BTF path"))?
            // Trace maps are pinned by name here and shared by every algorithm.
            .pin_root_path(shared_dir())
            .map_err(bpf("setting the shared pin path"))?;
        let mut open = builder.open(&mut storage).map_err(bpf(format!(
            "opening the embedded BPF object of {}",
            plan.algo.name
        )))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::Bpf {
                what: "the BPF object has no .rodata".into(),
                source: libbpf_rs::Error::from_raw_os_error(libc::ENOENT),
            })?;
        rodata.ccctl_cfg.kernel_features = plan.kernel.features();
        rodata.ccctl_cfg.fault_inject = plan.fault_inject;
        // The kernel registers it under this name: the algorithm's own, or
        // a derived one for a policy rule's parameter set (`modest_bbr_p1`).
        let name = crate::pins::name_to_c(plan.algo.kernel_name);
        open.struct_ops.ops_mut().name = name;
        open.struct_ops.ops_pre610_mut().name = name;
        register_skeleton(open, plan)
    }};
}

/// Registers `plan.algo` from its embedded object and pins it.
pub(crate) fn register(plan: &LoadPlan<'_>) -> Result<Attached> {
    match plan.algo.object {
        Object::Bbr => open_and_register!(plan, bbr::BbrSkelBuilder),
        Object::ModestBbr => open_and_register!(plan, modest_bbr::ModestBbrSkelBuilder),
        Object::Dstar => open_and_register!(plan, dstar::DstarSkelBuilder),
        Object::PatchedBbr => open_and_register!(plan, patched_bbr::PatchedBbrSkelBuilder),
    }
}

/// The generic half of registration, shared by every algorithm's skeleton.
fn register_skeleton<'o, S>(mut open: S, plan: &LoadPlan<'_>) -> Result<Attached>
where
    S: OpenSkel<'o>,
    S::Output: Skel<'o>,
{
    configure_open(open.open_object_mut(), plan.kernel)?;
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
    register_loaded(skel.object_mut(), plan)
}

/// The same registration for an object opened from a file
/// ([`crate::object_file`]): configured, loaded, then registered and pinned
/// exactly as an embedded skeleton is.
pub(crate) fn register_object(mut open: OpenObject, plan: &LoadPlan<'_>) -> Result<Attached> {
    configure_open(&mut open, plan.kernel)?;
    create_pin_dir(&shared_dir())?;
    let log = LibbpfLog::capture();
    let mut object = match open.load() {
        Ok(object) => object,
        Err(e) => {
            remove_shared_if_unused();
            return Err(log.load_error(plan.algo, e));
        }
    };
    drop(log);
    register_loaded(&mut object, plan)
}

/// The struct_ops map this kernel registers and the one it leaves uncreated.
pub(crate) fn ops_maps(kernel: &Kernel) -> (&'static str, &'static str) {
    // One object, two registrations: create the one whose cong_control
    // prototype matches this kernel; libbpf then skips the other's programs.
    if kernel.cong_control_4arg {
        (MAP_OPS, MAP_OPS_PRE610)
    } else {
        (MAP_OPS_PRE610, MAP_OPS)
    }
}

/// Before load: leave the other ABI's registration uncreated, size the
/// shared ring buffer as the pinned one, and drop BPF_F_LINK before 6.4.
fn configure_open(open: &mut OpenObject, kernel: &Kernel) -> Result<()> {
    let (wanted, unwanted) = ops_maps(kernel);
    for mut map in open.maps_mut() {
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
    Ok(())
}

/// After load: attach the tracers, write the parameters and meta, pin, and
/// register. Every early return leaves the kernel as it was.
fn register_loaded(object: &mut LoadedObject, plan: &LoadPlan<'_>) -> Result<Attached> {
    let kernel = plan.kernel;
    let (wanted, _) = ops_maps(kernel);
    // Tracing programs (fentry) beside the struct_ops: attached now, pinned
    // with the rest below; dropped (detached) on any early return.
    let mut tracers: Vec<(String, Link)> = Vec::new();
    for prog in object.progs_mut() {
        if prog.prog_type() != ProgramType::Tracing {
            continue;
        }
        let name = prog.name().to_string_lossy().into_owned();
        let link = prog
            .attach()
            .map_err(bpf(format!("attaching the tracing program {name}")))?;
        tracers.push((name, link));
    }

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
    if plan.replace {
        let extra =
            !tracers.is_empty() || maps.iter().any(|m| m.name() == OsStr::new(MAP_HEARTBEAT));
        return swap(&mut maps, ops_idx, meta_idx, params_idx, extra, plan);
    }
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

/// The hot upgrade's steps 1-4 (`crate::upgrade`), from the registration path once the new
/// object is loaded and its params map written (`plan.replace`).
fn swap(
    maps: &mut [libbpf_rs::MapMut<'_>],
    ops_idx: usize,
    meta_idx: usize,
    params_idx: usize,
    extra_pins: bool,
    plan: &LoadPlan<'_>,
) -> Result<Attached> {
    let dir = &plan.pin_dir;
    if extra_pins {
        return Err(Error::Refused(format!(
            "cannot replace {} in place: its object carries a timer or a tracing program besides \
             the registration, which --replace would leave on the old object; unload and load \
             again instead. Nothing changed",
            plan.algo.name
        )));
    }
    let old_meta = crate::pins::read_meta(dir)?;
    maps[meta_idx]
        .update(
            &0u32.to_ne_bytes(),
            old_meta.as_bytes(),
            libbpf_rs::MapFlags::ANY,
        )
        .map_err(bpf("writing the new meta map"))?;
    crate::pins::remove_swap_pins(dir);
    let staged = (|| -> Result<()> {
        maps[meta_idx]
            .pin(dir.join(crate::pins::PIN_META_NEW))
            .map_err(bpf("pinning the new meta map"))?;
        maps[params_idx]
            .pin(dir.join(crate::pins::PIN_PARAMS_NEW))
            .map_err(bpf("pinning the new params map"))?;
        maps[ops_idx]
            .pin(dir.join(crate::pins::PIN_OPS_NEW))
            .map_err(bpf("pinning the new struct_ops map"))?;
        // Prepares the map's value; registering the name again then fails
        // (EEXIST): the name is the old link's until the update below.
        match maps[ops_idx].attach_struct_ops() {
            Ok(stray) => {
                // Only if the old registration vanished meanwhile: take
                // this one back out, nothing is swapped.
                let _ = stray.detach();
                return Err(Error::Refused(format!(
                    "cannot replace {}: its registration went away during the swap",
                    plan.algo.kernel_name
                )));
            }
            Err(e) => tracing::debug!(
                "preparing the new struct_ops map: {e} (expected: the name is taken)"
            ),
        }
        let link_pin = dir.join("link");
        let link = Link::open(&link_pin).map_err(bpf(format!("opening {}", link_pin.display())))?;
        let ops_fd = maps[ops_idx].as_fd().as_raw_fd();
        // SAFETY: plain syscall wrapper; both fds are valid for the call.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_link_update(
                link.as_fd().as_raw_fd(),
                ops_fd,
                std::ptr::null(),
            )
        };
        if rc < 0 {
            return Err(Error::Io {
                what: format!(
                    "updating the struct_ops link of {} to the new object",
                    plan.algo.kernel_name
                ),
                source: std::io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(())
    })();
    if let Err(e) = staged {
        crate::pins::remove_swap_pins(dir);
        return Err(e);
    }
    crate::pins::finish_swap(dir)?;
    Ok(Attached {
        abi: plan.kernel.abi(),
    })
}

fn missing_map(name: &str) -> Error {
    Error::Bpf {
        what: format!("the BPF object has no `{name}` map"),
        source: libbpf_rs::Error::from_raw_os_error(libc::ENOENT),
    }
}

/// Take a registration out of the kernel and remove its pins.
pub(crate) fn unregister(dir: &Path) -> Result<()> {
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

/// Unregistration through a dropped link completes when its last reference
/// goes; give the kernel a moment, then say so if it is still there.
pub(crate) fn wait_unregistered(kernel_name: &str) -> Result<()> {
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
}
