//! ccctl-core: everything ccctl knows about the kernel side, and nothing
//! about measuring.
//!
//! - `abi`: the one BPF<->Rust ABI, generated from `bpf/ccctl_abi.h`;
//! - `kernel`: what this kernel offers (BTF, struct_ops, privileges, bpffs);
//! - `registry`: the one table of the algorithms this crate carries (ids,
//!   names, BPF objects, event columns, plot colours);
//! - `pins`: the pin tree under `<bpffs>/ccctl`, the whole loaded state;
//! - `register`: opening, loading, pinning and registering a BPF object;
//! - `object_file`: the same from a BPF object file (`load --object`);
//! - `loader`: the load verbs (load, unload, repair);
//! - `status`: `status` and `list`, read from the pins;
//! - `params`: tunable parameters in the pinned maps;
//! - `trace`: the shared tracing maps, event decoding and the consumer loop;
//! - `units`: rates, times and buffers as people write them.
//!
//! `sys` is ccctl-sys re-exported. An embedding program (a fleet agent)
//! links this crate alone: no dataframes, no plotting. Modules depend one
//! way (`tests/module_graph.rs` checks there is no cycle).
pub mod abi;
mod bpf;
pub mod error;
#[doc(hidden)]
pub mod fuzz;
#[cfg(test)]
mod generated_docs;
pub mod kernel;
pub mod loader;
mod object_file;
pub mod params;
pub mod pins;
pub mod policy;
mod register;
pub mod registry;
pub mod status;
pub mod trace;
pub mod units;
pub mod upgrade;

/// The system layer, re-exported: namespaces, locks, clocks, signals.
pub use ccctl_sys as sys;

/// The commit this crate was built from (`git rev-parse --short=12 HEAD`),
/// for metadata written next to measurements.
pub const GIT_COMMIT: &str = env!("CCCTL_GIT_COMMIT");
