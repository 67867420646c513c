//! The one system layer: everything ccctl asks of the OS besides BPF and
//! netlink, on `rustix` and `signal-hook` so that the rest of the code has
//! no `unsafe` for it.
//!
//! - [`cpu`]: the machine's CPU time and its steal (`/proc/stat`).
//! - [`awake`]: keeping the CPUs from halting while a path or tests run.
//! - [`time`]: the clocks (CLOCK_MONOTONIC is the clock of trace events).
//! - [`lock`]: pid-file locks (`flock` on a file holding the holder's pid).
//! - [`netns`]: running a closure inside a network namespace.
//! - [`signals`]: the one signal policy (SIGINT, SIGTERM, SIGHUP end
//!   sessions; SIGPIPE dies quietly at the command line).
pub mod awake;
pub mod cpu;
pub mod lock;
pub mod netns;
pub mod signals;
pub mod time;

/// A fresh, empty directory under the system's temporary directory, unique
/// to this process and call, for tests and benchmarks, removed with
/// everything in it when the guard is dropped: at the end of the test, and
/// while a failed assertion unwinds. Set `CCCTL_KEEP_SCRATCH=1` to keep
/// the directories of a failing test for a look (their paths are logged).
pub fn scratch_dir(tag: &str) -> std::io::Result<ScratchDir> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "ccctl-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path)?;
    Ok(ScratchDir { path })
}

/// A directory [`scratch_dir`] made; it reads as the `Path` it is.
#[derive(Debug)]
pub struct ScratchDir {
    path: std::path::PathBuf,
}

impl ScratchDir {
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::path::Path> for ScratchDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for ScratchDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::env::var_os("CCCTL_KEEP_SCRATCH").is_some_and(|v| v == "1") {
            tracing::info!(dir = %self.path.display(), "scratch directory kept (CCCTL_KEEP_SCRATCH=1)");
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.path.display(), "removing scratch directory: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn scratch_dir_is_removed_on_drop_with_its_contents() {
        let dir = super::scratch_dir("sys-unit").expect("scratch dir");
        let path = dir.to_path_buf();
        std::fs::create_dir_all(dir.join("a/b")).expect("nested dir");
        std::fs::write(dir.join("a/b/f"), b"x").expect("file");
        assert!(path.is_dir());
        drop(dir);
        assert!(!path.exists(), "{} left behind", path.display());
    }

    #[test]
    fn scratch_dir_is_removed_when_a_test_panics() {
        let path = std::sync::Mutex::new(None);
        let r = std::panic::catch_unwind(|| {
            let dir = super::scratch_dir("sys-unit-panic").expect("scratch dir");
            *path.lock().unwrap() = Some(dir.to_path_buf());
            panic!("a failed assertion");
        });
        assert!(r.is_err());
        let path = path.into_inner().unwrap().expect("the closure ran");
        assert!(!path.exists(), "{} left behind", path.display());
    }
}
