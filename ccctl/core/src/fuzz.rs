//! The one knob of every property test in the workspace.

/// Cases per property: `CCCTL_FUZZ_CASES` when set to a number, else
/// `default` (what fits CI's budget for that parser).
pub fn cases(default: u32) -> u32 {
    std::env::var("CCCTL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
