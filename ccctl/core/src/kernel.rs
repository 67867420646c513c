//! What the running kernel offers: its BPF struct_ops ABI (read from BTF),
//! the privileges we hold, bpffs, and the TCP congestion-control sysctls.
use std::{
    ffi::OsStr,
    fs,
    path::{Path, PathBuf},
};

use libbpf_rs::btf::{types, Btf, BtfKind, BtfType};
use serde::Serialize;

use crate::{
    abi,
    error::{io, Error, Result},
};

/// Where the kernel's BTF is; `CCCTL_VMLINUX_BTF` overrides it (tests, unusual systems).
pub fn btf_path() -> PathBuf {
    std::env::var_os("CCCTL_VMLINUX_BTF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/sys/kernel/btf/vmlinux"))
}

/// Where bpffs is mounted; `CCCTL_BPFFS` overrides /sys/fs/bpf.
pub fn bpffs_root() -> PathBuf {
    std::env::var_os("CCCTL_BPFFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/sys/fs/bpf"))
}

/// The kernel ABI facts the loader decides on.
#[derive(Debug, Clone, Serialize)]
pub struct Kernel {
    /// `uname -r`.
    pub release: String,
    pub btf_path: PathBuf,
    /// `cong_control(sk, ack, flag, rs)` (6.10+) rather than `cong_control(sk, rs)`.
    pub cong_control_4arg: bool,
    /// struct_ops maps can be attached through a bpf_link (6.4+).
    pub struct_ops_link: bool,
}

impl Kernel {
    /// Read the running kernel's BTF. Fails with [`Error::NoBtf`] or
    /// [`Error::NoStructOps`] when BPF congestion controls cannot work here.
    pub fn probe() -> Result<Kernel> {
        let btf_path = btf_path();
        if !btf_path.exists() {
            return Err(Error::NoBtf {
                path: btf_path,
                detail: "file not found".into(),
            });
        }
        let btf = Btf::from_path(&btf_path).map_err(|e| Error::NoBtf {
            path: btf_path.clone(),
            detail: format!("cannot parse it: {e}"),
        })?;

        // The kernel generates this value type for every struct_ops it offers.
        if btf
            .type_by_name::<types::Struct>("bpf_struct_ops_tcp_congestion_ops")
            .is_none()
        {
            return Err(Error::NoStructOps {
                path: btf_path,
                missing: "struct bpf_struct_ops_tcp_congestion_ops".into(),
            });
        }
        let cong_control_params =
            cong_control_param_count(&btf).ok_or_else(|| Error::NoStructOps {
                path: btf_path.clone(),
                missing: "tcp_congestion_ops.cong_control".into(),
            })?;
        let struct_ops_link = btf
            .type_by_name::<types::Struct>("bpf_struct_ops_link")
            .is_some();

        Ok(Kernel {
            release: uname_release(),
            btf_path,
            cong_control_4arg: cong_control_params >= 4,
            struct_ops_link,
        })
    }

    /// Writes the verifier will accept, as `CCCTL_KF_*` bits for .rodata.
    /// app_limited became writable together with struct_ops links (6.4), and
    /// snd_cwnd_stamp together with the 4-argument cong_control (6.10).
    pub fn features(&self) -> u32 {
        let mut kf = 0;
        if self.struct_ops_link {
            kf |= abi::CCCTL_KF_APP_LIMITED_WRITE;
        }
        if self.cong_control_4arg {
            kf |= abi::CCCTL_KF_CWND_STAMP_WRITE;
        }
        kf
    }

    /// The attach ABI, as `CCCTL_ABI_*` bits.
    pub fn abi(&self) -> u32 {
        let mut a = 0;
        if self.cong_control_4arg {
            a |= abi::CCCTL_ABI_CONG_CONTROL_4ARG;
        }
        if self.struct_ops_link {
            a |= abi::CCCTL_ABI_STRUCT_OPS_LINK;
        }
        a
    }
}

/// Describe `CCCTL_ABI_*` bits for people.
pub fn describe_abi(abi_bits: u32) -> String {
    let cc = if abi_bits & abi::CCCTL_ABI_CONG_CONTROL_4ARG != 0 {
        "cong_control(sk, ack, flag, rs)"
    } else {
        "cong_control(sk, rs)"
    };
    let attach = if abi_bits & abi::CCCTL_ABI_STRUCT_OPS_LINK != 0 {
        "struct_ops link"
    } else {
        "struct_ops map registration"
    };
    format!("{cc}, {attach}")
}

