//! Load/unload behaviour and error paths, asserted the same way on the host
//! kernel (6.18) and in the VM (6.1).
use super::*;

/// `ccctl load bpf-bbr` registers bpf_bbr and pins it; `unload` takes both away.
pub fn load_registers_and_unload_removes(expect_link: bool) {
    let _clean = Clean::new();
    assert!(!registered("bpf_bbr"), "bpf_bbr registered before the test");

    let out = ccctl(&["load", "bpf-bbr"]).ok();
    assert!(
        out.stdout.contains("loaded bpf-bbr as `bpf_bbr`"),
        "{}",
        out.stdout
    );
    assert!(
        registered("bpf_bbr"),
        "bpf_bbr not in tcp_available_congestion_control: {:?}",
        available()
    );
    let dir = pin_root().join("bpf-bbr");
    assert!(dir.join("meta").exists(), "meta map not pinned");
    if expect_link {
        assert!(
            dir.join("link").exists(),
            "struct_ops link not pinned on a 6.4+ kernel"
        );
    } else {
        assert!(
            dir.join("ops").exists(),
            "struct_ops map not pinned on a pre-6.4 kernel"
        );
    }

    let status = ccctl(&["status", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&status.stdout).expect("status --json is JSON");
    let loaded = v["loaded"].as_array().expect("loaded array");
    assert_eq!(loaded.len(), 1, "{v}");
    assert_eq!(loaded[0]["kernel_name"], "bpf_bbr");
    assert_eq!(loaded[0]["registered"], true);
    let abi = loaded[0]["abi"].as_str().unwrap_or_default();
    assert_eq!(abi.contains("struct_ops link"), expect_link, "abi: {abi}");

    let list = ccctl(&["list", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&list.stdout).expect("list --json is JSON");
    let bbr = v
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "bpf-bbr"))
        .expect("bpf-bbr listed");
    assert_eq!(bbr["loaded"], true);

    ccctl(&["unload", "bpf-bbr"]).ok();
    assert!(
        !registered("bpf_bbr"),
        "bpf_bbr still registered after unload"
    );
    assert!(!pin_root().exists(), "pins left behind: {:?}", snapshot());
}

/// Loading twice is not an error; unloading twice neither.
pub fn load_twice_is_ok() {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let again = ccctl(&["load", "bpf-bbr"]).ok();
    assert!(again.stdout.contains("already loaded"), "{}", again.stdout);
    assert!(registered("bpf_bbr"));
    ccctl(&["unload", "bpf-bbr"]).ok();
    let again = ccctl(&["unload", "bpf-bbr"]).ok();
    assert!(again.stdout.contains("not loaded"), "{}", again.stdout);
}

