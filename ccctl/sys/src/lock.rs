//! Pid-file locks: an exclusive `flock` on a file that holds the holder's
//! pid, so a refusal can say who holds it. The kernel releases the lock when
//! the holder closes the file or dies (SIGKILL too); the file itself stays,
//! because removing a lock file races with the next locker.
//!
//! Lock files are root's business: created 0600 in a 0700 directory, and
//! never through a symbolic link (`O_NOFOLLOW`), so a link planted at
//! `/run/ccctl/*` cannot make ccctl write somewhere else.
use std::{
    fs::{DirBuilder, File, OpenOptions},
    io::{Read, Seek, SeekFrom, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use rustix::fs::{flock, FlockOperation};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Somebody else holds it (non-blocking attempts only).
    #[error("{} is held by {}", path.display(), pid.map_or_else(|| "pid unknown".to_string(), |p| format!("pid {p}")))]
    Busy { path: PathBuf, pid: Option<u32> },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Held while alive.
#[derive(Debug)]
pub struct PidLock {
    _file: File,
    path: PathBuf,
}

/// Whether to wait for the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Fail with [`LockError::Busy`] at once.
    No,
    /// Block until the holder lets go (for locks held microseconds).
    Yes,
}

impl PidLock {
    /// Lock `path` (creating it and its directory), then write our pid.
    pub fn acquire(path: &Path, wait: Wait) -> Result<PidLock, LockError> {
        let io = |what: &'static str| {
            let path = path.to_path_buf();
            move |source| LockError::Io { what, path, source }
        };
        if let Some(dir) = path.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| LockError::Io {
                    what: "creating",
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        // No O_TRUNC: the holder's pid must survive our failed attempt.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(io("opening"))?;
        let op = match wait {
            Wait::No => FlockOperation::NonBlockingLockExclusive,
            Wait::Yes => FlockOperation::LockExclusive,
        };
        if let Err(e) = flock(&file, op) {
            if e == rustix::io::Errno::WOULDBLOCK {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Busy {
                    path: path.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            return Err(io("locking")(e.into()));
        }
        file.set_len(0).map_err(io("writing"))?;
        file.seek(SeekFrom::Start(0)).map_err(io("writing"))?;
        writeln!(file, "{}", std::process::id()).map_err(io("writing"))?;
        Ok(PidLock {
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

    /// A directory of its own, removed when the test ends (passed or not).
    fn tempdir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ccctl-lock-test-")
            .tempdir()
            .expect("temp dir")
    }

    #[test]
    fn second_holder_is_refused_and_told_the_pid() {
        let dir = tempdir();
        let path = dir.path().join("sub/x.lock");
        let held = PidLock::acquire(&path, Wait::No).expect("first");
        match PidLock::acquire(&path, Wait::No) {
            Err(LockError::Busy { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(held);
        PidLock::acquire(&path, Wait::No).expect("free again after drop");
    }

    #[test]
    fn a_symlink_is_not_followed() {
        let dir = tempdir();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "x").expect("write");
        let link = dir.path().join("planted.lock");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let e = PidLock::acquire(&link, Wait::No).expect_err("must refuse a symlink");
        assert!(
            matches!(
                e,
                LockError::Io {
                    what: "opening",
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "x");
    }
}