/// Number of parameters of `tcp_congestion_ops.cong_control`'s prototype.
fn cong_control_param_count(btf: &Btf<'_>) -> Option<usize> {
    let ops = btf.type_by_name::<types::Struct>("tcp_congestion_ops")?;
    let member = ops
        .iter()
        .find(|m| m.name == Some(OsStr::new("cong_control")))?;
    let ptr: BtfType<'_> = btf.type_by_id(member.ty)?;
    let pointee = ptr.skip_mods_and_typedefs().next_type()?;
    let proto = pointee.skip_mods_and_typedefs();
    if proto.kind() != BtfKind::FuncProto {
        return None;
    }
    let proto: types::FuncProto<'_> = proto.try_into().ok()?;
    Some(proto.len())
}

fn uname_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Capabilities we need: CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN.
pub fn check_privileges() -> Result<()> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_BPF: u32 = 39;
    let eff = effective_caps();
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    let mut missing = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::NotPrivileged {
            missing: missing.join(" and "),
        })
    }
}

/// The effective capability set of this process (capget(2)); empty if it
/// cannot be read.
fn effective_caps() -> u64 {
    rustix::thread::capabilities(None).map_or(0, |c| c.effective.bits())
}

/// bpffs' statfs(2) magic number.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Where a stock system mounts bpffs, and the only place we mount it ourselves.
pub const BPFFS_DEFAULT: &str = "/sys/fs/bpf";

fn is_bpffs(root: &Path) -> bool {
    // f_type is i64 on x86_64 but narrower on other architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(root).is_ok_and(|st| st.f_type as i64 == BPF_FS_MAGIC)
}

/// bpffs must be mounted at `root` for pins to outlive the process.
pub fn check_bpffs(root: &Path) -> Result<()> {
    if is_bpffs(root) {
        Ok(())
    } else {
        Err(Error::BpffsNotMounted {
            path: root.to_path_buf(),
        })
    }
}

/// Makes sure bpffs is mounted at `root`, mounting it at the standard place
/// (/sys/fs/bpf) when it is not, as bpftool does: a minimal system (a
/// virtme-ng VM, a container host) boots without it. Returns whether we
/// mounted it. A `root` chosen by `CCCTL_BPFFS` is never mounted over: the
/// user said bpffs *is* there, so its absence is an error to report.
pub fn ensure_bpffs(root: &Path) -> Result<bool> {
    if is_bpffs(root) {
        return Ok(false);
    }
    if root != Path::new(BPFFS_DEFAULT) {
        return check_bpffs(root).map(|()| false);
    }
    let refused = |why: String| Error::BpffsMountFailed {
        path: root.to_path_buf(),
        why,
    };
    if !root.is_dir() {
        return Err(refused(format!("{} is not a directory", root.display())));
    }
    // mode=0700: pins are root's alone (bpftool mounts with the same mode).
    rustix::mount::mount(
        "bpf",
        root,
        "bpf",
        rustix::mount::MountFlags::empty(),
        c"mode=0700",
    )
    .map_err(|e| refused(std::io::Error::from(e).to_string()))?;
    if !is_bpffs(root) {
        return Err(refused(
            "the mount succeeded but statfs does not see bpffs".into(),
        ));
    }
    tracing::warn!(
        "bpffs was not mounted: mounted it at {} (mount -t bpf bpf {} -o mode=0700)",
        root.display(),
        root.display()
    );
    Ok(true)
}

const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const DEFAULT: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// Congestion controls registered in the kernel right now.
pub fn available_congestion_controls() -> Result<Vec<String>> {
    let s = fs::read_to_string(AVAILABLE).map_err(io(format!("reading {AVAILABLE}")))?;
    Ok(s.split_whitespace().map(str::to_string).collect())
}

pub fn is_registered(kernel_name: &str) -> Result<bool> {
    Ok(available_congestion_controls()?
        .iter()
        .any(|n| n == kernel_name))
}

/// `net.ipv4.tcp_congestion_control` of this network namespace.
pub fn default_congestion_control() -> Result<String> {
    Ok(fs::read_to_string(DEFAULT)
        .map_err(io(format!("reading {DEFAULT}")))?
        .trim()
        .to_string())
}

pub fn set_default_congestion_control(name: &str) -> Result<()> {
    fs::write(DEFAULT, name).map_err(io(format!("writing `{name}` to {DEFAULT}")))
}
