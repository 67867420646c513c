//! ccctl-observe: what ccctl sees of running flows, for the fleet and the
//! lab alike.
//!
//! - [`trace_files`]: where decoded per-ACK events go: a Parquet file, CSV,
//!   a live per-flow table, or Parquet files rotated by size and age in a
//!   flat or Hive-partitioned tree (the daemon). The events themselves
//!   (maps, ring buffer, decoding, filters) are ccctl-core's `trace`.
//! - [`sockdiag`]: per-socket TCP state through `NETLINK_SOCK_DIAG`
//!   (inet_diag): the daemon's flow counts, the lab's flow sampling.
//! - [`consumer_bench`]: how fast the consumer side takes events.
//!
//! It links ccctl-core and ccctl-sys only: a fleet build of `ccctl`
//! (`--no-default-features --features fleet`) has tracing and socket
//! sampling without the lab.
pub mod consumer_bench;
pub mod sockdiag;
pub mod trace_files;
