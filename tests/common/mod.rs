//! Shared by the host and VM test binaries: running the `ccctl` binary,
//! reading kernel state, and guards that leave the machine as they found it.
#![allow(dead_code)]

pub mod atomic;
pub mod bbr_phases;
pub mod bbr_v1_gains;
#[path = "../../xtask/src/bpf_object.rs"]
pub mod bpf_object;
pub mod catalogue;
pub mod dstar;
pub mod equivalence;
pub mod fleet;
pub mod flows;
pub mod ipv6;
pub mod lab;
pub mod lifecycle;
pub mod modest;
pub mod modest_wmax;
pub mod outcomes;
pub mod patched;
pub mod path;
pub mod policy;
pub mod policy_judge;
pub mod reproduce;
pub mod shard;
pub mod starved;
pub mod tracing;
pub mod tune;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The ccctl binary under test: `CCCTL_BIN` (set by `cargo xtask test`), else
/// the workspace's debug build.
pub fn ccctl_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CCCTL_BIN") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/ccctl")
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "ccctl failed:\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    pub fn failed_with(self, needles: &[&str]) -> Run {
        assert_ne!(
            self.code, 0,
            "ccctl should have failed; stdout: {}",
            self.stdout
        );
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "stderr lacks {n:?}:\n{}",
                self.stderr
            );
        }
        self
    }
}

/// `CCCTL_TEST_OBJECT`: `ALGO=FILE[,ALGO=FILE...]` (ALGO a ccctl or kernel
/// name): every `ccctl load ALGO` a test runs loads ALGO from FILE
/// (`--object FILE`) instead of ccctl's built-in object. `cargo xtask
/// mutants` sets it to run a test against a deliberately wrong build.
pub const ENV_TEST_OBJECT: &str = "CCCTL_TEST_OBJECT";

/// The object file `CCCTL_TEST_OBJECT` names for `algo` (any of its names).
fn test_object_for(algo: &str) -> Option<String> {
    let spec = std::env::var(ENV_TEST_OBJECT).ok()?;
    let kernel_name = ccctl_core::registry::find(algo).ok()?.kernel_name;
    spec.split(',').find_map(|item| {
        let (name, file) = item.split_once('=')?;
        let named = ccctl_core::registry::find(name.trim())
            .unwrap_or_else(|_| panic!("{ENV_TEST_OBJECT} names an unknown algorithm {name:?}"));
        (named.kernel_name == kernel_name).then(|| file.trim().to_string())
    })
}

/// Run ccctl with arguments and extra environment.
pub fn ccctl_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(ccctl_bin());
    cmd.args(args);
    let object = match args {
        ["load", algo, ..] if !args.contains(&"--object") => test_object_for(algo),
        _ => None,
    };
    if let Some(file) = &object {
        cmd.args(["--object", file]);
    }
    // Policy changes are recorded here, not in the machine's own log.
    cmd.env("CCCTL_AUDIT", test_audit_log());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let run = Run::from(cmd.output().expect("running ccctl"));
    if let (Some(file), 0) = (&object, run.code) {
        // `cargo xtask mutants` requires this line: the object was used.
        println!("ccctl-tests: {} loaded from {file}", args[1]);
    }
    run
}

/// Where the tests' policy changes are audited (not /var/lib/ccctl).
pub fn test_audit_log() -> PathBuf {
    std::env::temp_dir().join(format!("ccctl-test-audit-{}.jsonl", std::process::id()))
}

pub fn ccctl(args: &[&str]) -> Run {
    ccctl_env(args, &[])
}

pub fn available() -> Vec<String> {
    fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .expect("reading tcp_available_congestion_control")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

pub fn registered(kernel_name: &str) -> bool {
    available().iter().any(|n| n == kernel_name)
}

pub fn default_cc() -> String {
    fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("reading tcp_congestion_control")
        .trim()
        .to_string()
}

pub fn set_default_cc(name: &str) {
    fs::write("/proc/sys/net/ipv4/tcp_congestion_control", name)
        .expect("writing tcp_congestion_control");
}

pub fn pin_root() -> PathBuf {
    PathBuf::from("/sys/fs/bpf/ccctl")
}

/// Everything the kernel and bpffs say about our state, to prove a failed
/// command changed nothing.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    available: Vec<String>,
    default: String,
    pins: Vec<String>,
}

