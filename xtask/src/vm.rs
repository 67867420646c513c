//! `cargo xtask vm`: run a command as root inside a virtme-ng VM (TCG, no
//! KVM) that boots Debian's 6.1 kernel on a read-only view of the host
//! filesystem.
//!
//! Filesystem: the host root is exported read-only over 9p; virtme-ng puts
//! tmpfs-backed overlays on /etc, /usr, /var, /tmp, /home, /opt, /srv, so
//! those are writable in the guest but changes stay in the guest. Only the
//! cargo target directory (plus any `--rwdir`) is shared read-write, so
//! test binaries can leave results there. `--rw` (whole host root writable)
//! is never used.
//!
//! 9p is forced: Debian 12 has no Rust virtiofsd, and vng would otherwise
//! probe qemu's old C virtiofsd for ~5 s per shared directory, then fall
//! back to 9p anyway.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

use crate::proc;

/// The guest-side pieces shared with `ccctl lab` (script, kernel, vng command line).
use ccctl_vm as shared;
use shared::READY_MARKER;
pub use shared::{resolve_kernel, vng, VENV};
/// Exit code when the VM itself failed (did not boot, guest setup failed).
pub const EXIT_VM_FAILED: i32 = 125;

#[derive(Args, Debug)]
pub struct VmArgs {
    /// Kernel image path, or version (e.g. 6.1.0-56-amd64); default: newest /boot/vmlinuz-6.1*
    #[arg(long)]
    pub kernel: Option<String>,
    /// Guest memory (qemu -m syntax)
    #[arg(long, default_value = "2G")]
    pub memory: String,
    /// Guest vCPUs
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// Extra environment variable for the command (repeatable)
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Extra host directory shared read-write (repeatable; target/ always is)
    #[arg(long, value_name = "DIR")]
    pub rwdir: Vec<PathBuf>,
    /// Kill the VM after this many seconds
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Command to run in the guest (after `--`)
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected K=V")?;
    let valid = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("invalid variable name {k:?}"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Everything needed for one VM boot.
pub struct VmSpec {
    pub kernel: Option<String>,
    pub memory: String,
    pub cpus: u32,
    pub env: Vec<(String, String)>,
    pub rwdirs: Vec<PathBuf>,
    pub timeout: Option<Duration>,
    pub cmd: Vec<String>,
}

pub struct VmOutcome {
    /// Exit code of the guest command (or of vng when the guest failed).
    pub code: i32,
    /// Seconds from starting vng until the guest was ready to run the command.
    pub boot_secs: Option<f64>,
    pub stdout: String,
    pub stderr: String,
}

impl VmOutcome {
    pub fn booted(&self) -> bool {
        self.boot_secs.is_some()
    }
}

/// A file removed when dropped (the generated guest script; the soak's
/// copy of ccctl).
pub(crate) struct TempFile(pub(crate) PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Boot a VM, run `spec.cmd` in it, stream its output to ours.
pub fn run_in_vm(spec: &VmSpec) -> Result<VmOutcome> {
    let target = proc::target_dir()?;
    let cwd = std::env::current_dir().context("cannot get the working directory")?;
    let script_dir = target.join("xtask");
    std::fs::create_dir_all(&script_dir)
        .with_context(|| format!("cannot create {}", script_dir.display()))?;
    let script = TempFile(script_dir.join(format!("vm-{}.sh", std::process::id())));
    let text = shared::guest_script(&cwd, &shared::guest_env(&spec.env), &spec.cmd)?;
    std::fs::File::create(&script.0)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", script.0.display()))?;
    let mut rwdirs = vec![target.clone()];
    rwdirs.extend(spec.rwdirs.iter().cloned());
    let guest = shared::GuestRun {
        kernel: spec.kernel.clone(),
        memory: spec.memory.clone(),
        cpus: spec.cpus,
        env: spec.env.clone(),
        rwdirs,
        cmd: spec.cmd.clone(),
    };
    let kernel = resolve_kernel(spec.kernel.as_deref())?;
    let mut cmd = shared::vng_command(&guest, &script.0, &cwd)?;

    eprintln!(
        "xtask vm: booting {} (TCG, {} vCPUs, {}) for: {}",
        kernel.display(),
        spec.cpus,
        spec.memory,
        spec.cmd.join(" ")
    );
    let start = Instant::now();
    // Milliseconds until the ready marker was seen, +1 (0 = not yet).
    let ready_ms = Arc::new(AtomicU64::new(0));
    let hook: proc::ChunkHook = {
        let ready_ms = ready_ms.clone();
        let mut tail = String::new();
        Box::new(move |chunk: &[u8]| {
            if ready_ms.load(Ordering::SeqCst) != 0 {
                return;
            }
            tail.push_str(&String::from_utf8_lossy(chunk));
            if tail.contains(READY_MARKER) {
                ready_ms.store(start.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
                tail.clear();
            } else if tail.len() > 4096 {
                tail.drain(..tail.len() - 64);
            }
        })
    };
    let teed = proc::run_tee(&mut cmd, spec.timeout, Some(hook))?;
    proc::bail_if_interrupted()?;
    let ms = ready_ms.load(Ordering::SeqCst);
    let boot_secs = (ms != 0).then(|| (ms - 1) as f64 / 1000.0);
    let code = proc::exit_code(&teed.status);
    match boot_secs {
        Some(b) => eprintln!(
            "xtask vm: guest ready after {b:.1} s, exit code {code}, total {:.1} s",
            start.elapsed().as_secs_f64()
        ),
        None => eprintln!(
            "xtask vm: the VM failed before running the command (vng exit code {code}, {:.1} s)",
            start.elapsed().as_secs_f64()
        ),
    }
    Ok(VmOutcome {
        code,
        boot_secs,
        stdout: teed.stdout,
        stderr: teed.stderr,
    })
}

pub fn main(args: VmArgs) -> Result<i32> {
    let cmd = args
        .cmd
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| anyhow::anyhow!("argument {a:?} is not UTF-8"))
        })
        .collect::<Result<Vec<_>>>()?;
    let spec = VmSpec {
        kernel: args.kernel,
        memory: args.memory,
        cpus: args.cpus,
        env: args.env,
        rwdirs: args.rwdir,
        timeout: args.timeout.map(Duration::from_secs),
        cmd,
    };
    let out = run_in_vm(&spec)?;
    if !out.booted() {
        return Ok(EXIT_VM_FAILED);
    }
    Ok(out.code)
}