/// `--default` switches the sysctl and `unload` puts the old value back.
pub fn default_is_set_and_restored() {
    let _clean = Clean::new();
    let before = default_cc();
    assert_ne!(before, "bpf_bbr");
    ccctl(&["load", "bpf-bbr", "--default"]).ok();
    assert_eq!(default_cc(), "bpf_bbr");
    let st = ccctl(&["status", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&st.stdout).unwrap_or_default();
    assert_eq!(
        v["loaded"][0]["restores_default"],
        serde_json::Value::String(before.clone()),
        "{v}"
    );
    let out = ccctl(&["unload", "bpf-bbr"]).ok();
    assert!(
        out.stdout.contains(&format!("restored to {before}")),
        "{}",
        out.stdout
    );
    assert_eq!(default_cc(), before);
}

/// Every refusal names the problem and leaves the machine as it was.
pub fn errors_are_clear_and_change_nothing() {
    let _clean = Clean::new();
    let dir = tempdir("errors");
    let before = snapshot();

    ccctl(&["load", "nosuch"])
        .failed_with(&["unknown algorithm `nosuch`", "known algorithms: bpf-bbr"]);
    assert_eq!(snapshot(), before);
    // `bbr` is the kernel's BBR: the old spelling is refused with a hint.
    ccctl(&["load", "bbr"]).failed_with(&["`bbr` is the kernel's own", "`bpf-bbr`"]);
    ccctl(&["tune", "bbr"]).failed_with(&["`bbr` is the kernel's own", "`bpf-bbr`"]);
    assert_eq!(snapshot(), before);

    ccctl_env(
        &["load", "bpf-bbr"],
        &[("CCCTL_VMLINUX_BTF", "/nonexistent/vmlinux")],
    )
    .failed_with(&[
        "no kernel BTF at /nonexistent/vmlinux",
        "CONFIG_DEBUG_INFO_BTF",
    ]);
    assert_eq!(snapshot(), before);

    let btf = btf_without_struct_ops(&dir);
    ccctl_env(
        &["load", "bpf-bbr"],
        &[("CCCTL_VMLINUX_BTF", btf.to_str().unwrap_or_default())],
    )
    .failed_with(&[
        "cannot run BPF congestion controls",
        "bpf_struct_ops_tcp_congestion_ops",
    ]);
    assert_eq!(snapshot(), before);

    let not_bpffs = dir.to_str().unwrap_or_default();
    ccctl_env(&["load", "bpf-bbr"], &[("CCCTL_BPFFS", not_bpffs)])
        .failed_with(&["bpffs is not mounted at", "mount -t bpf bpf"]);
    assert_eq!(snapshot(), before);

    let out =
        ccctl_env(&["load", "bpf-bbr"], &[("CCCTL_FAULT_INJECT", "verifier")]).failed_with(&[
            "verifier rejected `bpf-bbr`",
            "no write support to tcp_sock",
        ]);
    assert!(
        out.stderr.lines().count() <= 40,
        "verifier tail should be short:\n{}",
        out.stderr
    );
    assert_eq!(snapshot(), before);

    // Without root: drop to nobody with no capabilities.
    let bin = ccctl_bin();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&bin)
        .args(["load", "bpf-bbr"])
        .output()
        .expect("running setpriv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("insufficient privileges") && stderr.contains("CAP_BPF"),
        "{stderr}"
    );
    assert_eq!(snapshot(), before);

    // Flags: clap names the problem.
    ccctl(&["unload"]).failed_with(&["--all"]);
    ccctl(&["load"]).failed_with(&["<ALGO>"]);
    assert_eq!(snapshot(), before);
}

/// A minimal system (a virtme-ng VM) boots without bpffs: `ccctl load`
/// mounts it at /sys/fs/bpf itself (mode 0700, as bpftool does), says so on
/// stderr, pins there, and `unload` leaves nothing. Run in a private mount
/// namespace so the rest of the machine keeps its own bpffs.
pub fn load_mounts_a_missing_bpffs() {
    let _clean = Clean::new();
    assert!(!registered("bpf_bbr"), "bpf_bbr registered before the test");
    let script = r#"
bin=$1
# Whatever happens below, take our registration away (6.1: it outlives us).
trap '"$bin" unload --all >/dev/null 2>&1' EXIT
mounted() { grep -q ' /sys/fs/bpf bpf ' /proc/self/mounts; }
while mounted; do umount /sys/fs/bpf || exit 90; done
"$bin" load bpf-bbr || exit 91
mounted || exit 92
echo "mode $(stat -c %a /sys/fs/bpf)"
test -d /sys/fs/bpf/ccctl/bpf-bbr || exit 93
"$bin" unload bpf-bbr || exit 94
test -e /sys/fs/bpf/ccctl && exit 95
exit 0
"#;
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(ccctl_bin())
        .output()
        .expect("running unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "exit {:?} (90 umount, 91 load refused, 92 not mounted after load, 93 no pins, \
         94 unload, 95 pins left)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.code()
    );
    assert!(
        stderr.contains("bpffs was not mounted: mounted it at /sys/fs/bpf"),
        "load did not say it mounted bpffs:\n{stderr}"
    );
    // bpffs keeps the sticky bit on its root; a default mount would be 1777.
    assert!(stdout.contains("mode 1700"), "bpffs mode: {stdout}");
    assert!(
        !registered("bpf_bbr"),
        "bpf_bbr still registered after the private-namespace unload"
    );
}

