//! Compiles every `bpf/*.bpf.c` into a libbpf skeleton embedded in the binary,
//! and generates Rust types from the one ABI header, `bpf/ccctl_abi.h`.
use std::{env, fs, path::PathBuf};

use anyhow::{Context, Result};
use libbpf_cargo::SkeletonBuilder;

fn main() -> Result<()> {
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../bpf");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", bpf_dir.display());

    for entry in fs::read_dir(&bpf_dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(stem) = name.strip_suffix(".bpf.c") {
            SkeletonBuilder::new()
                .source(&path)
                .clang_args([
                    "-I",
                    bpf_dir.to_str().context("non-UTF-8 path")?,
                    "-Wall",
                    "-Werror",
                    "-O2",
                    "-g",
                ])
                .build_and_generate(out_dir.join(format!("{stem}.skel.rs")))
                .with_context(|| format!("building BPF program {}", path.display()))?;
        }
    }

    // The commit a binary was built from, for the lab's metadata.
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CCCTL_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");

    params_table(&bpf_dir, &out_dir)?;
    host_program(&bpf_dir, &out_dir, "rate_probe")?;

    bindgen::Builder::default()
        .header(bpf_dir.join("ccctl_abi.h").to_string_lossy())
        .allowlist_type("ccctl_.*")
        .allowlist_var("CCCTL_.*")
        .derive_default(true)
        .generate()
        .context("bindgen on bpf/ccctl_abi.h")?
        .write_to_file(out_dir.join("abi.rs"))?;
    Ok(())
}

/// `build/NAME.c` compiled for the host into OUT_DIR/NAME, with `bpf/` on
/// the include path: a test's window onto BPF-side C that has no kernel
/// types (`rate_probe`: bbr_rate.h's pacing arithmetic).
fn host_program(bpf_dir: &std::path::Path, out_dir: &std::path::Path, name: &str) -> Result<()> {
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join(format!("build/{name}.c"));
    println!("cargo:rerun-if-changed={}", src.display());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = std::process::Command::new(&cc)
        .args(["-O2", "-Wall", "-Werror", "-I"])
        .arg(bpf_dir)
        .arg("-o")
        .arg(out_dir.join(name))
        .arg(&src)
        .status()
        .with_context(|| format!("running {cc} on {}", src.display()))?;
    anyhow::ensure!(status.success(), "{cc} failed on {}", src.display());
    Ok(())
}

/// `params_table.rs`: ccctl's parameter table, printed by a small C program
/// that expands `CCCTL_PARAMS` from `bpf/ccctl_abi.h` (bindgen cannot expand
/// a function-like macro into a table), compiled with the host's `cc`.
fn params_table(bpf_dir: &std::path::Path, out_dir: &std::path::Path) -> Result<()> {
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("build/params_table.c");
    println!("cargo:rerun-if-changed={}", src.display());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = out_dir.join("params_table");
    let status = std::process::Command::new(&cc)
        .args(["-Wall", "-Werror", "-I"])
        .arg(bpf_dir)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .with_context(|| format!("running {cc} on {}", src.display()))?;
    anyhow::ensure!(status.success(), "{cc} failed on {}", src.display());
    let out = std::process::Command::new(&exe)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    anyhow::ensure!(out.status.success(), "{} failed", exe.display());
    fs::write(out_dir.join("params_table.rs"), out.stdout)?;
    Ok(())
}
