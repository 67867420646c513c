//! `cargo xtask mutants`: every algorithm's tests proven by deliberately
//! wrong implementations (issue 27).
//!
//! Each mutant is a `CCCTL_MUTANT_<NAME>` block in bpf/ (ccctl's own build
//! defines none). For each, this compiles the algorithm's object with
//! `-DCCCTL_MUTANT_<NAME>` the way ccctl's build compiles it
//! ([`crate::bpf_object`]) and links it as libbpf-cargo does
//! ([`ObjectBuilder`]; unmutated, the result is the object ccctl embeds,
//! byte for byte: a unit test checks), runs the host test named as its killer with
//! `CCCTL_TEST_OBJECT=<kernel name>=<object>` (the tests' `ccctl load`
//! then loads that file: tests/common/mod.rs), and expects the test to
//! fail on the assertion named here. First, each killer test runs once
//! with the unmutated object compiled the same way and must pass: a kill
//! means the mutation, not the loading from a file or the machine, failed
//! it. A mutant is `killed` only if its killer failed with the expected
//! assertion after loading the mutant; anything else (passed, failed
//! elsewhere, timed out) fails the run. `cargo xtask test` runs this as a
//! phase, after the host phase: there a killer that passed in the host
//! phase needs no control run if the unmutated object compiled here is
//! byte for byte the one ccctl embeds (read from ccctl-core's generated
//! skeleton), since the host phase ran that test on those bytes (each
//! control took 10-25 s, 108 s in all). docs/testing.md has the table.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::Args;

use crate::{bpf_object::BpfCompiler, proc};

/// One mutant: a plausible wrong implementation and the test that must fail it.
pub struct Mutant {
    /// `CCCTL_MUTANT_<name>`.
    pub name: &'static str,
    /// Kernel name of the algorithm (`CCCTL_TEST_OBJECT`'s key).
    pub algo: &'static str,
    /// `bpf/<stem>.bpf.c`.
    pub stem: &'static str,
    pub what: &'static str,
    /// Host test (libtest path, run with `--exact`).
    pub killer: &'static str,
    /// A piece of the assertion message the killer must fail with.
    pub expect: &'static str,
}

/// The phase test under loss: its loss list refreshes min_rtt early, so
/// PROBE_RTT comes within its 20 s in every run (without loss a later
/// refresh postponed it past 13 s in one of three runs).
const BBR_PHASES: &str = "flows::bpf_bbr_probe_rtt_holds_under_loss_at_40ms";
const MODEST_SEARCH: &str = "modest::search_follows_alg1_with_lossy_rounds_forced_at_40ms";
const MODEST_BURST: &str =
    "modest::a_lone_flow_is_back_to_the_link_after_an_early_loss_burst_at_40ms";
/// Behind the Heavy gate: the heavy level and the boost come in every run
/// (the 0-RTT pseudocode test reached the heavy level by chance only, and
/// failed its control once for it).
const PATCHED_PSEUDOCODE2: &str =
    "patched_host::patched_bbr_follows_pseudocode2_behind_a_heavy_gate";

