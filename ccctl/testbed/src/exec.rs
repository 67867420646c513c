//! Running commands and processes, on the host or inside a namespace.
//!
//! Everything the testbed spawns goes through here: one-shot commands
//! ([`run`], [`ns_exec`]), `ip`/`tc` scripts run as one process each
//! ([`run_batch`]: spawning, not the commands themselves, is what makes a
//! testbed slow to build in the TCG VM, ~300 ms per spawn there), and
//! long-running processes inside a namespace ([`NsProcess`], killed and
//! reaped on drop). A failure names the command line (for a batch, its
//! failing line) and the tool's stderr.
use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{Error, Result};

fn cmd_string(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn status_string(status: &ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exit code {c}"),
        None => format!("{status}"),
    }
}

/// Runs `cmd` to completion; a non-zero exit becomes [`Error::Command`]
/// naming the command and its stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let s = cmd_string(cmd);
    tracing::debug!(cmd = %s, "run");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            cmd: s.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: s,
            status: status_string(&out.status),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// `ip netns exec <ns> <argv...>` as a [`Command`] (not yet run).
pub fn ns_command<S: AsRef<str>>(ns: &str, argv: &[S]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    c.args(argv.iter().map(|a| a.as_ref()));
    c
}

/// Runs `argv` inside namespace `ns` and returns its output (error on non-zero exit).
pub fn ns_exec<S: AsRef<str>>(ns: &str, argv: &[S]) -> Result<Output> {
    run(&mut ns_command(ns, argv))
}

/// Spawns `argv` inside namespace `ns` with stdout/stderr piped.
/// `ip netns exec` execs the command, so the child's pid is the command's pid.
pub fn ns_spawn<S: AsRef<str>>(ns: &str, argv: &[S]) -> Result<NsProcess> {
    ns_spawn_stdio(ns, argv, Stdio::piped(), Stdio::piped())
}

/// [`ns_spawn`] with explicit stdout/stderr (e.g. `Stdio::null()` for a
/// long-running chatty process nobody reads).
pub fn ns_spawn_stdio<S: AsRef<str>>(
    ns: &str,
    argv: &[S],
    stdout: Stdio,
    stderr: Stdio,
) -> Result<NsProcess> {
    let mut c = ns_command(ns, argv);
    let s = cmd_string(&c);
    tracing::debug!(cmd = %s, "spawn");
    let child = c
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|source| Error::Spawn {
            cmd: s.clone(),
            source,
        })?;
    Ok(NsProcess {
        child: Some(child),
        cmd: s,
    })
}

/// `ip ARGS…` (tests only: the testbed batches its `ip` commands).
#[cfg(test)]
pub(super) fn ip<S: AsRef<str>>(args: &[S]) -> Result<Output> {
    let mut c = Command::new("ip");
    c.args(args.iter().map(|a| a.as_ref()));
    run(&mut c)
}

/// Runs `program args… -batch -` with `lines` as its script on stdin: one
/// process for any number of `ip` or `tc` commands. Spawning processes, not
/// the commands themselves, is what makes a testbed slow to build in the
/// TCG VM (~300 ms per spawn there).
///
/// Without `-force` in `args` the tool stops at the first failing line; a
/// non-zero exit becomes [`Error::Command`] whose `cmd` names the failing
/// line, taken from the tool's `Command failed -:N` report.
pub(super) fn run_batch(program: &str, args: &[&str], lines: &[String]) -> Result<Output> {
    let mut c = Command::new(program);
    c.args(args).args(["-batch", "-"]);
    let s = cmd_string(&c);
    tracing::debug!(cmd = %s, script = %lines.join("; "), "run batch");
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            cmd: s.clone(),
            source,
        })?;
    let mut script = lines.join("\n");
    script.push('\n');
    // Written from another thread, so a tool that fills its stderr pipe
    // before reading all of its script cannot deadlock us.
    let stdin = child.stdin.take();
    let writer = thread::spawn(move || match stdin {
        Some(mut w) => w.write_all(script.as_bytes()),
        None => Ok(()),
    });
    let out = child.wait_with_output().map_err(|source| Error::Io {
        what: format!("waiting for `{s}`"),
        source,
    })?;
    let written = writer.join();
    if !out.status.success() {
        // A failed tool may have quit before reading everything: the
        // writer's EPIPE says nothing more than the exit status.
        let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let cmd = match failed_batch_line(&stderr).and_then(|n| Some((n, lines.get(n - 1)?))) {
            Some((n, line)) => {
                // Said by `cmd` now, with the line itself.
                stderr = stderr
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("Command failed "))
                    .collect::<Vec<_>>()
                    .join("\n");
                format!("{s} (line {n}: {line})")
            }
            None => s,
        };
        return Err(Error::Command {
            cmd,
            status: status_string(&out.status),
            stderr,
        });
    }
    match written {
        Ok(Ok(())) => Ok(out),
        Ok(Err(source)) => Err(Error::Io {
            what: format!("writing the script of `{s}`"),
            source,
        }),
        Err(_) => Err(Error::Io {
            what: format!("writing the script of `{s}`"),
            source: std::io::Error::other("writer thread panicked"),
        }),
    }
}

