//! ccctl: load, tune, trace and measure BPF struct_ops TCP congestion controls.
//!
//! Modules by responsibility: `kernel` (what this kernel offers), `algos`
//! (what this binary carries), `loader` (registering and pinning), `cli`;
//! `testbed`, `iperf`, `diag` and `ss` measure flows on network namespaces;
//! `lab` runs scenarios on them (in the `vm` when the host lacks netem).
pub mod abi;
pub mod algos;
mod bpf;
pub mod cli;
pub mod daemon;
pub mod diag;
pub mod error;
pub mod iperf;
pub mod kernel;
pub mod lab;
pub mod loader;
pub mod logging;
pub mod metrics;
pub mod params;
pub mod plots;
pub mod scenario;
pub mod ss;
pub mod testbed;
pub mod trace;
pub mod units;
pub mod vm;
