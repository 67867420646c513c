//! `cargo xtask setup`: install what a fresh Debian 12 machine lacks.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::proc;

/// Where the virtme-ng virtualenv lives (fixed, documented location).
pub use crate::vm::VENV;
/// Pinned virtme-ng version (its wheel ships the prebuilt virtme-ng-init).
pub const VIRTME_NG_VERSION: &str = "1.42";

/// Debian 12 packages the project needs, and why.
const PACKAGES: &[(&str, &str)] = &[
    ("clang", "compiles the BPF programs"),
    ("llvm", "llvm-strip/llvm-objdump for BPF objects"),
    ("libclang-dev", "bindgen (ccctl build script)"),
    ("make", "libbpf-sys vendored build"),
    ("pkg-config", "libbpf-sys finds libelf/zlib"),
    ("libelf-dev", "libbpf"),
    ("zlib1g-dev", "libbpf"),
    ("bpftool", "vmlinux.h generation, inspection"),
    ("iperf3", "traffic in tests and the demo"),
    (
        "iputils-ping",
        "RTT through the path emulator (tests, bench testbed)",
    ),
    ("ethtool", "offload settings in testbeds"),
    ("iproute2", "ip/tc/ss: namespaces, qdiscs"),
    ("kmod", "modprobe (host, and the VM's initramfs)"),
    ("qemu-system-x86", "the test VM"),
    ("linux-image-amd64", "Debian's 6.1 kernel booted in the VM"),
    ("busybox-static", "virtme-ng builds its initramfs from it"),
    ("python3-venv", "virtualenv for virtme-ng"),
    ("fonts-dejavu-core", "text in the lab's PNG plots"),
];

pub struct Missing {
    pub packages: Vec<&'static str>,
    pub venv: bool,
    pub kernel: bool,
}

impl Missing {
    pub fn nothing(&self) -> bool {
        self.packages.is_empty() && !self.venv && !self.kernel
    }

    pub fn report(&self) {
        for p in &self.packages {
            let why = PACKAGES.iter().find(|(n, _)| n == p).map_or("", |(_, w)| w);
            println!("missing: package {p} ({why})");
        }
        if self.kernel {
            println!("missing: a Debian 6.1 kernel in /boot (vmlinuz-6.1*) with /lib/modules");
        }
        if self.venv {
            println!(
                "missing: virtme-ng {VIRTME_NG_VERSION}, pyarrow {PYARROW_VERSION}, duckdb {DUCKDB_VERSION} \
                 or prometheus-client {PROMETHEUS_CLIENT_VERSION} in {VENV}"
            );
        }
    }
}

pub use crate::vm::vng;

fn installed_packages(names: &[&str]) -> Result<Vec<String>> {
    // dpkg-query exits 1 when some package is unknown but still lists the rest.
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package} ${db:Status-Abbrev}\n")
        .args(names)
        .output()
        .context("cannot run dpkg-query (is this Debian?)")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, status) = l.split_once(' ')?;
            status
                .starts_with("ii")
                .then(|| name.split(':').next().unwrap_or(name).to_string())
        })
        .collect())
}

fn site_packages() -> Vec<PathBuf> {
    let lib = Path::new(VENV).join("lib");
    let Ok(rd) = std::fs::read_dir(&lib) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect()
}

/// Pinned pyarrow: the tests read our Parquet files with a second,
/// independent reader (polars is the first).
pub const PYARROW_VERSION: &str = "26.0.1";
/// Pinned DuckDB: the fleet tests read the daemons' Hive-partitioned trace
/// tree as one table, and run examples/fleet/query.sql, with it.
pub const DUCKDB_VERSION: &str = "2.0.0";
/// Pinned prometheus-client (Python): its OpenMetrics parser checks the
/// daemon's metrics endpoint in the tests.
pub const PROMETHEUS_CLIENT_VERSION: &str = "0.26.0";

