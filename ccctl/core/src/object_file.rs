//! Loading an algorithm from a BPF object file instead of the object built
//! into ccctl (`ccctl load NAME --object FILE.bpf.o`).
//!
//! The file is opened as the embedded skeletons are (the kernel's BTF for
//! CO-RE, the shared trace maps pinned by name), checked to be an object of
//! the algorithm it is loaded as, given the same load-time configuration
//! (`ccctl_cfg` in `.rodata`), and handed to the same registration path
//! ([`register::register_object`]). Nothing is created before the checks pass.
//!
//! What "an object of the algorithm" means here: it registers a
//! `tcp_congestion_ops` through a struct_ops map, every such map carries the
//! algorithm's kernel name, the one this kernel's cong_control ABI needs
//! (`ops` or `ops_pre610`, see `CCCTL_STRUCT_OPS` in bpf/ccctl_common.h) is
//! there, and so are ccctl's bookkeeping maps and load-time configuration.
use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
};

use libbpf_rs::{
    btf::types::{DataSec, MemberAttr, Struct, Var},
    AsRawLibbpf, Btf, MapType, ObjectBuilder, OpenObject,
};

use crate::{
    abi::{self, Plain},
    error::{bpf, io, Error, Result},
    pins::shared_dir,
    register::{self, Attached, LoadPlan},
};

/// The struct_ops value type a congestion control registers.
const TCP_CONGESTION_OPS: &str = "tcp_congestion_ops";
/// The load-time configuration every ccctl object declares (ccctl_common.h).
const LOAD_CONFIG_VAR: &str = "ccctl_cfg";
/// The maps the registration path pins (register.rs).
const REQUIRED_MAPS: &[&str] = &["meta", "params"];

/// Open `path`, check it, configure it and register it as `plan.algo`.
pub(crate) fn register(path: &Path, plan: &LoadPlan<'_>) -> Result<Attached> {
    let open = open(path, plan)?;
    register::register_object(open, plan)
}

fn open(path: &Path, plan: &LoadPlan<'_>) -> Result<OpenObject> {
    let md = std::fs::metadata(path).map_err(io(format!("reading {}", path.display())))?;
    if !md.is_file() {
        return Err(not_it(path, plan, "it is not a regular file".into()));
    }
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut magic))
        .map_err(io(format!("reading {}", path.display())))?;
    if read < 4 || magic != *b"\x7fELF" {
        return Err(not_it(
            path,
            plan,
            "it is not an ELF file (a BPF object is what clang -target bpf -c writes)".into(),
        ));
    }
    let mut builder = ObjectBuilder::default();
    builder
        .btf_custom_path(&plan.kernel.btf_path)
        .map_err(bpf("setting the kernel BTF path"))?
        .pin_root_path(shared_dir())
        .map_err(bpf("setting the shared pin path"))?;
    let mut open = builder.open_file(path).map_err(bpf(format!(
        "opening {} as a BPF object (an ELF file of BPF programs, as clang -target bpf writes)",
        path.display()
    )))?;
    let cfg_offset = check(&open, plan.algo.kernel_name, ops_map_name(plan))
        .map_err(|problem| not_it(path, plan, problem))?;
    write_load_config(&mut open, cfg_offset, plan)
        .map_err(|problem| not_it(path, plan, problem))?;
    Ok(open)
}

fn not_it(path: &Path, plan: &LoadPlan<'_>, problem: String) -> Error {
    Error::NotTheAlgorithmsObject {
        path: PathBuf::from(path),
        algo: plan.algo.name.into(),
        problem,
    }
}

/// The struct_ops map this kernel registers.
fn ops_map_name(plan: &LoadPlan<'_>) -> &'static str {
    register::ops_maps(plan.kernel).0
}

/// The object's BTF, borrowed from the open object.
fn object_btf(open: &OpenObject) -> Result<Btf<'_>, String> {
    // SAFETY: `as_libbpf_object` points at the bpf_object `open` owns, valid
    // for as long as `open` is borrowed, which bounds the returned Btf.
    let obj = unsafe { open.as_libbpf_object().as_ref() };
    Btf::from_bpf_object(obj)
        .map_err(|e| format!("reading its BTF: {e}"))?
        .ok_or_else(|| "it carries no BTF (compile with -g)".to_string())
}

/// Byte offset and size of member `name` of `st`.
fn member(st: &Struct<'_>, name: &str) -> Option<(usize, usize)> {
    st.iter().find_map(|m| {
        if m.name != Some(OsStr::new(name)) {
            return None;
        }
        match m.attr {
            MemberAttr::Normal { offset } if offset % 8 == 0 => Some((offset as usize / 8, 0)),
            _ => None,
        }
    })
}

