//! Running code inside a network namespace.
//!
//! `setns(CLONE_NEWNET)` changes the namespace of the calling thread only,
//! and for good: so the work runs on a short-lived scoped thread that enters
//! the namespace, runs the closure and exits, and the caller's thread never
//! leaves its own namespace. Sockets created there stay in that namespace
//! after the thread is gone.
use std::{fs::File, os::fd::AsFd, path::Path};

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// Why the closure could not run in the namespace.
#[derive(Debug, thiserror::Error)]
#[error("entering network namespace {} (setns CLONE_NEWNET): {source}", path.display())]
pub struct NetnsError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The path of a named namespace made by `ip netns add NAME`.
pub fn named(name: &str) -> std::path::PathBuf {
    Path::new("/run/netns").join(name)
}

/// Runs `f` on a helper thread inside the network namespace at `path` (a
/// file such as `/run/netns/NAME` or `/proc/PID/ns/net`).
pub fn run_in<T: Send>(path: &Path, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
    let err = |source| NetnsError {
        path: path.to_path_buf(),
        source,
    };
    let ns = File::open(path).map_err(err)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(|e| err(e.into()))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_namespace_is_refused() {
        let e = run_in(Path::new("/proc/self/status"), || ()).expect_err("not a netns");
        assert!(e.to_string().contains("/proc/self/status"), "{e}");
    }

    #[test]
    fn own_namespace_runs_the_closure() {
        // Entering a namespace needs CAP_SYS_ADMIN: the unit tests run as root.
        assert_eq!(
            run_in(Path::new("/proc/self/ns/net"), || 7).expect("own netns"),
            7
        );
    }
}