fn venv_ok() -> bool {
    let dists = [
        format!("virtme_ng-{VIRTME_NG_VERSION}.dist-info"),
        format!("pyarrow-{PYARROW_VERSION}.dist-info"),
        format!("duckdb-{DUCKDB_VERSION}.dist-info"),
        format!("prometheus_client-{PROMETHEUS_CLIENT_VERSION}.dist-info"),
    ];
    vng().is_file()
        && dists
            .iter()
            .all(|d| site_packages().iter().any(|sp| sp.join(d).is_dir()))
}

fn virtme_ng_init_present() -> bool {
    site_packages()
        .iter()
        .any(|sp| sp.join("virtme/guest/bin/virtme-ng-init").is_file())
}

pub fn missing() -> Result<Missing> {
    let names: Vec<&str> = PACKAGES.iter().map(|(n, _)| *n).collect();
    let have = installed_packages(&names)?;
    let packages = names
        .into_iter()
        .filter(|n| !have.iter().any(|h| h == n))
        .collect();
    Ok(Missing {
        packages,
        venv: !venv_ok(),
        kernel: crate::vm::resolve_kernel(None).is_err(),
    })
}

/// Print what is missing; true when everything is there.
pub fn check() -> Result<bool> {
    let m = missing()?;
    if m.nothing() {
        println!("xtask setup: everything is installed (virtme-ng {VIRTME_NG_VERSION} in {VENV})");
        if !virtme_ng_init_present() {
            println!("warning: virtme-ng-init missing from the venv; vng falls back to the slower bash init");
        }
        return Ok(true);
    }
    m.report();
    Ok(false)
}

fn apt_get(args: &[&str]) -> Result<()> {
    proc::run(
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

pub fn main(check_only: bool) -> Result<i32> {
    if check_only {
        return Ok(if check()? { 0 } else { 1 });
    }
    let m = missing()?;
    if m.nothing() {
        println!("xtask setup: nothing to do, everything is installed");
        return Ok(0);
    }
    if !rustix::process::geteuid().is_root() {
        m.report();
        bail!("setup installs system packages and {VENV}: run it as root");
    }
    let mut pkgs = m.packages.clone();
    if m.kernel && !pkgs.contains(&"linux-image-amd64") {
        // The metapackage is installed but its 6.1 image is gone: reinstall.
        pkgs.push("linux-image-amd64");
    }
    if !pkgs.is_empty() {
        println!("xtask setup: installing {}", pkgs.join(" "));
        apt_get(&["update", "-q"])?;
        let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
        if m.kernel {
            args.push("--reinstall");
        }
        args.extend(pkgs.iter().copied());
        apt_get(&args)?;
        println!("xtask setup: installed {}", pkgs.join(" "));
    }
    if !venv_ok() {
        let python = Path::new(VENV).join("bin/python");
        if !python.is_file() {
            println!("xtask setup: creating virtualenv {VENV}");
            std::fs::create_dir_all(Path::new(VENV).parent().unwrap_or(Path::new("/")))
                .context("cannot create the venv's parent directory")?;
            proc::run(Command::new("python3").args(["-m", "venv", VENV]))?;
        }
        println!("xtask setup: installing virtme-ng=={VIRTME_NG_VERSION}, pyarrow=={PYARROW_VERSION}, duckdb=={DUCKDB_VERSION} and prometheus-client=={PROMETHEUS_CLIENT_VERSION} into {VENV}");
        proc::run(
            Command::new(Path::new(VENV).join("bin/pip"))
                .args(["install", "-q", "--disable-pip-version-check"])
                .arg(format!("virtme-ng=={VIRTME_NG_VERSION}"))
                .arg(format!("pyarrow=={PYARROW_VERSION}"))
                .arg(format!("duckdb=={DUCKDB_VERSION}"))
                .arg(format!("prometheus-client=={PROMETHEUS_CLIENT_VERSION}")),
        )?;
    }
    if !check()? {
        bail!("setup finished but something is still missing (see above)");
    }
    Ok(0)
}
