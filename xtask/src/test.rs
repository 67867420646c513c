//! `cargo xtask test`: the one command that runs every test.
//!
//! Phases: build ccctl; host tests (the unit tests of every ccctl crate,
//! [`UNIT_TEST_PACKAGES`], xtask's own, then the `host` integration tests,
//! then the mutants: `cargo xtask mutants`, each a deliberately wrong
//! algorithm its killer test must fail); VM tests (the `vm` integration
//! test binary, run in one VM boot). Every libtest "test result:" line is
//! counted and the run ends with `xtask: N passed, M failed`. A phase that
//! cannot run (build error, VM that does not boot, a timeout) counts as one
//! failure: never a skip; so does a phase that passed fewer tests than its
//! floor in tests/FLOOR (tests that silently stopped running). The host
//! phases run with TMPDIR set to a directory of their own, which must be
//! empty when they end (a test that leaves a file behind fails the run).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use crate::{proc, vm};

/// The crates whose unit tests run first (`cargo test -p ...`).
const UNIT_TEST_PACKAGES: &[&str] = &[
    "ccctl-sys",
    "ccctl-vm",
    "ccctl-core",
    "ccctl-path",
    "ccctl-testbed",
    "ccctl-observe",
    "ccctl-lab",
    "ccctl",
];

/// Upper bound for the single VM boot running the VM tests.
const VM_TIMEOUT: Duration = Duration::from_secs(45 * 60);
/// Upper bounds of the host phases (builds included): a hung test fails
/// the phase instead of CI's whole budget. The host phase takes 22-25 min;
/// its timing tests retake attempts a starved machine spoiled
/// (tests/common/starved.rs), hence room above that.
const UNIT_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const HOST_TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// The committed floor: the least number of passed tests per phase.
const FLOOR_FILE: &str = "tests/FLOOR";

/// `tests/FLOOR`: lines `<phase name>: <least passed>`, `#` comments.
fn parse_floor(text: &str) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (name, count) = line
            .rsplit_once(':')
            .with_context(|| format!("{FLOOR_FILE}:{}: expected `phase: count`", n + 1))?;
        let count = count.trim().parse().with_context(|| {
            format!("{FLOOR_FILE}:{}: `{}` is not a count", n + 1, count.trim())
        })?;
        out.push((name.trim().to_string(), count));
    }
    Ok(out)
}

/// Marks every phase that passed fewer tests than its floor as broken.
fn apply_floor(phases: &mut [Phase], floor: &[(String, u64)]) {
    for p in phases.iter_mut() {
        let Some((_, least)) = floor.iter().find(|(n, _)| n == p.name) else {
            continue;
        };
        // Failed tests are already counted as failures; the floor catches
        // tests that no longer run at all (passed + failed below it).
        let ran = p.counts.passed + p.counts.failed;
        if p.broken.is_none() && ran < *least {
            p.broken = Some(format!(
                "{ran} ran ({} passed), fewer than the floor of {least} in {FLOOR_FILE}: tests \
                 stopped running (raise or lower the floor only with the tests themselves)",
                p.counts.passed
            ));
        }
    }
}

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Run only the host phases
    #[arg(long, conflicts_with = "vm_only")]
    host_only: bool,
    /// Run only the VM phase
    #[arg(long)]
    vm_only: bool,
}

/// The CPUs kept from halting for a timing phase (ccctl/sys/src/awake.rs),
/// unless `CCCTL_LET_CPUS_IDLE=1`; a refusal is printed and the phase runs
/// without them.
fn keep_cpus_awake() -> Option<ccctl_sys::awake::Awake> {
    use ccctl_sys::awake::LET_CPUS_IDLE_ENV;
    if ccctl_sys::awake::let_cpus_idle() {
        eprintln!("xtask test: {LET_CPUS_IDLE_ENV}=1: the CPUs may halt");
        return None;
    }
    match ccctl_sys::awake::Awake::start() {
        Ok(a) => {
            eprintln!(
                "xtask test: {} CPUs kept awake: {} ({LET_CPUS_IDLE_ENV}=1 to not)",
                a.cpus(),
                a.how()
            );
            Some(a)
        }
        Err(e) => {
            eprintln!("xtask test: CPUs not kept awake: {e:#}");
            None
        }
    }
}

