//! Library errors. Each names what was wrong and what is allowed, so the CLI
//! can print it as it is; nothing has been changed when one is returned.
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("unknown algorithm `{name}`; known algorithms: {known}")]
    UnknownAlgorithm { name: String, known: String },

    /// A name that means the kernel's own algorithm, not one ccctl carries
    /// (`bbr` is the kernel's BBR; ours is `bpf-bbr`).
    #[error("`{name}` is the kernel's own congestion control, not one ccctl loads; did you mean `{ours}` (kernel name `{kernel_name}`)?")]
    KernelAlgorithm {
        name: String,
        ours: &'static str,
        kernel_name: &'static str,
    },

    #[error(
        "insufficient privileges: missing {missing}; run as root or grant CAP_BPF and CAP_NET_ADMIN \
         (CAP_SYS_ADMIN also covers CAP_BPF)"
    )]
    NotPrivileged { missing: String },

    #[error(
        "no kernel BTF at {path}: ccctl needs a kernel built with CONFIG_DEBUG_INFO_BTF=y \
         ({detail})"
    )]
    NoBtf { path: PathBuf, detail: String },

    #[error(
        "this kernel cannot run BPF congestion controls: its BTF ({path}) has no `{missing}` \
         (needs CONFIG_BPF_JIT, CONFIG_BPF_SYSCALL and struct_ops support for tcp_congestion_ops, Linux 5.6+)"
    )]
    NoStructOps { path: PathBuf, missing: String },

    #[error(
        "bpffs is not mounted at {path}; mount it with `mount -t bpf bpf {path}` \
         (or set CCCTL_BPFFS to where it is mounted)"
    )]
    BpffsNotMounted { path: PathBuf },

    #[error(
        "bpffs is not mounted at {path} and mounting it failed: {why}; mount it with \
         `mount -t bpf bpf {path}` (or set CCCTL_BPFFS to where it is mounted)"
    )]
    BpffsMountFailed { path: PathBuf, why: String },

    #[error(
        "refusing to follow the symbolic link {path} in ccctl's pins: ccctl makes none, \
         and one planted there would point ccctl at somebody else's objects; remove it \
         (`rm {path}`) and run the command again"
    )]
    PlantedSymlink { path: PathBuf },

    #[error("the kernel's verifier rejected `{algo}`:\n{log_tail}")]
    VerifierRejected { algo: String, log_tail: String },

    #[error(
        "`{kernel_name}` is registered in the kernel but not by ccctl (no pins under {pin_dir}); \
         remove it with `bpftool struct_ops unregister name {kernel_name}` and try again"
    )]
    ForeignRegistration {
        kernel_name: String,
        pin_dir: PathBuf,
    },

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{algo}: parameter `{param}`: {message}")]
    InvalidParam {
        algo: String,
        param: String,
        message: String,
    },

    #[error("{algo} is not loaded; load it first with `ccctl load {algo}`")]
    NotLoaded { algo: String },

    #[error(
        "{algo} is already loaded, so initial parameters would not apply; nothing changed. \
         Change its parameters with `ccctl tune {algo} ...` (or unload it first)"
    )]
    AlreadyLoaded { algo: String },

    #[error(
        "cannot replace {algo} in place on Linux {release}: swapping a registration under the \
         same name needs a struct_ops link (Linux 6.4+); here the registration is the struct_ops \
         map itself. Nothing changed. To upgrade anyway, `ccctl unload {algo}` then `ccctl load \
         {algo}` (new connections in between get the default congestion control)"
    )]
    NoHotUpgrade { algo: String, release: String },

    /// A refusal that is the whole story (no underlying error to chain).
    #[error("{0}")]
    Refused(String),

    #[error(
        "{algo} is already loaded, so the object {path} would not be used; nothing changed. \
         Unload it first (`ccctl unload {algo}`)"
    )]
    ObjectWhileLoaded { algo: String, path: PathBuf },

    #[error("{path} is not a BPF object of {algo}: {problem}")]
    NotTheAlgorithmsObject {
        path: PathBuf,
        algo: String,
        problem: String,
    },

    #[error("{what}: {source}")]
    Bpf {
        what: String,
        #[source]
        source: libbpf_rs::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach a description to an I/O error.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Attach a description to a libbpf error.
pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |source| Error::Bpf { what, source }
}

impl From<crate::abi::MapError> for Error {
    fn from(e: crate::abi::MapError) -> Error {
        Error::Bpf {
            what: format!("{} {}", e.what, e.path.display()),
            source: e.source,
        }
    }
}