pub const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "PROBE_RTT_KEEPS_CWND",
        algo: "bpf_bbr",
        stem: "bbr",
        what: "PROBE_RTT that keeps its cwnd",
        killer: BBR_PHASES,
        expect: "PROBE_RTT must hold cwnd at 4 packets or less",
    },
    Mutant {
        name: "STARTUP_GAIN_2",
        algo: "bpf_bbr",
        stem: "bbr",
        what: "STARTUP gain 2 instead of 2/ln 2",
        killer: BBR_PHASES,
        expect: "STARTUP must pace and size cwnd at 2/ln 2",
    },
    Mutant {
        name: "NO_DRAIN_PHASE",
        algo: "bpf_bbr",
        stem: "bbr",
        what: "gain cycle without the 0.75 drain phase",
        killer: BBR_PHASES,
        expect: "must be followed by the 0.75 drain phase",
    },
    Mutant {
        name: "PROPORTION_OF_CAP",
        algo: "modest_bbr",
        stem: "modest_bbr",
        what: "search from BBR's 2 BDP cwnd cap instead of the window in force",
        killer: MODEST_SEARCH,
        expect: "a search must start from the window in force",
    },
    Mutant {
        name: "NO_STEP_DOWN",
        algo: "modest_bbr",
        stem: "modest_bbr",
        what: "no step down after a round with a retransmission",
        killer: MODEST_SEARCH,
        expect: "must move max_win down",
    },
    Mutant {
        name: "NO_GROWTH_AT_TOP",
        algo: "modest_bbr",
        stem: "modest_bbr",
        what: "no growth of last_cwnd at the top of the linear phase",
        killer: MODEST_BURST,
        expect: "pinned:",
    },
    Mutant {
        name: "BDP_FROM_LATEST_RTT",
        algo: "dstar",
        stem: "dstar",
        what: "eq. 2 with the latest RTT sample instead of min RTT",
        killer: "dstar::dstar_trace_follows_fig1",
        expect: "is not delivered",
    },
    Mutant {
        name: "UNDO_IGNORED",
        algo: "modest_bbr",
        stem: "modest_bbr",
        what: "an undone loss episode keeps its search (departure 10 off)",
        killer: "modest::spurious_retransmissions_from_reordering_do_not_hold_it_down",
        expect: "x bpf_bbr on a reordering path",
    },
    Mutant {
        name: "LOSS_IGNORED_IN_SLOW_START",
        algo: "dstar",
        stem: "dstar",
        what: "a loss does not end slow start",
        killer: "dstar::dstar_slow_start_exits_on_a_listed_loss_at_40ms",
        expect: "slow start did not end on the ACK that brought the listed loss",
    },
    Mutant {
        name: "NO_MIN_RTT_TIMEOUT",
        algo: "dstar",
        stem: "dstar",
        what: "min RTT never expires (no DRAIN on timeout)",
        killer: "dstar::dstar_drains_after_a_min_rtt_timeout",
        expect: "no DRAIN although min RTT is",
    },
    Mutant {
        name: "THETA_OFF_SHARE",
        algo: "patched_bbr",
        stem: "patched_bbr",
        what: "Θ = Off/(On+Off)",
        killer: PATCHED_PSEUDOCODE2,
        expect: "is not On/(On+Off)",
    },
    Mutant {
        name: "PACING_NOT_DIVIDED",
        algo: "patched_bbr",
        stem: "patched_bbr",
        what: "probe pacing gain not divided by Θ",
        killer: PATCHED_PSEUDOCODE2,
        expect: "but eq. 37 gives",
    },
    Mutant {
        name: "ALPHA_IGNORED",
        algo: "patched_bbr",
        stem: "patched_bbr",
        what: "cwnd gain without alpha",
        killer: PATCHED_PSEUDOCODE2,
        expect: "is not w + alpha",
    },
    Mutant {
        name: "LT_NOT_DIVIDED",
        algo: "patched_bbr",
        stem: "patched_bbr",
        what: "the policer's rate not divided by Θ (departure 13)",
        killer: PATCHED_PSEUDOCODE2,
        expect: "is not the long-term rate / Θ",
    },
];

/// A test that hangs (a mutant that never leaves a mode) is stopped here.
/// Long enough for a timing test's retakes under CPU steal (tests/common/
/// starved.rs: three attempts of up to ~110 s, and up to 90 s of waiting for
/// a quiet spell before each retake); CI once stopped a control at 240 s.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Args, Debug, Default)]
pub struct MutantsArgs {
    /// Only the mutants whose name contains this (case-insensitive)
    #[arg(long)]
    only: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Failed with the expected assertion (its message).
    Killed(String),
    /// The killer passed with the mutant loaded.
    Survived,
    /// Anything else: compile error, the object not loaded, another
    /// failure, a timeout, a control run that did not pass.
    Error(String),
}

