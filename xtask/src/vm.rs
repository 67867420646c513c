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
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::{proc, setup};

/// Printed on the guest's stderr right before the command is exec'd.
const READY_MARKER: &str = "xtask-vm: guest ready";
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

/// Split "6.1.0-56-amd64" into numbers for ordering.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Resolve `--kernel` into a kernel image. None: newest /boot/vmlinuz-6.1*.
pub fn resolve_kernel(spec: Option<&str>) -> Result<PathBuf> {
    if let Some(s) = spec {
        let p = Path::new(s);
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        if s.contains('/') {
            bail!("kernel image {s} does not exist");
        }
    }
    let prefix = format!("vmlinuz-{}", spec.unwrap_or("6.1"));
    let mut found: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir("/boot")
        .context("cannot read /boot")?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !name.starts_with(&prefix) {
                return None;
            }
            let ver = name.strip_prefix("vmlinuz-")?;
            // virtme-ng loads the guest's modules from the host's /lib/modules.
            Path::new("/lib/modules").join(ver).is_dir().then_some(())?;
            Some((version_key(ver), e.path()))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, p)) => Ok(p),
        None => bail!(
            "no kernel /boot/{prefix}* with modules in /lib/modules (run `cargo xtask setup`)"
        ),
    }
}

/// Quote for POSIX sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script the guest runs: prepare the guest, then exec the command.
fn guest_script(cwd: &Path, env: &[(String, String)], cmd: &[String]) -> Result<String> {
    let cwd = cwd.to_str().context("working directory is not UTF-8")?;
    let mut s = String::from("#!/bin/sh\n# generated by `cargo xtask vm`\n");
    s.push_str(
        "fail() { echo \"xtask-vm: guest setup failed: $*\" >&2; exit 125; }\n\
         grep -q ' /sys/fs/bpf bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf || fail 'mount bpffs'\n\
         ip link set lo up || fail 'ip link set lo up'\n",
    );
    for (k, v) in env {
        s.push_str(&format!("export {k}={}\n", sh_quote(v)));
    }
    s.push_str(&format!("cd {} || fail 'cd'\n", sh_quote(cwd)));
    s.push_str(&format!(
        "echo \"{READY_MARKER}: $(uname -r), $(nproc) vCPUs, kernel uptime $(cut -d' ' -f1 /proc/uptime) s\" >&2\n"
    ));
    s.push_str("exec");
    for a in cmd {
        s.push(' ');
        s.push_str(&sh_quote(a));
    }
    s.push('\n');
    Ok(s)
}

/// Removes the generated guest script.
struct TempFile(PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Boot a VM, run `spec.cmd` in it, stream its output to ours.
pub fn run_in_vm(spec: &VmSpec) -> Result<VmOutcome> {
    let vng = setup::vng();
    if !vng.is_file() {
        bail!("{} not found: run `cargo xtask setup`", vng.display());
    }
    let kernel = resolve_kernel(spec.kernel.as_deref())?;
    let target = proc::target_dir()?;
    let cwd = std::env::current_dir().context("cannot get the working directory")?;

    // Environment inside the guest: a few host variables, ours, the user's.
    let mut env: Vec<(String, String)> = Vec::new();
    for k in ["PATH", "RUST_BACKTRACE", "RUST_LOG", "TERM"] {
        if let Ok(v) = std::env::var(k) {
            env.push((k.to_string(), v));
        }
    }
    env.push(("CCCTL_IN_VM".into(), "1".into()));
    env.extend(spec.env.iter().cloned());

    let script_dir = target.join("xtask");
    std::fs::create_dir_all(&script_dir)
        .with_context(|| format!("cannot create {}", script_dir.display()))?;
    let script = TempFile(script_dir.join(format!("vm-{}.sh", std::process::id())));
    let text = guest_script(&cwd, &env, &spec.cmd)?;
    std::fs::File::create(&script.0)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", script.0.display()))?;
    let script_path = script.0.to_str().context("target directory is not UTF-8")?;

    let mut cmd = Command::new(&vng);
    cmd.arg("--run")
        .arg(&kernel)
        .args(["--disable-kvm", "--force-9p", "--user", "root"])
        .args(["--memory", &spec.memory])
        .args(["--cpus", &spec.cpus.to_string()])
        .arg("--rwdir")
        .arg(&target);
    for d in &spec.rwdirs {
        let d = d
            .canonicalize()
            .with_context(|| format!("--rwdir {}", d.display()))?;
        cmd.arg("--rwdir").arg(d);
    }
    cmd.arg("--exec")
        .arg(format!("sh {}", sh_quote(script_path)))
        .current_dir(&cwd);
    // vng runs virtme-run from $PATH.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut new_path = OsString::from(Path::new(setup::VENV).join("bin"));
    new_path.push(":");
    new_path.push(path);
    cmd.env("PATH", new_path);

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