pub fn snapshot() -> Snapshot {
    let mut pins = Vec::new();
    if let Ok(rd) = fs::read_dir(pin_root()) {
        for e in rd.flatten() {
            pins.push(e.file_name().to_string_lossy().into_owned());
            if let Ok(sub) = fs::read_dir(e.path()) {
                pins.extend(sub.flatten().map(|s| {
                    format!(
                        "{}/{}",
                        e.file_name().to_string_lossy(),
                        s.file_name().to_string_lossy()
                    )
                }));
            }
        }
    }
    pins.sort();
    Snapshot {
        available: available(),
        default: default_cc(),
        pins,
    }
}

/// Mount bpffs if this machine (or VM) has not; tests need it like users do.
pub fn ensure_bpffs() {
    let mounted = fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf") && l.contains(" bpf "))
        })
        .unwrap_or(false);
    if !mounted {
        let st = Command::new("mount")
            .args(["-t", "bpf", "bpf", "/sys/fs/bpf"])
            .status()
            .expect("mount bpffs");
        assert!(st.success(), "mounting bpffs failed");
    }
}

/// Unloads everything and restores the default congestion control when a
/// test ends, pass or fail.
pub struct Clean {
    default: String,
}

impl Clean {
    pub fn new() -> Clean {
        ensure_bpffs();
        let _ = ccctl(&["unload", "--all"]);
        Clean {
            default: default_cc(),
        }
    }
}

impl Drop for Clean {
    fn drop(&mut self) {
        let _ = ccctl(&["unload", "--all"]);
        if default_cc() != self.default && registered(&self.default) {
            set_default_cc(&self.default);
        }
    }
}

/// A raw BTF blob holding a single `int` type: a kernel that has BTF but no
/// BPF struct_ops at all.
pub fn btf_without_struct_ops(dir: &Path) -> PathBuf {
    let strings = b"\0int\0";
    let mut types = Vec::new();
    types.extend_from_slice(&1u32.to_le_bytes()); // name_off -> "int"
    types.extend_from_slice(&(1u32 << 24).to_le_bytes()); // kind INT, vlen 0
    types.extend_from_slice(&4u32.to_le_bytes()); // size
    types.extend_from_slice(&32u32.to_le_bytes()); // encoding 0, offset 0, 32 bits
    let mut btf = Vec::new();
    btf.extend_from_slice(&0xeb9fu16.to_le_bytes()); // magic
    btf.push(1); // version
    btf.push(0); // flags
    btf.extend_from_slice(&24u32.to_le_bytes()); // hdr_len
    btf.extend_from_slice(&0u32.to_le_bytes()); // type_off
    btf.extend_from_slice(&(types.len() as u32).to_le_bytes()); // type_len
    btf.extend_from_slice(&(types.len() as u32).to_le_bytes()); // str_off
    btf.extend_from_slice(&(strings.len() as u32).to_le_bytes()); // str_len
    btf.extend_from_slice(&types);
    btf.extend_from_slice(strings);
    let path = dir.join("no_struct_ops.btf");
    fs::write(&path, btf).expect("writing BTF fixture");
    path
}

/// A fresh directory for one test, removed (with all in it) when the
/// returned guard drops, also when the test fails: keep the guard bound
/// for as long as the directory is used (`let dir = tempdir(..)`, never
/// `tempdir(..).join(..)`). `CCCTL_KEEP_SCRATCH=1` keeps it for a look.
pub fn tempdir(tag: &str) -> ccctl_sys::ScratchDir {
    ccctl_sys::scratch_dir(&format!("test-{tag}")).expect("creating temp dir")
}

/// A process a test started (ccctl trace, lab, daemon): killed with
/// SIGKILL and reaped when the test ends without having waited for it, so
/// a failed assertion leaves no process behind (nor a pipe held open).
pub struct Spawned(Option<std::process::Child>);

impl Spawned {
    pub fn new(child: std::process::Child) -> Spawned {
        Spawned(Some(child))
    }

    /// The child itself, no longer killed on drop.
    pub fn take(mut self) -> std::process::Child {
        self.0
            .take()
            .expect("a Spawned always holds its child until taken")
    }
}

impl std::ops::Deref for Spawned {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        self.0
            .as_ref()
            .expect("a Spawned always holds its child until taken")
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0
            .as_mut()
            .expect("a Spawned always holds its child until taken")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