pub struct Row {
    pub mutant: &'static Mutant,
    pub outcome: Outcome,
    pub secs: f64,
}

/// The last panic message in libtest output: the lines after the last
/// `panicked at ...:` up to the backtrace note. The last, because a host
/// timing test discards attempts the machine starved (tests/common/
/// starved.rs), and their panics come before the attempt that decided.
pub fn panic_message(output: &str) -> Option<String> {
    let all: Vec<&str> = output.lines().collect();
    let at = all.iter().rposition(|l| l.contains("panicked at "))?;
    let msg: Vec<&str> = all[at + 1..]
        .iter()
        .copied()
        .take_while(|l| {
            !l.starts_with("note: ") && !l.starts_with("stack backtrace:") && !l.is_empty()
        })
        .collect();
    Some(msg.join(" "))
}

/// How one killer run ended.
struct TestRun {
    passed: bool,
    loaded: bool,
    /// Why it did not finish (it hung, or could not be waited for).
    stopped: Option<String>,
    output: String,
    secs: f64,
}

fn run_test(
    exe: &Path,
    ccctl: &Path,
    test: &str,
    algo: &str,
    object: &Path,
    log: &Path,
) -> Result<TestRun> {
    let file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = file.try_clone()?;
    let start = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env("CCCTL_BIN", ccctl)
        .env("RUST_BACKTRACE", "0")
        .env("CCCTL_TEST_OBJECT", format!("{algo}={}", object.display()))
        .current_dir(proc::workspace_root())
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err);
    let mut group = proc::Group::spawn(&mut cmd)?;
    let status = group.wait(Some(RUN_TIMEOUT));
    group.terminate();
    proc::bail_if_interrupted()?;
    let secs = start.elapsed().as_secs_f64();
    let output = fs::read_to_string(log).unwrap_or_default();
    let status = match status {
        Ok(st) => st,
        Err(e) => {
            return Ok(TestRun {
                passed: false,
                loaded: false,
                stopped: Some(format!("{e:#}")),
                output,
                secs,
            })
        }
    };
    Ok(TestRun {
        // Exactly the one test ran, and passed.
        passed: status.success() && output.contains("test result: ok. 1 passed"),
        loaded: output.contains(&format!("loaded from {}", object.display())),
        stopped: None,
        output,
        secs,
    })
}

/// What the host phase of the same `cargo xtask test` run showed: the
/// tests that passed, and where ccctl's build wrote the skeletons (and so
/// the BPF objects) ccctl embeds.
pub struct HostPhase<'a> {
    pub passed: &'a BTreeSet<String>,
    /// ccctl-core's OUT_DIR in the build of the ccctl under test.
    pub skeletons: PathBuf,
}

/// The BPF object a libbpf-cargo skeleton embeds (`static DATA: [u8; N] =
/// [b0, b1, ...];` in `<stem>.skel.rs`).
pub fn embedded_object(skeleton_text: &str) -> Result<Vec<u8>> {
    let (_, rest) = skeleton_text
        .split_once("static DATA: [u8; ")
        .context("no `static DATA: [u8; N]` in the skeleton")?;
    let (len, rest) = rest
        .split_once("] = [")
        .context("the skeleton's DATA has no `] = [`")?;
    let len: usize = len
        .trim()
        .parse()
        .with_context(|| format!("the skeleton's DATA length `{len}` is not a number"))?;
    let (bytes, _) = rest
        .split_once(']')
        .context("the skeleton's DATA has no closing `]`")?;
    let bytes = bytes
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(|b| {
            b.parse::<u8>()
                .with_context(|| format!("`{b}` in the skeleton's DATA is not a byte"))
        })
        .collect::<Result<Vec<u8>>>()?;
    anyhow::ensure!(
        bytes.len() == len,
        "the skeleton's DATA holds {} bytes, its type says {len}",
        bytes.len()
    );
    Ok(bytes)
}

