//! ccctl: load, tune, trace and measure BPF struct_ops TCP congestion controls.
//!
//! Modules by responsibility: `kernel` (what this kernel offers), `algos`
//! (what this binary carries), `loader` (registering and pinning), `cli`;
//! `testbed`, `iperf` and `ss` measure flows on network namespaces.
pub mod abi;
pub mod algos;
mod bpf;
pub mod cli;
pub mod error;
pub mod iperf;
pub mod kernel;
pub mod loader;
pub mod logging;
pub mod metrics;
pub mod scenario;
pub mod ss;
pub mod testbed;
pub mod units;