/// Checks `open` is an object of the algorithm registered as `kernel_name`
/// on this kernel (struct_ops map `wanted`); returns the offset of
/// `ccctl_cfg` in `.rodata`. The error says what is missing or different.
fn check(open: &OpenObject, kernel_name: &str, wanted: &str) -> Result<usize, String> {
    let btf = object_btf(open)?;
    let mut registrations = Vec::new();
    for map in open.maps() {
        if map.map_type() != MapType::StructOps {
            continue;
        }
        let map_name = map.name().to_string_lossy().into_owned();
        // SAFETY: the pointer is the map's, valid while `open` is borrowed.
        let type_id = unsafe {
            libbpf_rs::libbpf_sys::bpf_map__btf_value_type_id(map.as_libbpf_object().as_ptr())
        };
        let Some(st) = btf.type_by_id::<Struct<'_>>(type_id.into()) else {
            continue;
        };
        if st.name() != Some(OsStr::new(TCP_CONGESTION_OPS)) {
            continue;
        }
        let (off, _) = member(&st, "name").ok_or_else(|| {
            format!("its {TCP_CONGESTION_OPS} type (map `{map_name}`) has no `name` member")
        })?;
        let value = map
            .initial_value()
            .ok_or_else(|| format!("its struct_ops map `{map_name}` has no value"))?;
        let raw = value.get(off..).unwrap_or(&[]);
        let name: String = raw
            .iter()
            .take(abi::CCCTL_CA_NAME_MAX as usize)
            .take_while(|&&b| b != 0)
            .map(|&b| b as char)
            .collect();
        registrations.push((map_name, name));
    }
    if registrations.is_empty() {
        return Err(format!(
            "it registers no congestion control (no struct_ops map of {TCP_CONGESTION_OPS})"
        ));
    }
    if let Some((map, name)) = registrations.iter().find(|(_, n)| n != kernel_name) {
        return Err(format!(
            "its {TCP_CONGESTION_OPS} in map `{map}` is named `{name}`, not `{kernel_name}`"
        ));
    }
    if !registrations.iter().any(|(m, _)| m == wanted) {
        let found: Vec<&str> = registrations.iter().map(|(m, _)| m.as_str()).collect();
        return Err(format!(
            "it has no struct_ops map `{wanted}`, the registration this kernel's cong_control \
             needs (found {}; ccctl's objects declare both `ops` and `ops_pre610` through \
             CCCTL_STRUCT_OPS in bpf/ccctl_common.h)",
            found.join(", ")
        ));
    }
    for required in REQUIRED_MAPS {
        if !open.maps().any(|m| m.name() == OsStr::new(required)) {
            return Err(format!(
                "it has no `{required}` map (ccctl's bookkeeping, declared in bpf/ccctl_common.h)"
            ));
        }
    }
    load_config_offset(&btf)
}

/// Offset of `ccctl_cfg` in the `.rodata` section, from the object's BTF.
fn load_config_offset(btf: &Btf<'_>) -> Result<usize, String> {
    let missing = || {
        format!(
            "it has no `const volatile struct ccctl_load_config {LOAD_CONFIG_VAR}` in .rodata \
             (declared in bpf/ccctl_common.h)"
        )
    };
    let sec = btf
        .type_by_name::<DataSec<'_>>(".rodata")
        .ok_or_else(missing)?;
    let info = sec
        .iter()
        .find(|v| {
            btf.type_by_id::<Var<'_>>(v.ty)
                .is_some_and(|var| var.name() == Some(OsStr::new(LOAD_CONFIG_VAR)))
        })
        .ok_or_else(missing)?;
    let want = std::mem::size_of::<abi::ccctl_load_config>();
    if info.size != want {
        return Err(format!(
            "its {LOAD_CONFIG_VAR} is {} bytes, this ccctl's struct ccctl_load_config {want}",
            info.size
        ));
    }
    Ok(info.offset as usize)
}

/// The load-time configuration, as the skeletons write it.
fn write_load_config(
    open: &mut OpenObject,
    offset: usize,
    plan: &LoadPlan<'_>,
) -> Result<(), String> {
    let cfg = abi::ccctl_load_config {
        kernel_features: plan.kernel.features(),
        fault_inject: plan.fault_inject,
    };
    let bytes = cfg.as_bytes();
    let mut map = open
        .maps_mut()
        .find(|m| m.name().to_string_lossy().ends_with(".rodata"))
        .ok_or_else(|| "it has no .rodata map".to_string())?;
    let data = map
        .initial_value_mut()
        .ok_or_else(|| "its .rodata map has no initial value".to_string())?;
    let dst = data
        .get_mut(offset..offset + bytes.len())
        .ok_or_else(|| format!("its .rodata is shorter than {LOAD_CONFIG_VAR}'s place in it"))?;
    dst.copy_from_slice(bytes);
    Ok(())
}