/// Compiles and links `bpf/<stem>.bpf.c` as ccctl's build does: clang
/// ([`BpfCompiler`]), then libbpf's BPF linker, which libbpf-cargo runs
/// after clang (it drops DWARF). The linker is the test crate's
/// `link_bpf` example (`linker`): xtask itself builds before `setup` has
/// installed what libbpf's C build needs.
pub struct ObjectBuilder {
    compiler: BpfCompiler,
    linker: PathBuf,
}

impl ObjectBuilder {
    pub fn new(scratch: &Path) -> Result<ObjectBuilder> {
        let compiler =
            BpfCompiler::new(&proc::workspace_root(), scratch).map_err(anyhow::Error::msg)?;
        let linker = proc::cargo_build_json(
            &["build", "-p", "ccctl-tests", "--example", "link_bpf"],
            |name, kinds, _| name == "link_bpf" && kinds.iter().any(|k| k == "example"),
        )?;
        Ok(ObjectBuilder { compiler, linker })
    }

    /// The object of `stem` with `defines` in `out`; the error carries
    /// clang's or the linker's messages.
    pub fn build(&self, stem: &str, defines: &[&str], out: &Path) -> Result<(), String> {
        let raw = out.with_extension("clang.o");
        self.compiler.compile(stem, defines, &raw)?;
        let res = Command::new(&self.linker)
            .arg(out)
            .arg(&raw)
            .output()
            .map_err(|e| format!("running {}: {e}", self.linker.display()))?;
        let _ = fs::remove_file(&raw);
        if !res.status.success() {
            return Err(format!(
                "linking bpf/{stem}.bpf.c with {defines:?} failed:\n{}",
                String::from_utf8_lossy(&res.stderr)
            ));
        }
        Ok(())
    }
}

/// Whether the host phase stands in for a killer's control: it passed
/// there, and `object` (compiled here, unmutated) is the object ccctl
/// embeds, byte for byte. Why not, if not.
fn host_phase_is_control(host: &HostPhase, m: &Mutant, object: &Path) -> Result<(), String> {
    if !host.passed.contains(m.killer) {
        return Err("it did not pass in the host phase (or its line was not read)".into());
    }
    let skeleton = host.skeletons.join(format!("{}.skel.rs", m.stem));
    let embedded = fs::read_to_string(&skeleton)
        .map_err(|e| format!("reading {}: {e}", skeleton.display()))
        .and_then(|t| embedded_object(&t).map_err(|e| format!("{}: {e:#}", skeleton.display())))?;
    let compiled = fs::read(object).map_err(|e| format!("reading {}: {e}", object.display()))?;
    if compiled != embedded {
        return Err(format!(
            "{} ({} B) differs from the object ccctl embeds ({} B)",
            object.display(),
            compiled.len(),
            embedded.len()
        ));
    }
    Ok(())
}

