//! Tables in `docs/` generated from the code (tests only): each sits
//! between two HTML comment markers, and a unit test compares it with what
//! the code generates now. `CCCTL_WRITE_DOCS=1` rewrites the block instead.

/// Checks (or, with `CCCTL_WRITE_DOCS` set, rewrites) the block of
/// `docs/<file>` between `begin` (a whole line) and `end`: it must be `want`.
/// `test` names the unit test, for the message.
pub(crate) fn check_block(file: &str, begin: &str, end: &str, want: &str, test: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading docs/{file}: {e}"));
    let start = text
        .find(begin)
        .unwrap_or_else(|| panic!("docs/{file} has no begin marker {begin:?}"))
        + begin.len();
    let end = start
        + text[start..]
            .find(end)
            .unwrap_or_else(|| panic!("docs/{file} has no end marker {end:?}"));
    if std::env::var_os("CCCTL_WRITE_DOCS").is_some() {
        let new = format!("{}{want}{}", &text[..start], &text[end..]);
        std::fs::write(&path, new).unwrap_or_else(|e| panic!("writing docs/{file}: {e}"));
        return;
    }
    assert_eq!(
        &text[start..end],
        want,
        "docs/{file}'s generated table differs from the code; \
         CCCTL_WRITE_DOCS=1 cargo test -p ccctl-core {test} rewrites it"
    );
}
