//! Compiling one of `bpf/*.bpf.c` into a BPF object file outside ccctl's
//! build, exactly as that build compiles it: for `ccctl load NAME --object
//! FILE` in tests, and for the mutants (`cargo xtask mutants`), which add a
//! `-DCCCTL_MUTANT_<NAME>`.
//!
//! ccctl-core's build.rs hands `-I bpf -Wall -Werror -O2 -g` to
//! libbpf-cargo's `SkeletonBuilder`, which runs
//! `clang <those> -I <its libbpf headers> -fno-stack-protector
//! -D__TARGET_ARCH_<arch> -g -O2 -target bpf -c SRC -o OBJ`, the headers
//! being the ones libbpf-sys vendors (`libbpf/src/*.h` of the libbpf-sys
//! in Cargo.lock, written out as `bpf/*.h`), then links the result with
//! libbpf's BPF linker (which drops DWARF). This file does the clang step
//! (the mutants link too: `ObjectBuilder` in xtask/src/mutants.rs),
//! finding libbpf-sys through `cargo metadata`. Shared, by `#[path]`, by
//! xtask and the test crate, so there is one copy of the command line;
//! std and serde_json only.
#![allow(dead_code)]

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

/// What build.rs passes to libbpf-cargo (`clang_args`), besides `-I bpf`.
/// xtask's unit test checks build.rs still says so.
pub const PROJECT_CFLAGS: &[&str] = &["-Wall", "-Werror", "-O2", "-g"];

/// What libbpf-cargo 0.27 adds after the project's flags (build.rs of
/// libbpf-cargo: `with_compiler_args`, `compile_single`), the target
/// architecture define aside.
const LIBBPF_CARGO_CFLAGS: &[&str] = &["-fno-stack-protector"];
const LIBBPF_CARGO_TAIL: &[&str] = &["-g", "-O2", "-target", "bpf", "-c"];

/// The headers libbpf-cargo writes out (libbpf-sys `API_HEADERS`).
const LIBBPF_HEADERS: &[&str] = &[
    "bpf.h",
    "libbpf.h",
    "btf.h",
    "bpf_helpers.h",
    "bpf_helper_defs.h",
    "bpf_tracing.h",
    "bpf_endian.h",
    "bpf_core_read.h",
    "libbpf_common.h",
    "usdt.bpf.h",
];

/// libbpf-cargo's name for the running architecture in `__TARGET_ARCH_`.
fn target_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        "powerpc64" => "powerpc",
        "s390x" => "s390",
        "riscv64" => "riscv",
        "loongarch64" => "loongarch",
        "sparc64" => "sparc",
        "mips64" => "mips",
        other => other,
    }
}

/// Compiles `bpf/<stem>.bpf.c` of one workspace.
pub struct BpfCompiler {
    bpf_dir: PathBuf,
    /// Holds `bpf/<libbpf header>`.
    include: PathBuf,
}

impl BpfCompiler {
    /// Finds libbpf-sys's headers for the workspace at `workspace` and
    /// writes them under `scratch`.
    pub fn new(workspace: &Path, scratch: &Path) -> Result<BpfCompiler, String> {
        let src = libbpf_headers_dir(workspace)?;
        let include = scratch.join("include");
        let dst = include.join("bpf");
        fs::create_dir_all(&dst).map_err(|e| format!("creating {}: {e}", dst.display()))?;
        for h in LIBBPF_HEADERS {
            fs::copy(src.join(h), dst.join(h))
                .map_err(|e| format!("copying {} from {}: {e}", h, src.display()))?;
        }
        Ok(BpfCompiler {
            // Spelled as ccctl-core's build.rs spells it
            // (`CARGO_MANIFEST_DIR/../../bpf`): clang writes the source
            // paths into the object's BTF line info, so the same bytes
            // need the same spelling.
            bpf_dir: workspace.join("ccctl/core/../../bpf"),
            include,
        })
    }

    /// The clang command that compiles `bpf/<stem>.bpf.c` with `defines`
    /// (`-D` each) into `out`.
    pub fn command(&self, stem: &str, defines: &[&str], out: &Path) -> Command {
        let mut cmd = Command::new(std::env::var_os("CLANG").unwrap_or_else(|| "clang".into()));
        cmd.arg("-I").arg(&self.bpf_dir);
        cmd.args(PROJECT_CFLAGS);
        for d in defines {
            cmd.arg(format!("-D{d}"));
        }
        cmd.arg("-I").arg(&self.include);
        cmd.args(LIBBPF_CARGO_CFLAGS);
        cmd.arg(format!("-D__TARGET_ARCH_{}", target_arch()));
        cmd.args(LIBBPF_CARGO_TAIL);
        cmd.arg(self.bpf_dir.join(format!("{stem}.bpf.c")));
        cmd.arg("-o").arg(out);
        cmd
    }

    /// Compiles; the error carries clang's messages.
    pub fn compile(&self, stem: &str, defines: &[&str], out: &Path) -> Result<(), String> {
        let mut cmd = self.command(stem, defines, out);
        let res = cmd
            .output()
            .map_err(|e| format!("running clang (is it installed? `cargo xtask setup`): {e}"))?;
        if !res.status.success() {
            return Err(format!(
                "clang failed on bpf/{stem}.bpf.c with {defines:?}:\n{}",
                String::from_utf8_lossy(&res.stderr)
            ));
        }
        Ok(())
    }
}

/// `libbpf/src` of the libbpf-sys package in the workspace's dependency
/// graph (`cargo metadata`).
fn libbpf_headers_dir(workspace: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(workspace)
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("parsing cargo metadata: {e}"))?;
    let manifest = v["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "libbpf-sys")
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or("libbpf-sys is not in the workspace's dependencies")?;
    let dir = Path::new(manifest)
        .parent()
        .ok_or("libbpf-sys's manifest has no directory")?
        .join("libbpf/src");
    if !dir.join("bpf_helpers.h").exists() {
        return Err(format!("no bpf_helpers.h in {}", dir.display()));
    }
    Ok(dir)
}