/// Runs every mutant (or those `only` selects) against `ccctl`; prints the
/// table. The rows, in catalogue order. With `host`, a killer that passed
/// in the host phase on the same object bytes is not run again as its
/// control.
pub fn run(ccctl: &Path, only: Option<&str>, host: Option<&HostPhase>) -> Result<Vec<Row>> {
    let started = Instant::now();
    let scratch = proc::target_dir()?.join("mutants");
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(scratch.join("logs"))?;
    let compiler = ObjectBuilder::new(&scratch)?;
    eprintln!("xtask mutants: building the host test binary");
    let exe = proc::cargo_build_json(
        &["test", "-p", "ccctl-tests", "--test", "host", "--no-run"],
        |name, kinds, is_test| name == "host" && is_test && kinds.iter().any(|k| k == "test"),
    )?;
    let chosen: Vec<&'static Mutant> = MUTANTS
        .iter()
        .filter(|m| only.is_none_or(|o| m.name.to_lowercase().contains(&o.to_lowercase())))
        .collect();
    anyhow::ensure!(!chosen.is_empty(), "no mutant matches {only:?}");

    // Controls: each killer with the unmutated object, compiled the same way.
    let mut controls: BTreeMap<&str, Result<(), String>> = BTreeMap::new();
    for m in &chosen {
        if controls.contains_key(m.killer) {
            continue;
        }
        let obj = scratch.join(format!("{}.bpf.o", m.stem));
        if !obj.exists() {
            compiler
                .build(m.stem, &[], &obj)
                .map_err(anyhow::Error::msg)?;
        }
        if let Some(host) = host {
            match host_phase_is_control(host, m, &obj) {
                Ok(()) => {
                    eprintln!(
                        "xtask mutants: control {}: passed in the host phase on the same object bytes",
                        m.killer
                    );
                    controls.insert(m.killer, Ok(()));
                    continue;
                }
                Err(why) => eprintln!(
                    "xtask mutants: control {}: the host phase does not stand in ({why}); running it",
                    m.killer
                ),
            }
        }
        eprintln!(
            "xtask mutants: control: {} with bpf/{}.bpf.c unmutated",
            m.killer, m.stem
        );
        let log = scratch
            .join("logs")
            .join(format!("control-{}.log", m.killer.replace("::", "-")));
        let r = run_test(&exe, ccctl, m.killer, m.algo, &obj, &log)?;
        let verdict = if let Some(why) = &r.stopped {
            Err(format!("control run: {why} (see {})", log.display()))
        } else if r.passed && r.loaded {
            Ok(())
        } else if !r.loaded {
            Err(format!(
                "control run did not load the object file (see {})",
                log.display()
            ))
        } else {
            Err(format!(
                "control run failed unmutated: {} (see {})",
                panic_message(&r.output).unwrap_or_else(|| "no panic message".into()),
                log.display()
            ))
        };
        eprintln!(
            "xtask mutants: control {}: {:?} in {:.0} s",
            m.killer, verdict, r.secs
        );
        controls.insert(m.killer, verdict);
    }

    let mut rows = Vec::new();
    for m in chosen {
        let obj = scratch.join(format!("{}-{}.bpf.o", m.stem, m.name.to_lowercase()));
        let define = format!("CCCTL_MUTANT_{}", m.name);
        let start = Instant::now();
        let outcome = match (
            &controls[m.killer],
            compiler.build(m.stem, &[&define], &obj),
        ) {
            (Err(why), _) => Outcome::Error(why.clone()),
            (_, Err(why)) => Outcome::Error(why),
            (Ok(()), Ok(())) => {
                eprintln!(
                    "xtask mutants: {} ({}) against {}",
                    m.name, m.what, m.killer
                );
                let log = scratch.join("logs").join(format!("{}.log", m.name));
                let r = run_test(&exe, ccctl, m.killer, m.algo, &obj, &log)?;
                let msg = panic_message(&r.output);
                match (r.stopped, r.passed, r.loaded, msg) {
                    (Some(why), ..) => Outcome::Error(format!("{why} (see {})", log.display())),
                    (None, true, true, _) => Outcome::Survived,
                    (None, _, false, _) => Outcome::Error(format!(
                        "the mutant object was not loaded (see {})",
                        log.display()
                    )),
                    (None, false, true, Some(msg)) if msg.contains(m.expect) => {
                        Outcome::Killed(msg)
                    }
                    (None, false, true, msg) => Outcome::Error(format!(
                        "failed, but not on \"{}\": {} (see {})",
                        m.expect,
                        msg.unwrap_or_else(|| "no panic message".into()),
                        log.display()
                    )),
                }
            }
        };
        let secs = start.elapsed().as_secs_f64();
        eprintln!("xtask mutants: {}: {:?} ({secs:.0} s)", m.name, outcome);
        rows.push(Row {
            mutant: m,
            outcome,
            secs,
        });
    }
    print_table(&rows);
    println!(
        "xtask mutants: {} of {} killed in {:.0} s (controls included)",
        rows.iter()
            .filter(|r| matches!(r.outcome, Outcome::Killed(_)))
            .count(),
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(rows)
}

pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

pub fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<28} {:<12} {:<62} {:<9} {:>5}  assertion",
        "mutant", "algorithm", "test", "result", "s"
    );
    for r in rows {
        let (result, detail) = match &r.outcome {
            Outcome::Killed(msg) => ("killed", clip(msg, 160)),
            Outcome::Survived => ("SURVIVED", String::new()),
            Outcome::Error(why) => ("ERROR", clip(why, 300)),
        };
        println!(
            "{:<28} {:<12} {:<62} {:<9} {:>5.0}  {detail}",
            r.mutant.name, r.mutant.algo, r.mutant.killer, result, r.secs
        );
    }
}