#[derive(Default, Debug, PartialEq)]
struct Counts {
    passed: u64,
    failed: u64,
    results: u64,
}

/// Sum every libtest `test result: ok. N passed; M failed; ...` line.
fn count(output: &str) -> Counts {
    let mut c = Counts::default();
    for line in output.lines() {
        let Some(idx) = line.find("test result: ") else {
            continue;
        };
        let rest = &line[idx..];
        let Some((_, tail)) = rest.split_once(". ") else {
            continue;
        };
        let mut passed = None;
        let mut failed = None;
        for part in tail.split(';') {
            let mut it = part.split_whitespace();
            let (Some(n), Some(word)) = (it.next(), it.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match word {
                "passed" => passed = Some(n),
                "failed" => failed = Some(n),
                _ => {}
            }
        }
        if let (Some(p), Some(f)) = (passed, failed) {
            c.passed += p;
            c.failed += f;
            c.results += 1;
        }
    }
    c
}

struct Phase {
    name: &'static str,
    counts: Counts,
    /// Why the phase itself failed (beyond failed tests), if it did.
    broken: Option<String>,
    /// What failed, a line each, repeated in the run's last lines (CI
    /// shows a run's tail; the phase's own output may be far above it).
    failing: Vec<String>,
    /// The tests that passed (`test NAME ... ok` whole on one line).
    passed: BTreeSet<String>,
    /// The phase's wall time and the CPU time the hypervisor took from
    /// this machine meanwhile, if measured.
    load: Option<Load>,
}

/// What the machine did during a phase. Steal is the CPU time the
/// hypervisor gave to others while this machine wanted it (`/proc/stat`):
/// lab tests measure wall-clock behaviour, and a neighbour's load shows in
/// them as a slow path or late timers (a CI run on 2026-11-28 failed nine
/// host tests on their testbed guards, and all of them passed on the idle
/// machine right after), so each phase reports it beside its results.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Load {
    secs: f64,
    /// Steal over the phase, a share of all CPU time.
    steal: f64,
    /// The most steal in any minute of the phase, and when that minute
    /// started (seconds into the phase).
    worst_minute: f64,
    worst_minute_at: f64,
}

/// The load from samples (seconds since the start, steal ticks, all
/// ticks), taken about once a second.
fn load_of(samples: &[(f64, u64, u64)]) -> Option<Load> {
    let (first, last) = (samples.first()?, samples.last()?);
    let share = |a: &(f64, u64, u64), b: &(f64, u64, u64)| {
        let all = b.2.saturating_sub(a.2);
        (all > 0).then(|| b.1.saturating_sub(a.1) as f64 / all as f64)
    };
    let mut worst = (0.0, 0.0);
    for (i, a) in samples.iter().enumerate() {
        // The first sample at least 60 s later.
        let Some(b) = samples[i..].iter().find(|b| b.0 - a.0 >= 60.0) else {
            break;
        };
        if let Some(s) = share(a, b) {
            if s > worst.0 {
                worst = (s, a.0);
            }
        }
    }
    Some(Load {
        secs: last.0 - first.0,
        steal: share(first, last)?,
        worst_minute: worst.0,
        worst_minute_at: worst.1,
    })
}

/// Runs `phase` while a thread samples `/proc/stat` every second.
fn with_load(phase: impl FnOnce() -> Result<Phase>) -> Result<Phase> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut samples = Vec::new();
            loop {
                let done = stop.load(std::sync::atomic::Ordering::Relaxed);
                if let Ok(t) = proc::cpu_ticks_now() {
                    samples.push((start.elapsed().as_secs_f64(), t.steal, t.all));
                }
                if done {
                    return samples;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let result = phase();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.join().unwrap_or_default();
    result.map(|mut p| {
        p.load = load_of(&samples);
        p
    })
}

/// The names of libtest's passed tests. A line split by a child process's
/// output is not read: its test then counts as not seen here.
fn passed_tests(output: &str) -> BTreeSet<String> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... ok"))
        .map(str::to_string)
        .collect()
}

