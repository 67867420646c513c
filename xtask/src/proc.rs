//! Child processes: process groups that never outlive xtask, signal
//! forwarding, and output that is streamed to ours while also captured.

pub use ccctl_sys::cpu::CpuTicks;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::{Pid, Signal};

/// Exit code used when xtask was interrupted (SIGINT/SIGTERM/SIGHUP).
pub const EXIT_INTERRUPTED: i32 = 130;

const SLOTS: usize = 16;
static GROUPS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];

/// SIGINT/SIGTERM/SIGHUP (ccctl-sys's signal policy) terminate every
/// registered process group and let xtask unwind normally so that `Drop`
/// guards clean up (qemu, iperf3, network namespaces).
pub fn install_signal_handlers() {
    let res = ccctl_sys::signals::on_ending(|_| {
        for slot in &GROUPS {
            let pgid = slot.load(Ordering::SeqCst);
            if pgid > 0 {
                ccctl_sys::signals::kill_group(pgid, rustix::process::Signal::TERM);
            }
        }
    });
    if let Err(e) = res {
        eprintln!("xtask: cannot watch signals: {e}");
    }
}

pub fn interrupted() -> bool {
    ccctl_sys::signals::received().is_some()
}

pub fn bail_if_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// A child running in its own process group. Dropping it terminates the
/// whole group (SIGTERM, then SIGKILL after a grace period), so nothing it
/// started (e.g. qemu under vng) is left behind on error or Ctrl-C.
pub struct Group {
    child: Child,
    pgid: i32,
    slot: Option<usize>,
    name: String,
}