/// The ccctl debug build, built if need be.
fn ccctl_build() -> Result<PathBuf> {
    proc::cargo_build_json(&["build", "-p", "ccctl", "--bins"], |name, kinds, _| {
        name == "ccctl" && kinds.iter().any(|k| k == "bin")
    })?
    .canonicalize()
    .context("resolving the ccctl binary")
}

pub fn main(args: MutantsArgs) -> Result<i32> {
    let ccctl = ccctl_build()?;
    let rows = run(&ccctl, args.only.as_deref(), None)?;
    let _ = Command::new(&ccctl).args(["unload", "--all"]).status();
    let bad = rows
        .iter()
        .filter(|r| !matches!(r.outcome, Outcome::Killed(_)))
        .count();
    Ok(if bad == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_the_assertion() {
        let out = "running 1 test\n\
            test x ... ccctl-tests: bpf_bbr loaded from /t/o\n\
            \n\
            thread 'x' (123) panicked at tests/common/a.rs:1:2:\n\
            STARTUP must pace at 2.885: events 0..=3\n\
            second line\n\
            note: run with `RUST_BACKTRACE=1`\n\
            test x ... FAILED\n";
        assert_eq!(
            panic_message(out).as_deref(),
            Some("STARTUP must pace at 2.885: events 0..=3 second line")
        );
        assert_eq!(panic_message("test x ... ok\n"), None);
        // A discarded attempt's panic first, the deciding one last.
        let retaken = "thread 'x' panicked at tests/common/a.rs:1:2:\n\
            the path carried 9.9 Mbit/s\n\
            note: run with `RUST_BACKTRACE=1`\n\
            x: attempt 1 discarded, failed: the hypervisor took 31.0 %\n\
            thread 'x' panicked at tests/common/a.rs:1:2:\n\
            STARTUP must pace at 2.885\n\
            \n\
            failures:\n";
        assert_eq!(
            panic_message(retaken).as_deref(),
            Some("STARTUP must pace at 2.885")
        );
    }

    #[test]
    fn the_embedded_object_is_read_from_a_skeleton() {
        let skel = "    #[unsafe(link_section = \".bpf.objs\")]\n    \
            static DATA: [u8; 5] = [\n        127, 69, 76,\n        70, 2,\n    ];\n}\n";
        assert_eq!(embedded_object(skel).unwrap(), [127, 69, 76, 70, 2]);
        let short = skel.replace("[u8; 5]", "[u8; 6]");
        assert!(format!("{:#}", embedded_object(&short).unwrap_err()).contains("holds 5 bytes"));
        let bad = skel.replace("70,", "700,");
        assert!(format!("{:#}", embedded_object(&bad).unwrap_err()).contains("`700`"));
        assert!(embedded_object("fn main() {}").is_err());
    }

    /// The host phase stands in for a control only for a test that passed
    /// there and an object identical to the embedded one.
    #[test]
    fn the_host_phase_stands_in_only_for_the_same_bytes() {
        let dir = ccctl_sys::scratch_dir("xtask-mutants-control").unwrap();
        let m = &MUTANTS[0];
        fs::write(
            dir.join(format!("{}.skel.rs", m.stem)),
            "static DATA: [u8; 3] = [1, 2, 3];",
        )
        .unwrap();
        let same = dir.join("same.o");
        fs::write(&same, [1u8, 2, 3]).unwrap();
        let other = dir.join("other.o");
        fs::write(&other, [1u8, 2, 4]).unwrap();
        let passed: BTreeSet<String> = [m.killer.to_string()].into();
        let host = HostPhase {
            passed: &passed,
            skeletons: dir.to_path_buf(),
        };
        assert_eq!(host_phase_is_control(&host, m, &same), Ok(()));
        assert!(host_phase_is_control(&host, m, &other)
            .unwrap_err()
            .contains("differs"));
        let none = BTreeSet::new();
        let failed = HostPhase {
            passed: &none,
            skeletons: dir.to_path_buf(),
        };
        assert!(host_phase_is_control(&failed, m, &same)
            .unwrap_err()
            .contains("did not pass"));
    }

    /// The premise of the mutants and of the host phase standing in for
    /// their controls: compiled here without a mutant, each algorithm's
    /// object is the one ccctl's build embeds, byte for byte.
    #[test]
    fn unmutated_objects_are_the_ones_ccctl_embeds() {
        let skeletons =
            proc::cargo_build_script_out_dir(&["build", "-p", "ccctl", "--bins"], "ccctl-core")
                .unwrap();
        let scratch = ccctl_sys::scratch_dir("xtask-mutants-objects").unwrap();
        let compiler = ObjectBuilder::new(&scratch).unwrap();
        let stems: BTreeSet<&str> = MUTANTS.iter().map(|m| m.stem).collect();
        for stem in stems {
            let obj = scratch.join(format!("{stem}.bpf.o"));
            compiler.build(stem, &[], &obj).unwrap();
            let text = fs::read_to_string(skeletons.join(format!("{stem}.skel.rs"))).unwrap();
            let embedded = embedded_object(&text).unwrap();
            let compiled = fs::read(&obj).unwrap();
            assert!(
                compiled == embedded,
                "bpf/{stem}.bpf.c compiled by xtask ({} B) is not the object ccctl embeds ({} B)",
                compiled.len(),
                embedded.len()
            );
        }
    }

    #[test]
    fn every_mutant_is_a_block_in_its_source() {
        let root = proc::workspace_root();
        for m in MUTANTS {
            let define = format!("CCCTL_MUTANT_{}", m.name);
            let mut found = false;
            for f in [format!("bpf/{}.bpf.c", m.stem), "bpf/bbr_core.h".into()] {
                let text = fs::read_to_string(root.join(&f)).expect("reading bpf/");
                found |= text.contains(&define);
            }
            assert!(
                found,
                "{define} is in neither bpf/{}.bpf.c nor bbr_core.h",
                m.stem
            );
        }
        // At least three per algorithm.
        for algo in ["bpf_bbr", "modest_bbr", "dstar", "patched_bbr"] {
            let n = MUTANTS.iter().filter(|m| m.algo == algo).count();
            assert!(n >= 3, "{algo} has {n} mutants");
        }
    }

    #[test]
    fn the_build_compiles_with_the_flags_the_mutants_use() {
        let build = fs::read_to_string(proc::workspace_root().join("ccctl/core/build.rs"))
            .expect("reading build.rs");
        let args = build
            .split_once(".clang_args([")
            .and_then(|(_, rest)| rest.split_once("])"))
            .map(|(args, _)| args)
            .expect("build.rs passes clang_args");
        // The string literals that are flags (not the error context).
        let quoted: Vec<&str> = args
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|a| a.starts_with('-'))
            .collect();
        assert_eq!(
            quoted,
            [&["-I"][..], crate::bpf_object::PROJECT_CFLAGS].concat(),
            "build.rs's clang flags changed: update xtask/src/bpf_object.rs"
        );
        assert!(
            !build.contains("CCCTL_MUTANT"),
            "the shipped build defines a mutant"
        );
    }
}