/// The names of libtest's failed tests (`test NAME ... FAILED`).
fn failed_tests(output: &str) -> Vec<String> {
    let mut names: Vec<String> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| match panic_tail(output, &n) {
            Some(why) => format!("{n}: {why}"),
            None => n,
        })
        .collect()
}

/// Lines of a failed test's panic message the summary repeats.
const PANIC_TAIL_LINES: usize = 6;
/// Characters of one such line.
const PANIC_LINE_CHARS: usize = 300;

/// The last lines of `test`'s panic message in libtest's `---- test stdout
/// ----` section: the summary comes last in a log, and a CI excerpt that keeps
/// a log's tail then still shows why each test failed (a backtrace after the
/// message would otherwise push it out).
fn panic_tail(output: &str, test: &str) -> Option<String> {
    let header = format!("---- {test} stdout ----");
    let section = &output[output.find(&header)? + header.len()..];
    let mut message = Vec::new();
    let mut inside = false;
    for line in section.lines() {
        if line.starts_with("---- ") || line == "failures:" {
            break;
        }
        // `thread 'name' panicked at` or, since Rust 1.88, `thread 'name'
        // (1234) panicked at`.
        if line.starts_with("thread '") && line.contains(" panicked at ") {
            inside = true;
            message.clear();
            continue;
        }
        if inside {
            if line.starts_with("stack backtrace:") || line.starts_with("note: ") {
                inside = false;
                continue;
            }
            if !line.trim().is_empty() {
                message.push(line.trim_end());
            }
        }
    }
    if message.is_empty() {
        return None;
    }
    let tail = &message[message.len().saturating_sub(PANIC_TAIL_LINES)..];
    Some(
        tail.iter()
            .map(|l| clip_chars(l, PANIC_LINE_CHARS))
            .collect::<Vec<_>>()
            .join(" | "),
    )
}

