//! ccctl-core: everything ccctl knows about the kernel side, and nothing
//! about measuring.
//!
//! `abi` (the one BPF<->Rust ABI, generated from `bpf/ccctl_abi.h`),
//! `kernel` (what this kernel offers), `algos` (the BPF objects this crate
//! carries), `loader` (registering and pinning), `params` (tunable
//! parameters in the pinned maps), `trace` (the shared tracing maps, event
//! decoding and the consumer loop); `sys` is ccctl-sys re-exported. An embedding program (a fleet agent)
//! links this crate alone: no dataframes, no plotting.
pub mod abi;
pub mod algos;
mod bpf;
pub mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod kernel;
pub mod loader;
pub mod params;
pub mod trace;
pub mod units;

/// The system layer, re-exported: namespaces, locks, clocks, signals.
pub use ccctl_sys as sys;

/// The commit this crate was built from (`git rev-parse --short=12 HEAD`),
/// for metadata written next to measurements.
pub const GIT_COMMIT: &str = env!("CCCTL_GIT_COMMIT");
