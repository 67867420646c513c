//! The fleet build of `ccctl` (`--no-default-features`: no `lab` feature)
//! links no lab crate; the default build does (so this test can fail).
use std::process::Command;

/// Crates only the lab needs: namespaces, the path emulator, the test VM.
const LAB_ONLY: [&str; 4] = ["ccctl-lab", "ccctl-testbed", "ccctl-path", "ccctl-vm"];

/// The package names in `cargo tree -p ccctl -e normal` with `extra` flags.
fn tree(extra: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", "ccctl", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn fleet_build_links_no_lab() {
    let fleet = tree(&["--no-default-features"]);
    assert!(fleet.iter().any(|p| p == "ccctl-observe"), "{fleet:?}");
    for lab in LAB_ONLY {
        assert!(
            !fleet.iter().any(|p| p == lab),
            "the fleet build of ccctl links {lab}"
        );
    }
    let full = tree(&[]);
    for lab in LAB_ONLY {
        assert!(
            full.iter().any(|p| p == lab),
            "the default build of ccctl lacks {lab}"
        );
    }
}