fn clip_chars(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

impl Phase {
    fn from_run(name: &'static str, code: i32, output: &str) -> Phase {
        let counts = count(output);
        let broken = if counts.results == 0 {
            Some(format!("no test result found (exit code {code})"))
        } else if code != 0 && counts.failed == 0 {
            Some(format!("exit code {code} without failed tests"))
        } else {
            None
        };
        Phase {
            name,
            counts,
            broken,
            failing: failed_tests(output),
            passed: passed_tests(output),
            load: None,
        }
    }

    fn broken(name: &'static str, why: String) -> Phase {
        Phase {
            name,
            counts: Counts::default(),
            broken: Some(why),
            failing: Vec::new(),
            passed: BTreeSet::new(),
            load: None,
        }
    }
}

fn cargo_test(name: &'static str, args: &[&str], ccctl: &Path, timeout: Duration) -> Result<Phase> {
    eprintln!("xtask test: {name}: cargo {}", args.join(" "));
    let teed = proc::run_tee(
        proc::cargo()
            .args(args)
            .env("CCCTL_BIN", ccctl)
            .current_dir(proc::workspace_root()),
        Some(timeout),
        None,
    );
    proc::bail_if_interrupted()?;
    let teed = match teed {
        Ok(t) => t,
        Err(e) => return Ok(Phase::broken(name, format!("{e:#}"))),
    };
    let all = format!("{}\n{}", teed.stdout, teed.stderr);
    Ok(Phase::from_run(name, proc::exit_code(&teed.status), &all))
}

/// The mutants: each killed is a pass, each not killed (survived, or the
/// run could not tell) a failure. `host_passed`: the host phase's passed
/// tests, which stand in for the killers' controls where the objects are
/// the same bytes.
fn mutants_phase(ccctl: &Path, host_passed: &BTreeSet<String>) -> Result<Phase> {
    const NAME: &str = "mutants";
    eprintln!("xtask test: {NAME}: cargo xtask mutants");
    let host =
        match proc::cargo_build_script_out_dir(&["build", "-p", "ccctl", "--bins"], "ccctl-core") {
            Ok(skeletons) => Some(crate::mutants::HostPhase {
                passed: host_passed,
                skeletons,
            }),
            Err(e) => {
                proc::bail_if_interrupted()?;
                eprintln!("xtask test: {NAME}: every control runs: {e:#}");
                None
            }
        };
    let rows = match crate::mutants::run(ccctl, None, host.as_ref()) {
        Ok(rows) => rows,
        Err(e) => {
            proc::bail_if_interrupted()?;
            return Ok(Phase::broken(NAME, format!("{e:#}")));
        }
    };
    let killed = rows
        .iter()
        .filter(|r| matches!(r.outcome, crate::mutants::Outcome::Killed(_)))
        .count() as u64;
    let failing = rows
        .iter()
        .filter_map(|r| match &r.outcome {
            crate::mutants::Outcome::Killed(_) => None,
            crate::mutants::Outcome::Survived => {
                Some(format!("{} SURVIVED {}", r.mutant.name, r.mutant.killer))
            }
            crate::mutants::Outcome::Error(why) => Some(format!(
                "{} ERROR against {}: {}",
                r.mutant.name,
                r.mutant.killer,
                crate::mutants::clip(why, 400)
            )),
        })
        .collect();
    Ok(Phase {
        name: NAME,
        counts: Counts {
            passed: killed,
            failed: rows.len() as u64 - killed,
            results: 1,
        },
        broken: None,
        failing,
        passed: BTreeSet::new(),
        load: None,
    })
}

/// The host phases' temp dir after they ran: one pass if empty, else the
/// phase fails naming what was left.
fn left_in_temp_dir(dir: &Path) -> Phase {
    const NAME: &str = "temp dir left empty";
    let left: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => return Phase::broken(NAME, format!("reading {}: {e}", dir.display())),
    };
    if left.is_empty() {
        return Phase {
            name: NAME,
            counts: Counts {
                passed: 1,
                failed: 0,
                results: 1,
            },
            broken: None,
            failing: Vec::new(),
            passed: BTreeSet::new(),
            load: None,
        };
    }
    let mut left = left;
    left.sort();
    Phase {
        name: NAME,
        counts: Counts {
            passed: 0,
            failed: 1,
            results: 1,
        },
        broken: None,
        failing: vec![format!(
            "{} entries left in the tests' TMPDIR: {}",
            left.len(),
            left.join(", ")
        )],
        passed: BTreeSet::new(),
        load: None,
    }
}

fn vm_phase(ccctl: &Path) -> Result<Phase> {
    const NAME: &str = "vm tests";
    eprintln!("xtask test: {NAME}: building the vm test binary");
    let exe = match proc::cargo_build_json(
        &["test", "-p", "ccctl-tests", "--test", "vm", "--no-run"],
        |name, kinds, is_test| name == "vm" && is_test && kinds.iter().any(|k| k == "test"),
    ) {
        Ok(exe) => exe,
        Err(e) => {
            proc::bail_if_interrupted()?;
            return Ok(Phase::broken(NAME, format!("{e:#}")));
        }
    };
    let spec = vm::VmSpec {
        kernel: None,
        memory: "2G".into(),
        cpus: 2,
        env: Vec::new(),
        rwdirs: Vec::new(),
        timeout: Some(VM_TIMEOUT),
        // The tests run ccctl hundreds of times. Executed from the host's
        // filesystem over 9p every start pages the binary in again (2-3 s
        // each under TCG); from a copy in the guest's tmpfs, 0.65 s.
        cmd: vec![
            "sh".into(),
            "-c".into(),
            r#"cp "$1" /run/ccctl-under-test && shift && CCCTL_BIN=/run/ccctl-under-test exec "$@""#.into(),
            "sh".into(),
            ccctl.display().to_string(),
            exe.display().to_string(),
            "--test-threads=1".into(),
            "--show-output".into(),
        ],
    };
    let out = match vm::run_in_vm(&spec) {
        Ok(out) => out,
        Err(e) => {
            proc::bail_if_interrupted()?;
            return Ok(Phase::broken(NAME, format!("{e:#}")));
        }
    };
    if !out.booted() {
        return Ok(Phase::broken(
            NAME,
            format!("the VM failed to boot or set up (exit code {})", out.code),
        ));
    }
    let all = format!("{}\n{}", out.stdout, out.stderr);
    Ok(Phase::from_run(NAME, out.code, &all))
}