impl Group {
    pub fn spawn(cmd: &mut Command) -> Result<Group> {
        use std::os::unix::process::CommandExt;
        let name = cmd.get_program().to_string_lossy().into_owned();
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let pgid = child.id() as i32;
        let slot = GROUPS.iter().position(|s| {
            s.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        let group = Group {
            child,
            pgid,
            slot,
            name,
        };
        if interrupted() {
            group.signal(Some(Signal::TERM));
        }
        Ok(group)
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Sends `sig` to the group (`None`: only checks that it still exists).
    fn signal(&self, sig: Option<Signal>) -> bool {
        let Some(pgid) = Pid::from_raw(self.pgid) else {
            return false;
        };
        match sig {
            Some(sig) => rustix::process::kill_process_group(pgid, sig).is_ok(),
            None => rustix::process::test_kill_process_group(pgid).is_ok(),
        }
    }

    /// Wait for the group leader; on timeout the group is killed and an
    /// error returned.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(st) = self
                .child
                .try_wait()
                .with_context(|| format!("waiting for {}", self.name))?
            {
                return Ok(st);
            }
            if let Some(t) = timeout {
                if start.elapsed() > t {
                    self.terminate();
                    bail!(
                        "{} timed out after {} s and was killed",
                        self.name,
                        t.as_secs()
                    );
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Terminate every process of the group: SIGTERM, up to 3 s grace, SIGKILL.
    pub fn terminate(&mut self) {
        if self.signal(Some(Signal::TERM)) {
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                let _ = self.child.try_wait();
                if !self.signal(None) {
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
            self.signal(Some(Signal::KILL));
        }
        let _ = self.child.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.terminate();
        if let Some(i) = self.slot {
            GROUPS[i].store(0, Ordering::SeqCst);
        }
    }
}

/// What a tee'd run produced.
pub struct Teed {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Called with each chunk of stderr as it arrives (e.g. to spot a marker).
pub type ChunkHook = Box<dyn FnMut(&[u8]) + Send>;

/// Run `cmd` in its own process group with stdin from /dev/null, stream its
/// stdout/stderr to ours and capture both. Pipes (rather than inheriting our
/// descriptors) also matter for qemu: it reopens /proc/self/fd/1, which on a
/// regular file would start writing at offset 0 over earlier output.
pub fn run_tee(
    cmd: &mut Command,
    timeout: Option<Duration>,
    stderr_hook: Option<ChunkHook>,
) -> Result<Teed> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut group = Group::spawn(cmd)?;
    let out = group.child_mut().stdout.take().context("no stdout pipe")?;
    let err = group.child_mut().stderr.take().context("no stderr pipe")?;
    let t_out = thread::spawn(move || pump(out, std::io::stdout(), None));
    let t_err = thread::spawn(move || pump(err, std::io::stderr(), stderr_hook));
    let status = group.wait(timeout);
    // Make sure no straggler keeps the pipes open, then collect output.
    group.terminate();
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    let status = status?;
    Ok(Teed {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

fn pump(mut from: impl Read, mut to: impl Write, mut hook: Option<ChunkHook>) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                if let Some(h) = hook.as_mut() {
                    h(&buf[..n]);
                }
                all.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    all
}

/// Exit code of a finished process, 128+signal when killed by a signal.
pub fn exit_code(st: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run a command in the foreground with inherited stdio; fail unless it exits 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let what = describe(cmd);
    let st = cmd
        .status()
        .with_context(|| format!("cannot run `{what}`"))?;
    bail_if_interrupted()?;
    if !st.success() {
        bail!("`{what}` failed with exit code {}", exit_code(&st));
    }
    Ok(())
}

/// Run a command, return its stdout; stderr is inherited. Fails unless exit 0.
pub fn capture(cmd: &mut Command) -> Result<String> {
    let what = describe(cmd);
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run `{what}`"))?;
    bail_if_interrupted()?;
    if !out.status.success() {
        bail!("`{what}` failed with exit code {}", exit_code(&out.status));
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{what}` printed non-UTF-8"))
}

/// `cargo` as invoked by the user (cargo sets $CARGO for `cargo run`).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace root (parent of the xtask crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

/// The workspace's target directory, as cargo itself resolves it.
pub fn target_dir() -> Result<PathBuf> {
    let out = capture(
        cargo()
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(workspace_root()),
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&out).context("cannot parse `cargo metadata` output")?;
    let dir = v["target_directory"]
        .as_str()
        .context("`cargo metadata` has no target_directory")?;
    Ok(PathBuf::from(dir))
}

/// The JSON messages of `cargo <args> --message-format=json-render-diagnostics`
/// (a build); diagnostics go to stderr as usual.
fn cargo_messages(args: &[&str]) -> Result<Vec<serde_json::Value>> {
    let out = capture(
        cargo()
            .args(args)
            .arg("--message-format=json-render-diagnostics")
            .current_dir(workspace_root()),
    )?;
    Ok(out
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

/// The OUT_DIR of `package`'s build script in `cargo <args>` (a build;
/// cargo reports it for fresh builds too).
pub fn cargo_build_script_out_dir(args: &[&str], package: &str) -> Result<PathBuf> {
    cargo_messages(args)?
        .into_iter()
        .filter(|v| v["reason"] == "build-script-executed")
        .filter(|v| {
            v["package_id"]
                .as_str()
                .is_some_and(|id| id.contains(&format!("#{package}@")))
        })
        .find_map(|v| v["out_dir"].as_str().map(PathBuf::from))
        .with_context(|| {
            format!(
                "`cargo {}` reported no build script output of {package}",
                args.join(" ")
            )
        })
}

/// Build with `--message-format=json-render-diagnostics` and return the
/// executable of the artifact for which `pick(target_name, kinds, is_test)`
/// holds. Diagnostics go to stderr as usual.
pub fn cargo_build_json(
    args: &[&str],
    pick: impl Fn(&str, &[String], bool) -> bool,
) -> Result<PathBuf> {
    let mut found = None;
    for v in cargo_messages(args)? {
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else {
            continue;
        };
        let name = v["target"]["name"].as_str().unwrap_or_default();
        let kinds: Vec<String> = v["target"]["kind"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|k| k.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let is_test = v["profile"]["test"].as_bool().unwrap_or(false);
        if pick(name, &kinds, is_test) {
            found = Some(PathBuf::from(exe));
        }
    }
    found.with_context(|| format!("`cargo {}` produced no matching executable", args.join(" ")))
}

/// `/proc/stat`'s CPU ticks now ([`CpuTicks`]).
pub fn cpu_ticks_now() -> Result<CpuTicks> {
    CpuTicks::now().context("reading /proc/stat")
}
