//! `cargo xtask demo`: load bpf_bbr with ccctl, push one iperf3 flow through
//! a sender -> router -> receiver namespace testbed with a 50 Mbit/s tbf
//! bottleneck on the router (ccctl's `flow` example, built on
//! `ccctl::testbed`), show `ccctl status`, unload.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{proc, setup};

const CC: &str = "bpf_bbr";
const BOTTLENECK_MBIT: &str = "50";
const SECONDS: &str = "10";

pub fn main() -> Result<i32> {
    if !setup::check()? {
        bail!("some tools are missing: run `cargo xtask setup` first");
    }
    eprintln!("demo: building ccctl (release; about 2 minutes the first time)");
    let ccctl = proc::cargo_build_json(&["build", "--release", "-p", "ccctl", "--bins"], |name, kinds, _| {
        name == "ccctl" && kinds.iter().any(|k| k == "bin")
    })?;
    let flow = proc::cargo_build_json(&["build", "--release", "-p", "ccctl", "--example", "flow"], |name, kinds, _| {
        name == "flow" && kinds.iter().any(|k| k == "example")
    })?;
    ensure_bpffs()?;

    run(&ccctl, &["list"])?;
    run(&ccctl, &["load", "bbr"])?;
    // Whatever happens next, unload again.
    let res = (|| -> Result<()> {
        let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .context("cannot read tcp_available_congestion_control")?;
        if !available.split_whitespace().any(|c| c == CC) {
            bail!("`ccctl load bbr` succeeded but {CC} is not registered (available: {})", available.trim());
        }
        println!("demo: $ flow {CC} {BOTTLENECK_MBIT} {SECONDS}   # iperf3 -C {CC} through the testbed");
        proc::run(Command::new(&flow).args([CC, BOTTLENECK_MBIT, SECONDS]))?;
        run(&ccctl, &["status"])
    })();
    let unload = run(&ccctl, &["unload", "bbr"]);
    res?;
    unload?;
    println!("demo: done");
    Ok(0)
}

fn run(ccctl: &Path, args: &[&str]) -> Result<()> {
    println!("demo: $ ccctl {}", args.join(" "));
    proc::run(Command::new(ccctl).args(args))
}

fn ensure_bpffs() -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/mounts").context("cannot read /proc/mounts")?;
    if mounts.lines().any(|l| l.contains(" /sys/fs/bpf bpf ")) {
        return Ok(());
    }
    eprintln!("demo: mounting bpffs at /sys/fs/bpf");
    proc::run(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))
}
