//! One tracer at a time: every algorithm writes into the same ring buffer
//! and reads the same `trace_cfg`, so two consumers would steal each
//! other's events and overwrite each other's filters.
use std::{
    fs::{File, OpenOptions},
    io::{Read, Seek, SeekFrom, Write},
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::{Path, PathBuf},
};

use super::TraceError;

/// Held for as long as a trace session runs; released (by the kernel, even
/// on SIGKILL) when dropped or when the process ends. The file itself stays:
/// removing a lock file races with the next locker.
#[derive(Debug)]
pub struct TraceLock {
    _file: File,
    path: PathBuf,
}

impl TraceLock {
    /// Where `ccctl trace` (and anything else consuming the ring) locks.
    pub const DEFAULT_PATH: &'static str = "/run/ccctl/trace.lock";

    /// Take the system-wide tracing lock, or say who holds it.
    pub fn acquire() -> Result<TraceLock, TraceError> {
        Self::acquire_at(Path::new(Self::DEFAULT_PATH))
    }

    /// Take an exclusive, non-blocking `flock` on `path` (creating it and its
    /// directory) and write our pid into it.
    pub fn acquire_at(path: &Path) -> Result<TraceLock, TraceError> {
        let io = |what: &str| {
            let what = format!("{what} {}", path.display());
            move |source| TraceError::Io { what, source }
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| TraceError::Io {
                what: format!("creating {}", dir.display()),
                source,
            })?;
        }
        // No O_TRUNC: the holder's pid must survive our failed attempt.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(io("opening"))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(TraceError::Busy {
                    pid: text.trim().parse().ok(),
                });
            }
            return Err(io("locking")(err));
        }
        file.set_len(0).map_err(io("writing"))?;
        file.seek(SeekFrom::Start(0)).map_err(io("writing"))?;
        writeln!(file, "{}", std::process::id()).map_err(io("writing"))?;
        Ok(TraceLock {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_fails_and_names_the_holder() {
        let path = crate::sys::scratch_dir("trace-test")
            .unwrap()
            .join("sub/trace.lock");
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
