//! `cargo xtask demo`: the main job on the built-in namespace testbed:
//! `ccctl lab run scenarios/bbr-vs-cubic.toml`, Cubic against BBR on a
//! shallow and a deep bottleneck buffer, on this kernel with the lab's
//! userspace path emulator (no qdisc needed). Results land in
//! `results/bbr-vs-cubic-<UTC time>/`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

use crate::{proc, setup};

const SCENARIO: &str = "scenarios/bbr-vs-cubic.toml";

pub fn main() -> Result<i32> {
    if !setup::check()? {
        bail!("some tools are missing: run `cargo xtask setup` first");
    }
    eprintln!("demo: building ccctl (debug, as the tests; a few minutes the first time)");
    let ccctl = proc::cargo_build_json(&["build", "-p", "ccctl", "--bins"], |name, kinds, _| {
        name == "ccctl" && kinds.iter().any(|k| k == "bin")
    })?;
    let root = proc::workspace_root();
    run(&ccctl, &["list"], &root)?;
    run(&ccctl, &["lab", "check", SCENARIO], &root)?;
    run(&ccctl, &["lab", "run", SCENARIO, "--out", "results"], &root)?;
    println!(
        "demo: done; results (Parquet, summary.txt, plots/) are in {}",
        root.join("results").display()
    );
    Ok(0)
}

fn run(ccctl: &Path, args: &[&str], dir: &Path) -> Result<()> {
    println!("demo: $ ccctl {}", args.join(" "));
    proc::run(Command::new(ccctl).args(args).current_dir(dir))
}