/// Issue 14: pins are root's alone (directories 0700, pins 0600, owned by
/// root) and a symbolic link planted in the pin tree is refused by every
/// command that would follow it, with nothing changed.
pub fn pins_are_private_and_planted_links_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let _clean = Clean::new();
    let root = pin_root();
    let dir = root.join("bpf-bbr");
    ccctl(&["load", "bpf-bbr"]).ok();
    for d in [&root, &dir] {
        let md = fs::symlink_metadata(d).expect("pin dir");
        assert!(md.is_dir(), "{} is not a directory", d.display());
        assert_eq!(
            md.permissions().mode() & 0o7777,
            0o700,
            "mode of {}",
            d.display()
        );
        assert_eq!(md.uid(), 0, "owner of {}", d.display());
    }
    for e in fs::read_dir(&dir).expect("pins") {
        let md = e.expect("pin").metadata().expect("pin metadata");
        assert_eq!(
            md.permissions().mode() & 0o077,
            0,
            "a pin readable by others: {md:?}"
        );
    }
    ccctl(&["unload", "bpf-bbr"]).ok();

    // Plant <bpffs>/ccctl/bbr -> a directory of somebody else's.
    let made_root = !root.exists();
    if made_root {
        fs::create_dir(&root).expect("creating the pin root");
    }
    let elsewhere = root.with_file_name(format!("ccctl-test-elsewhere-{}", std::process::id()));
    fs::create_dir(&elsewhere).expect("creating the link target");
    std::os::unix::fs::symlink(&elsewhere, &dir).expect("planting a symlink in bpffs");
    let before = snapshot();
    let refused = ["refusing to follow the symbolic link", "/ccctl/bpf-bbr"];
    ccctl(&["load", "bpf-bbr"]).failed_with(&refused);
    ccctl(&["unload", "bpf-bbr"]).failed_with(&refused);
    ccctl(&["status"]).failed_with(&refused);
    ccctl(&["tune", "bpf-bbr", "--cwnd-gain", "2.5"]).failed_with(&refused);
    let after = snapshot();
    let empty = fs::read_dir(&elsewhere).map(|mut d| d.next().is_none());
    let _ = fs::remove_file(&dir);
    let _ = fs::remove_dir(&elsewhere);
    if made_root {
        let _ = fs::remove_dir(&root);
    }
    assert_eq!(after, before, "a refused command changed something");
    assert!(
        matches!(empty, Ok(true)),
        "ccctl wrote through the planted link"
    );
    assert!(
        !registered("bpf_bbr"),
        "bpf_bbr registered through a planted link"
    );
}

/// As an unprivileged user (nobody, no groups), every command that needs
/// privileges says which capabilities are missing, the same way, and no
/// cause of the error is printed twice; nothing is loaded meanwhile.
pub fn unprivileged_commands_say_what_is_missing_once() {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let before = snapshot();
    let bin = ccctl_bin();
    let bin = bin.to_str().expect("utf-8 path");
    for args in [
        &["status"][..],
        &["tune", "bpf-bbr"],
        &["tune"],
        &["load", "modest-bbr"],
        &["unload", "bpf-bbr"],
        &["trace", "--follow", "--duration", "1"],
    ] {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin])
            .args(args)
            .output()
            .expect("running setpriv");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?} ran unprivileged");
        assert!(
            stderr.contains("insufficient privileges: missing CAP_BPF and CAP_NET_ADMIN"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            stderr.matches("ccctl: error:").count(),
            1,
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("os error"), "{args:?}: {stderr}");
    }
    assert_eq!(snapshot(), before, "nothing changed");
}

/// Pins an older ccctl made under the former user name `bbr` are moved to
/// `bpf-bbr` by the next command, which then sees, and can unload, them.
pub fn pins_under_the_old_name_move_to_the_new() {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let (old, new) = (pin_root().join("bbr"), pin_root().join("bpf-bbr"));
    fs::rename(&new, &old).expect("making the old layout");
    let out = ccctl(&["status"]).ok();
    assert!(
        out.stderr
            .contains("repaired: moved the pins of bpf_bbr from")
            && out.stdout.contains("bpf-bbr"),
        "{}\n{}",
        out.stderr,
        out.stdout
    );
    assert!(new.is_dir() && !old.exists());
    ccctl(&["unload", "bpf-bbr"]).ok();
    assert!(!registered("bpf_bbr") && !new.exists());
}