/// The (1-based) script line of the first `Command failed -:N` that
/// `ip -batch` / `tc -batch` printed.
fn failed_batch_line(stderr: &str) -> Option<usize> {
    stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Command failed "))
        .find_map(|rest| rest.rsplit_once(':')?.1.trim().parse().ok())
        .filter(|&n| n > 0)
}

/// A process spawned inside a namespace. Dropping it kills (SIGKILL) and
/// reaps it if it is still running, so no zombie or stray process survives.
#[derive(Debug)]
pub struct NsProcess {
    child: Option<Child>,
    cmd: String,
}

impl NsProcess {
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The command line, for error messages.
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present until consumed")
    }

    /// `Some(status)` if the process has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let cmd = self.cmd.clone();
        self.child_mut().try_wait().map_err(|source| Error::Io {
            what: format!("waiting for `{cmd}`"),
            source,
        })
    }

    pub fn kill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for exit (killing it after `timeout`, if given) and returns its
    /// output whatever the exit status; pipes are drained concurrently.
    pub fn wait_output(mut self, timeout: Option<Duration>) -> Result<Output> {
        let mut child = self.child.take().expect("child present");
        let mut so = child.stdout.take();
        let mut se = child.stderr.take();
        let t_out = thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(s) = so.as_mut() {
                let _ = s.read_to_end(&mut b);
            }
            b
        });
        let t_err = thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(s) = se.as_mut() {
                let _ = s.read_to_end(&mut b);
            }
            b
        });
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(source) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Io {
                        what: format!("waiting for `{}`", self.cmd),
                        source,
                    });
                }
            }
            if let Some(t) = timeout {
                if start.elapsed() > t {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Timeout {
                        what: format!("`{}`", self.cmd),
                        timeout: t,
                    });
                }
            }
            thread::sleep(Duration::from_millis(20));
        };
        let stdout = t_out.join().unwrap_or_default();
        let stderr = t_err.join().unwrap_or_default();
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    /// Like [`wait_output`](Self::wait_output) but a non-zero exit is an [`Error::Command`].
    pub fn wait_success(self, timeout: Option<Duration>) -> Result<Output> {
        let cmd = self.cmd.clone();
        let out = self.wait_output(timeout)?;
        if !out.status.success() {
            return Err(Error::Command {
                cmd,
                status: status_string(&out.status),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(out)
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `tc -n NS -batch -` with `lines` on a scoped thread, so that it
/// overlaps with other work (namespace set-up, another namespace's `tc`).
pub(super) fn spawn_tc_batch<'scope, 'env>(
    scope: &'scope thread::Scope<'scope, 'env>,
    ns: &'env str,
    lines: &'env [String],
) -> Result<thread::ScopedJoinHandle<'scope, Result<Output>>> {
    thread::Builder::new()
        .name("ccctl-tc".into())
        .spawn_scoped(scope, move || run_batch("tc", &["-n", ns], lines))
        .map_err(|source| Error::Io {
            what: format!("starting a thread for `tc -n {ns} -batch -`"),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_failure_line() {
        let e = "Error: ...\nCommand failed -:3\n";
        assert_eq!(failed_batch_line(e), Some(3));
        assert_eq!(failed_batch_line("RTNETLINK answers: File exists"), None);
    }
}
