//! No import cycle between the top-level modules of any crate of the
//! workspace: for each crate under `ccctl/`, which of its modules each
//! module names (`crate::m`, `use crate::{m, ...}`, and `super::m` from a
//! top-level module file), test code left out, and no path back.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source of a file without its tests: from `#[cfg(test)]` followed by
/// a `mod` to the end (the convention in this tree), and line comments.
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                let n = next.trim_start();
                if n.starts_with("mod ") || n.starts_with("pub(crate) mod ") {
                    if n.ends_with(';') {
                        lines.next();
                        continue;
                    }
                    break;
                }
            }
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The identifiers following `prefix` in `text` (`crate::` -> `loader`).
fn names_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter(|(i, _)| {
            // not `foo_crate::` or `$crate::`
            !text[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// Top-level names inside `use crate::{a, b::c, d::{e, f}}` groups.
fn grouped_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::{") {
        let mut depth = 0;
        let mut item = String::new();
        for c in text[i + "crate::{".len()..].chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(item.clone());
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
    }
    out.into_iter()
        .filter_map(|s| {
            let s = s.trim();
            let end = s
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len());
            (end > 0).then(|| s[..end].to_string())
        })
        .collect()
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir)
        .expect("reading a source directory")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module -> the sibling modules it names, for the crate at `src`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let module_of = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let name = first.trim_end_matches(".rs");
        (!matches!(name, "lib" | "main")).then(|| name.to_string())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|p| module_of(p)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(m) = module_of(f) else { continue };
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "tests.rs" || f.components().any(|c| c.as_os_str() == "tests") {
            continue;
        }
        let text = without_tests(&std::fs::read_to_string(f).expect("reading a source file"));
        let mut refs: Vec<String> = names_after(&text, "crate::")
            .into_iter()
            .map(str::to_string)
            .collect();
        refs.extend(grouped_names(&text));
        // `super::` from a top-level module's own file is the crate root.
        if f.parent() == Some(src)
            || name == "mod.rs" && f.parent().and_then(Path::parent) == Some(src)
        {
            refs.extend(
                names_after(&text, "super::")
                    .into_iter()
                    .map(str::to_string),
            );
        }
        let e = g.entry(m.clone()).or_default();
        for r in refs {
            if r != m && modules.contains(&r) {
                e.insert(r);
            }
        }
    }
    g
}

/// A cycle in `g`, if any, as the path around it.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let start = path.iter().position(|p| p == m).unwrap_or(0);
                    let mut c = path[start..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, g, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if !state.contains_key(n.as_str()) {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_checker_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&g).map(|c| c.len()), Some(4));
    let text = "use crate::{\n    abi::{self, Plain},\n    pins::{a, b},\n    kernel,\n};\nx = crate::loader::load();";
    let mut names = grouped_names(text);
    names.extend(names_after(text, "crate::").into_iter().map(str::to_string));
    for want in ["abi", "pins", "kernel", "loader"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
}

#[test]
fn no_crate_has_an_import_cycle() {
    let ccctl = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for e in std::fs::read_dir(&ccctl).expect("reading ccctl/").flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let g = graph(&src);
        if let Some(c) = cycle(&g) {
            panic!("import cycle in {}: {}", src.display(), c.join(" -> "));
        }
        checked += 1;
    }
    assert!(
        checked >= 7,
        "only {checked} crates found under {}",
        ccctl.display()
    );
}