pub fn main(args: TestArgs) -> Result<i32> {
    let mut phases = Vec::new();

    eprintln!("xtask test: building ccctl");
    let ccctl = proc::cargo_build_json(&["build", "-p", "ccctl", "--bins"], |name, kinds, _| {
        name == "ccctl" && kinds.iter().any(|k| k == "bin")
    })
    .and_then(|p| {
        p.canonicalize()
            .with_context(|| format!("cannot resolve {}", p.display()))
    });
    match ccctl {
        Err(e) => {
            proc::bail_if_interrupted()?;
            phases.push(Phase::broken("build ccctl", format!("{e:#}")));
        }
        Ok(ccctl) => {
            eprintln!("xtask test: CCCTL_BIN={}", ccctl.display());
            if !args.vm_only {
                // The host phases' temp files (every test, every ccctl they
                // start) go to one directory of this run, which must be
                // empty when they end: a test or a command that leaves a
                // file behind fails the run instead of filling /tmp.
                let scratch = ccctl_sys::scratch_dir("xtask-test")
                    .context("creating the host phases' temp dir")?;
                let tmpdir_before = std::env::var_os("TMPDIR");
                // Set while this process runs no other thread.
                std::env::set_var("TMPDIR", scratch.path());
                let host = (|| -> Result<()> {
                    // --no-fail-fast: one failing test binary must not hide
                    // the others' results (CI once counted 21 of 211).
                    let mut unit = vec!["test", "--no-fail-fast"];
                    for p in UNIT_TEST_PACKAGES {
                        unit.extend(["-p", p]);
                    }
                    phases.push(with_load(|| {
                        cargo_test("ccctl unit tests", &unit, &ccctl, UNIT_TIMEOUT)
                    })?);
                    phases.push(with_load(|| {
                        cargo_test(
                            "xtask unit tests",
                            &["test", "-p", "xtask"],
                            &ccctl,
                            UNIT_TIMEOUT,
                        )
                    })?);
                    let awake = keep_cpus_awake();
                    let host_tests = with_load(|| {
                        cargo_test(
                            "host tests",
                            &[
                                "test",
                                "-p",
                                "ccctl-tests",
                                "--test",
                                "host",
                                "--",
                                "--test-threads=1",
                                "--show-output",
                            ],
                            &ccctl,
                            HOST_TIMEOUT,
                        )
                    })?;
                    let host_passed = host_tests.passed.clone();
                    phases.push(host_tests);
                    phases.push(with_load(|| mutants_phase(&ccctl, &host_passed))?);
                    drop(awake);
                    Ok(())
                })();
                // The tests restore what they load, but not if they were killed
                // (Ctrl-C, a crash): leave no algorithm registered or pinned.
                let _ = std::process::Command::new(&ccctl)
                    .args(["unload", "--all"])
                    .status();
                match tmpdir_before {
                    Some(v) => std::env::set_var("TMPDIR", v),
                    None => std::env::remove_var("TMPDIR"),
                }
                host?;
                phases.push(left_in_temp_dir(scratch.path()));
            }
            if !args.host_only {
                let _awake = keep_cpus_awake();
                phases.push(with_load(|| vm_phase(&ccctl))?);
            }
        }
    }

    match std::fs::read_to_string(proc::workspace_root().join(FLOOR_FILE))
        .context(FLOOR_FILE)
        .and_then(|t| parse_floor(&t))
    {
        Ok(floor) => apply_floor(&mut phases, &floor),
        Err(e) => phases.push(Phase::broken("test floor", format!("{e:#}"))),
    }

    let (mut passed, mut failed) = (0, 0);
    println!();
    for p in &phases {
        passed += p.counts.passed;
        failed += p.counts.failed;
        match &p.broken {
            None => println!(
                "xtask test: {}: {} passed, {} failed{}",
                p.name,
                p.counts.passed,
                p.counts.failed,
                p.load.map(|l| describe_load(&l)).unwrap_or_default()
            ),
            Some(why) => {
                // A phase that could not run counts as one failure.
                failed += 1;
                println!("xtask test: {}: FAILED TO RUN: {why}", p.name);
            }
        }
        for f in &p.failing {
            println!("xtask test: {}: failed: {f}", p.name);
        }
    }
    println!("xtask: {passed} passed, {failed} failed");
    Ok(if failed == 0 { 0 } else { 1 })
}

