//! `cargo xtask test`: the one command that runs every test.
//!
//! Phases: build ccctl; host tests (the unit tests of every ccctl crate,
//! [`UNIT_TEST_PACKAGES`], then the `host`
//! integration tests); VM tests (the `vm` integration test binary, run in
//! one VM boot). Every libtest "test result:" line is counted and the run
//! ends with `xtask: N passed, M failed`. A phase that cannot run (build
//! error, VM that does not boot) counts as one failure: never a skip.

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

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Run only the host phases
    #[arg(long, conflicts_with = "vm_only")]
    host_only: bool,
    /// Run only the VM phase
    #[arg(long)]
    vm_only: bool,
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
        }
    }

    fn broken(name: &'static str, why: String) -> Phase {
        Phase {
            name,
            counts: Counts::default(),
            broken: Some(why),
        }
    }
}

fn cargo_test(name: &'static str, args: &[&str], ccctl: &Path) -> Result<Phase> {
    eprintln!("xtask test: {name}: cargo {}", args.join(" "));
    let teed = proc::run_tee(
        proc::cargo()
            .args(args)
            .env("CCCTL_BIN", ccctl)
            .current_dir(proc::workspace_root()),
        None,
        None,
    )?;
    proc::bail_if_interrupted()?;
    let all = format!("{}\n{}", teed.stdout, teed.stderr);
    Ok(Phase::from_run(name, proc::exit_code(&teed.status), &all))
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
                let host = (|| -> Result<()> {
                    let mut unit = vec!["test"];
                    for p in UNIT_TEST_PACKAGES {
                        unit.extend(["-p", p]);
                    }
                    phases.push(cargo_test("ccctl unit tests", &unit, &ccctl)?);
                    phases.push(cargo_test(
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
                    )?);
                    Ok(())
                })();
                // The tests restore what they load, but not if they were killed
                // (Ctrl-C, a crash): leave no algorithm registered or pinned.
                let _ = std::process::Command::new(&ccctl)
                    .args(["unload", "--all"])
                    .status();
                host?;
            }
            if !args.host_only {
                phases.push(vm_phase(&ccctl)?);
            }
        }
    }

    let (mut passed, mut failed) = (0, 0);
    println!();
    for p in &phases {
        passed += p.counts.passed;
        failed += p.counts.failed;
        match &p.broken {
            None => println!(
                "xtask test: {}: {} passed, {} failed",
                p.name, p.counts.passed, p.counts.failed
            ),
            Some(why) => {
                // A phase that could not run counts as one failure.
                failed += 1;
                println!("xtask test: {}: FAILED TO RUN: {why}", p.name);
            }
        }
    }
    println!("xtask: {passed} passed, {failed} failed");
    Ok(if failed == 0 { 0 } else { 1 })
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
