//! Property tests of the scenario parser: the shipped scenario
//! files, mutated a line at a time (a value replaced by a hostile token, a
//! line dropped, duplicated or replaced by junk), and arbitrary text. No
//! panic and no hang; a refusal names a field (a TOML key path or line) and
//! what is wrong there; an accepted scenario expands into runs and flow
//! plans without panicking, each with a positive finite rate, at least one
//! flow and at most MAX_FLOWS.
//!
//! Cases: `CCCTL_FUZZ_CASES` (default 5,000 here: a TOML parse and
//! expansion costs ~0.5 ms in a debug build).
use std::path::Path;

use ccctl_lab::scenario::{Scenario, MAX_FLOWS};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: ccctl_core::fuzz::cases(5_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn scenario_files() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("scenarios/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| std::fs::read_to_string(p).expect("scenario file"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the shipped scenarios in {}",
        dir.display()
    );
    files
}

const HOSTILE: &[&str] = &[
    "\"\"",
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e999",
    "\"-40ms\"",
    "\"nanms\"",
    "\"1e999mbit\"",
    "\"0bdp\"",
    "\"40\"",
    "\"40 ms\"",
    "\"0.5bdp\"",
    "\"30mbit\"",
    "\"10s\"",
    "[]",
    "{}",
    "true",
    "[\"cubic\"]",
    "[[]]",
    "\"bpf_bbr\"",
    "\"nosuch\"",
    "4294967296",
    "-0.0",
    "\"\\u0000\"",
    "{ on = \"0ms\", off = \"1ms\" }",
    "\"cubic:1000\"",
    "\"cubic:0\"",
    "[\"cubic:251\"]",
    "1.5",
    "\"🙂\"",
];

fn mutate(text: &str, line: usize, kind: u8, token: usize, junk: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return junk.to_string();
    }
    let i = line % lines.len();
    match kind % 5 {
        // key = <hostile value>
        0 | 1 => {
            if let Some((k, _)) = lines[i].split_once('=') {
                lines[i] = format!("{k}= {}", HOSTILE[token % HOSTILE.len()]);
            } else {
                lines[i] = format!("{} = {}", junk, HOSTILE[token % HOSTILE.len()]);
            }
        }
        2 => {
            lines.remove(i);
        }
        3 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        _ => lines[i] = junk.to_string(),
    }
    lines.join("\n")
}

fn check(text: &str) -> Result<(), TestCaseError> {
    match Scenario::from_toml(text) {
        Ok(sc) => {
            let runs = sc.runs();
            prop_assert!(
                !runs.is_empty(),
                "accepted a scenario with no runs:\n{text}"
            );
            for r in &runs {
                let bps = r.link.rate.0;
                prop_assert!(bps.is_finite() && bps > 0.0, "rate {bps}:\n{text}");
                prop_assert!(!r.flows.is_empty(), "a run without flows:\n{text}");
                prop_assert!(
                    r.flows.len() <= MAX_FLOWS as usize,
                    "{} flows:\n{text}",
                    r.flows.len()
                );
            }
        }
        Err(e) => {
            prop_assert!(
                !e.field.trim().is_empty(),
                "refusal names no field: {e}\n{text}"
            );
            prop_assert!(
                !e.message.trim().is_empty(),
                "refusal says nothing: {e}\n{text}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_scenarios_are_refused_by_field_or_expand_sanely(
        file: usize, line: usize, kind: u8, token: usize, junk in "\\PC{0,40}",
    ) {
        let files = scenario_files();
        check(&mutate(&files[file % files.len()], line, kind, token, &junk))?;
    }

    #[test]
    fn arbitrary_text_is_refused_by_field(text in "\\PC{0,300}") {
        check(&text)?;
    }
}

#[test]
fn the_shipped_scenarios_parse() {
    for text in scenario_files() {
        check(&text).expect("a shipped scenario");
        Scenario::from_toml(&text).expect("a shipped scenario parses");
    }
}
