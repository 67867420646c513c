//! The one system layer: everything ccctl asks of the OS besides BPF and
//! netlink, on `rustix` and `signal-hook` so that the rest of the code has
//! no `unsafe` for it.
//!
//! - [`time`]: the clocks (CLOCK_MONOTONIC is the clock of trace events).
//! - [`lock`]: pid-file locks (`flock` on a file holding the holder's pid).
//! - [`netns`]: running a closure inside a network namespace.
//! - [`signals`]: the one signal policy (SIGINT, SIGTERM, SIGHUP end
//!   sessions; SIGPIPE dies quietly at the command line).
pub mod lock;
pub mod netns;
pub mod signals;
pub mod time;

/// A fresh, empty directory under the system's temporary directory, unique
/// to this process and call, for tests and benchmarks. Not removed: tests
/// that must leave nothing behind remove it themselves.
pub fn scratch_dir(tag: &str) -> std::io::Result<std::path::PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ccctl-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