/// ` (1291 s; CPU steal 0.4 %, at most 12.0 % in a minute, 840 s in)`.
fn describe_load(l: &Load) -> String {
    if l.secs < 60.0 || l.worst_minute <= l.steal {
        format!(" ({:.0} s; CPU steal {:.1} %)", l.secs, 100.0 * l.steal)
    } else {
        format!(
            " ({:.0} s; CPU steal {:.1} %, at most {:.1} % in a minute, {:.0} s in)",
            l.secs,
            100.0 * l.steal,
            100.0 * l.worst_minute,
            l.worst_minute_at
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_libtest_lines() {
        let out = "running 2 tests\n\
            test a ... ok\n\
            test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
            test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.2s\n\
            test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
            not a test result: line\n";
        assert_eq!(
            count(out),
            Counts {
                passed: 5,
                failed: 1,
                results: 3
            }
        );
    }

    #[test]
    fn a_file_left_in_the_temp_dir_fails_the_run() {
        let dir = ccctl_sys::scratch_dir("xtask-unit-left").unwrap();
        let clean = left_in_temp_dir(&dir);
        assert_eq!((clean.counts.passed, clean.counts.failed), (1, 0));
        std::fs::create_dir(dir.join("ccctl-test-x-1-0")).unwrap();
        std::fs::write(dir.join("ccctl-lab-ping-1-0.txt"), b"").unwrap();
        let dirty = left_in_temp_dir(&dir);
        assert_eq!((dirty.counts.passed, dirty.counts.failed), (0, 1));
        assert_eq!(
            dirty.failing,
            ["2 entries left in the tests' TMPDIR: ccctl-lab-ping-1-0.txt, ccctl-test-x-1-0"]
        );
    }

    /// Every crate in the build of `packages` (with `edges`, as `cargo tree
    /// -e` takes them) and the feature sets cargo enables on it.
    fn features_in(packages: &[&str], edges: &str) -> Features {
        let mut cmd = proc::cargo();
        cmd.current_dir(proc::workspace_root()).arg("tree");
        for p in packages {
            cmd.args(["-p", p]);
        }
        cmd.args(["-e", edges, "-f", "{p}|{f}", "--prefix", "none"]);
        let out = proc::capture(&mut cmd).expect("cargo tree");
        let mut sets = std::collections::BTreeMap::<_, std::collections::BTreeSet<_>>::new();
        for l in out.lines() {
            if let Some((p, f)) = l.replace(" (*)", "").split_once('|') {
                sets.entry(p.trim().to_string())
                    .or_default()
                    .insert(f.trim().to_string());
            }
        }
        sets
    }

    type Features = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

    /// The crates both builds share whose feature sets differ, one line each.
    fn feature_differences(ccctl: &Features, other: &Features, name: &str) -> Vec<String> {
        ccctl
            .iter()
            .filter_map(|(p, f)| {
                let g = other.get(p)?;
                (g != f).then(|| format!("{p}: ccctl {f:?}, {name} {g:?}"))
            })
            .collect()
    }

    /// `cargo xtask reproduce` builds its tool (an example of ccctl-lab,
    /// with ccctl-lab's dev-dependencies) in one cargo run with ccctl's
    /// binary, so every crate it shares with ccctl is built once: built on
    /// its own (`-p ccctl-lab`), tokio, regex and clap got fewer features
    /// and the polars chain compiled again, 2 min 29 s of CI's host phase.
    #[test]
    fn the_reproduction_tool_shares_ccctls_build() {
        let args = crate::reproduce::REPRODUCTION_TOOL_BUILD;
        let packages: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "-p")
            .map(|w| w[1])
            .collect();
        assert!(packages.contains(&"ccctl-lab"), "{args:?}");
        let ccctl = features_in(&["ccctl"], "normal,build");
        let tool = features_in(&packages, "normal,build,dev");
        let differ = feature_differences(&ccctl, &tool, "the tool");
        assert!(differ.is_empty(), "features differ:\n{}", differ.join("\n"));
        // The check sees the difference that cost the rebuild.
        let alone = features_in(&["ccctl-lab"], "normal,build,dev");
        let alone = feature_differences(&ccctl, &alone, "ccctl-lab alone");
        assert!(alone.iter().any(|d| d.starts_with("tokio ")), "{alone:?}");
    }

    /// ccctl and the test crate enable the same features on every crate
    /// they share, so `cargo xtask test` builds those once: a difference
    /// (tokio's io-util, regex's DFA) rebuilt polars and its dependents for
    /// the tests, 2 min 18 s of CI. tests/Cargo.toml lists them.
    #[test]
    fn the_tests_share_ccctls_build() {
        let ccctl = features_in(&["ccctl"], "normal,build");
        let tests = features_in(&["ccctl-tests"], "normal,build");
        let differ = feature_differences(&ccctl, &tests, "tests");
        assert!(
            differ.is_empty(),
            "features differ (add them to tests/Cargo.toml):\n{}",
            differ.join("\n")
        );
        assert!(ccctl.keys().any(|p| p.starts_with("polars ")), "{ccctl:?}");
    }

    #[test]
    fn steal_s_worst_minute_is_found() {
        // Two minutes at 200 ticks a second; 30 s of 50 % steal from 70 s.
        let mut samples = Vec::new();
        let (mut steal, mut all) = (0, 0);
        for t in 0..=120u64 {
            samples.push((t as f64, steal, all));
            all += 200;
            if (70..100).contains(&t) {
                steal += 100;
            }
        }
        let l = load_of(&samples).unwrap();
        assert_eq!(l.secs, 120.0);
        assert!((l.steal - 3000.0 / 24000.0).abs() < 1e-9, "{l:?}");
        assert!((l.worst_minute - 0.25).abs() < 1e-9, "{l:?}");
        assert!((40.0..=70.0).contains(&l.worst_minute_at), "{l:?}");
        assert!(describe_load(&l).contains("at most 25.0 % in a minute"));
        assert_eq!(load_of(&[]), None);
    }

    #[test]
    fn passed_tests_are_read_only_from_whole_lines() {
        let out = "test a::one ... ok\n\
            test a::two ... FAILED\n\
            test a::three ... ccctl lab: something\n\
            ok\n\
            test result: ok. 2 passed; 1 failed; 0 ignored\n";
        let passed = passed_tests(out);
        assert_eq!(passed.into_iter().collect::<Vec<_>>(), ["a::one"]);
    }

    #[test]
    fn failed_tests_are_named() {
        let out = "test a::b ... ok\n\
            test c::d ... FAILED\n\
            failures:\n    c::d\n\
            test e ... FAILED\n\
            test result: FAILED. 1 passed; 2 failed; 0 ignored\n";
        let p = Phase::from_run("host tests", 101, out);
        assert_eq!(p.failing, ["c::d", "e"]);
        assert!(p.broken.is_none());
    }

    #[test]
    fn a_failed_tests_panic_message_tail_is_repeated() {
        let out = "test c::d ... FAILED\n\
            test e ... FAILED\n\
            \n\
            failures:\n\
            \n\
            ---- c::d stdout ----\n\
            some output\n\
            \n\
            thread 'c::d' (28445) panicked at tests/x.rs:3:5:\n\
            table row 1\n\
            failed lines:\n\
            cwnd outside [4, 4]: [7]\n\
            stack backtrace:\n   0: foo\n\
            note: Some details are omitted\n\
            \n\
            ---- e stdout ----\n\
            no panic here\n\
            \n\
            failures:\n    c::d\n    e\n\
            test result: FAILED. 0 passed; 2 failed; 0 ignored\n";
        let p = Phase::from_run("host tests", 101, out);
        assert_eq!(
            p.failing,
            [
                "c::d: table row 1 | failed lines: | cwnd outside [4, 4]: [7]",
                "e"
            ]
        );
    }

    #[test]
    fn floor_breaks_a_phase_that_ran_fewer_tests() {
        let floor = parse_floor("# least passed\nhost tests: 40\nmutants: 12 # all\n")
            .expect("valid floor");
        assert_eq!(floor, [("host tests".into(), 40), ("mutants".into(), 12)]);
        let mut phases = vec![
            Phase::from_run(
                "host tests",
                0,
                "test result: ok. 39 passed; 0 failed; 0 ignored",
            ),
            Phase::from_run(
                "mutants",
                0,
                "test result: ok. 12 passed; 0 failed; 0 ignored",
            ),
            Phase::from_run(
                "vm tests",
                0,
                "test result: ok. 1 passed; 0 failed; 0 ignored",
            ),
        ];
        apply_floor(&mut phases, &floor);
        assert!(phases[0]
            .broken
            .as_deref()
            .is_some_and(|b| b.contains("floor of 40")));
        assert!(phases[1].broken.is_none());
        assert!(phases[2].broken.is_none(), "no floor for it");
        // A failed test is a failure already, not a test that stopped running.
        let mut one_failed = vec![Phase::from_run(
            "mutants",
            1,
            "test result: FAILED. 11 passed; 1 failed; 0 ignored",
        )];
        apply_floor(&mut one_failed, &floor);
        assert!(one_failed[0].broken.is_none());
        assert!(parse_floor("host tests forty").is_err());
        assert!(parse_floor("host tests: many").is_err());
    }

    #[test]
    fn the_committed_floor_names_real_phases() {
        let text = std::fs::read_to_string(proc::workspace_root().join(FLOOR_FILE))
            .expect("tests/FLOOR is committed");
        let floor = parse_floor(&text).expect("tests/FLOOR parses");
        for (name, least) in &floor {
            assert!(
                [
                    "ccctl unit tests",
                    "xtask unit tests",
                    "host tests",
                    "mutants",
                    "vm tests"
                ]
                .contains(&name.as_str()),
                "unknown phase {name} in tests/FLOOR"
            );
            assert!(*least > 0, "{name}: a floor of 0 checks nothing");
        }
        assert_eq!(floor.len(), 5, "every phase has a floor");
    }

    #[test]
    fn broken_phase_detection() {
        assert!(Phase::from_run("x", 101, "error: could not compile")
            .broken
            .is_some());
        let ok = "test result: ok. 1 passed; 0 failed; 0 ignored";
        assert!(Phase::from_run("x", 0, ok).broken.is_none());
        assert!(Phase::from_run("x", 1, ok).broken.is_some());
        let failed = "test result: FAILED. 1 passed; 1 failed; 0 ignored";
        assert!(Phase::from_run("x", 101, failed).broken.is_none());
    }
}
