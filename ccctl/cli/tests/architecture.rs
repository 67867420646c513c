//! docs/architecture.md's map of crates and modules is the tree's: the
//! block between its markers is generated from `ccctl/*/Cargo.toml` (the
//! ccctl crates each depends on) and `ccctl/*/src` (its modules), and this
//! test fails when they drift apart. `CCCTL_WRITE_DOCS=1 cargo test -p
//! ccctl --test architecture` rewrites the block.
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- crates and modules: generated from the tree -->\n";
const END: &str = "<!-- end of crates and modules -->";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Names in a directory, sorted.
fn entries(dir: &Path) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        e.path().is_dir(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// `a, b, c/{d, e}`: the modules under `src` (files and directories; a
/// file `m.rs` beside a directory `m/` is one module), without the crate
/// root and test-only files.
fn modules(src: &Path) -> String {
    let mut map: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (name, is_dir) in entries(src) {
        if is_dir {
            let subs: Vec<String> = entries(&src.join(&name))
                .into_iter()
                .filter(|(n, d)| !d && n.ends_with(".rs") && n != "mod.rs" && n != "tests.rs")
                .map(|(n, _)| n.trim_end_matches(".rs").to_string())
                .collect();
            map.insert(name, subs);
        } else if let Some(m) = name.strip_suffix(".rs") {
            if !matches!(m, "lib" | "main" | "tests") {
                map.entry(m.to_string()).or_default();
            }
        }
    }
    if map.is_empty() {
        return "(one module: lib.rs)".into();
    }
    map.into_iter()
        .map(|(m, subs)| {
            if subs.is_empty() {
                m
            } else {
                format!("{m}/{{{}}}", subs.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ccctl crates `[dependencies]` of a manifest names, `(optional)` marked.
fn ccctl_deps(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
            continue;
        }
        if in_deps && t.starts_with("ccctl-") {
            let name = t.split([' ', '=']).next().unwrap_or("").to_string();
            if t.contains("optional = true") {
                out.push(format!("{name} (optional)"));
            } else {
                out.push(name);
            }
        }
    }
    out
}

fn package_name(manifest: &str) -> String {
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("name = \""))
        .map(|n| n.trim_end_matches('"').to_string())
        .unwrap_or_default()
}

/// The generated block: one paragraph per crate.
fn map() -> String {
    let mut out = String::from("```text\n");
    for (dir, is_dir) in entries(&workspace().join("ccctl")) {
        let root = workspace().join("ccctl").join(&dir);
        let Ok(manifest) = std::fs::read_to_string(root.join("Cargo.toml")) else {
            continue;
        };
        if !is_dir {
            continue;
        }
        let deps = ccctl_deps(&manifest);
        out.push_str(&format!(
            "{} (ccctl/{dir}){}\n  {}\n",
            package_name(&manifest),
            if deps.is_empty() {
                String::new()
            } else {
                format!(" -> {}", deps.join(", "))
            },
            modules(&root.join("src"))
        ));
    }
    out.push_str("```\n");
    out
}

#[test]
fn the_map_of_crates_and_modules_matches_the_tree() {
    let path = workspace().join("docs/architecture.md");
    let text = std::fs::read_to_string(&path).expect("reading docs/architecture.md");
    let start = text
        .find(BEGIN)
        .expect("docs/architecture.md has the begin marker")
        + BEGIN.len();
    let end = start
        + text[start..]
            .find(END)
            .expect("docs/architecture.md has the end marker");
    let want = map();
    if std::env::var_os("CCCTL_WRITE_DOCS").is_some() {
        std::fs::write(&path, format!("{}{want}{}", &text[..start], &text[end..]))
            .expect("writing docs/architecture.md");
        return;
    }
    assert_eq!(
        &text[start..end],
        want,
        "docs/architecture.md's map differs from the tree; \
         CCCTL_WRITE_DOCS=1 cargo test -p ccctl --test architecture rewrites it"
    );
    // Every crate directory appears, so a new crate cannot be left out.
    for (dir, is_dir) in entries(&workspace().join("ccctl")) {
        if is_dir {
            assert!(want.contains(&format!("(ccctl/{dir})")), "{dir} missing");
        }
    }
}