/// `ccctl load NAME --object FILE`: bpf_bbr compiled from bpf/bbr.bpf.c
/// the way ccctl's build does ([`super::bpf_object`]) loads from the file
/// as `bpf-bbr`, pinned like the built-in one, its shared trace maps under
/// ccctl's shared pin directory (not libbpf's default), and the load-time
/// configuration reaches it: with `CCCTL_FAULT_INJECT=verifier`, which
/// only `ccctl_cfg` in the object's .rodata carries to the program, the
/// verifier refuses it. Refused, changing nothing: the file as another
/// algorithm (its registration names bpf_bbr), a file that is no BPF
/// object, a missing file, and any file while the algorithm is loaded.
pub fn load_from_an_object_file() {
    let _clean = Clean::new();
    let dir = tempdir("object-file");
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let compiler =
        super::bpf_object::BpfCompiler::new(&workspace, &dir).expect("libbpf headers for clang");
    let obj = dir.join("bbr.bpf.o");
    compiler
        .compile("bbr", &[], &obj)
        .expect("compiling bpf/bbr.bpf.c");
    let obj_s = obj.to_str().expect("a UTF-8 temp path");
    let before = snapshot();

    let out = ccctl_env(
        &["load", "bpf-bbr", "--object", obj_s],
        &[("CCCTL_FAULT_INJECT", "verifier")],
    )
    .failed_with(&[
        "verifier rejected `bpf-bbr`",
        "no write support to tcp_sock",
    ]);
    assert!(!out.stdout.contains("loaded"), "{}", out.stdout);
    assert_eq!(snapshot(), before, "a refused object changed the state");

    ccctl(&["load", "dstar", "--object", obj_s]).failed_with(&[
        "is not a BPF object of dstar",
        "named `bpf_bbr`, not `dstar`",
    ]);
    assert_eq!(snapshot(), before);
    let text = dir.join("not-an-object.bpf.o");
    fs::write(&text, "SEC(\"struct_ops\")\n").expect("writing a text file");
    ccctl(&[
        "load",
        "bpf-bbr",
        "--object",
        text.to_str().unwrap_or_default(),
    ])
    .failed_with(&["not an ELF file"]);
    ccctl(&["load", "bpf-bbr", "--object", "/bin/true"]).failed_with(&["opening /bin/true"]);
    ccctl(&["load", "bpf-bbr", "--object", "/nonexistent/x.bpf.o"])
        .failed_with(&["reading /nonexistent/x.bpf.o"]);
    assert_eq!(snapshot(), before);

    let out = ccctl(&["load", "bpf-bbr", "--object", obj_s]).ok();
    assert!(
        out.stdout.contains("loaded bpf-bbr as `bpf_bbr`")
            && out
                .stdout
                .contains(&format!("from the object file {obj_s}")),
        "{}",
        out.stdout
    );
    assert!(registered("bpf_bbr"));
    for pin in [
        "bpf-bbr/link",
        "bpf-bbr/meta",
        "bpf-bbr/params",
        "shared/trace_events",
    ] {
        assert!(pin_root().join(pin).exists(), "no pin {pin}");
    }
    assert!(
        !std::path::Path::new("/sys/fs/bpf/trace_events").exists(),
        "the trace maps were pinned at libbpf's default root"
    );
    let loaded = snapshot();
    ccctl(&["load", "bpf-bbr", "--object", obj_s])
        .failed_with(&["bpf-bbr is already loaded", "Unload it first"]);
    assert_eq!(snapshot(), loaded);

    ccctl(&["unload", "bpf-bbr"]).ok();
    assert!(!registered("bpf_bbr"));
    assert_eq!(snapshot(), before, "unload left something behind");
}
