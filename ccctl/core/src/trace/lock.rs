//! One tracer at a time: every algorithm writes into the same ring buffer
//! and reads the same `trace_cfg`, so two consumers would steal each
//! other's events and overwrite each other's filters.
use std::path::Path;

use ccctl_sys::lock::{LockError, PidLock, Wait};

use super::TraceError;

/// Held for as long as a trace session runs; released (by the kernel, even
/// on SIGKILL) when dropped or when the process ends.
#[derive(Debug)]
pub struct TraceLock(PidLock);

impl TraceLock {
    /// Where `ccctl trace` (and anything else consuming the ring) locks.
    pub const DEFAULT_PATH: &'static str = "/run/ccctl/trace.lock";

    /// Take the system-wide tracing lock, or say who holds it.
    pub fn acquire() -> Result<TraceLock, TraceError> {
        Self::acquire_at(Path::new(Self::DEFAULT_PATH))
    }

    /// Take the lock at `path` (creating it and its directory) without
    /// waiting, with our pid in it.
    pub fn acquire_at(path: &Path) -> Result<TraceLock, TraceError> {
        match PidLock::acquire(path, Wait::No) {
            Ok(l) => Ok(TraceLock(l)),
            Err(LockError::Busy { pid, .. }) => Err(TraceError::Busy { pid }),
            Err(LockError::Io { what, path, source }) => Err(TraceError::Io {
                what: format!("{what} {}", path.display()),
                source,
            }),
        }
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_fails_and_names_the_holder() {
        let dir = crate::sys::scratch_dir("trace-test").unwrap();
        let path = dir.join("sub/trace.lock");
        let held = TraceLock::acquire_at(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().trim(),
            std::process::id().to_string()
        );
        // flock locks belong to the open file: a second open conflicts even
        // in the same process.
        let err = TraceLock::acquire_at(&path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "another tracer (pid {}) is running: ccctl traces one session at a time \
                 because all algorithms share one ring buffer",
                std::process::id()
            )
        );
        // The failed attempt left the holder's pid in place.
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().trim(),
            std::process::id().to_string()
        );
        drop(held);
        let again = TraceLock::acquire_at(&path).unwrap();
        assert_eq!(again.path(), path);
    }
}
