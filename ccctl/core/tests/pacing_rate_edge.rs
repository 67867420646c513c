//! The BPF objects' pacing-rate arithmetic (bpf/bbr_rate.h, compiled for
//! the host as OUT_DIR/rate_probe) at the edge of u64: exactly tcp_bbr.c's
//! result wherever that does not wrap, and saturated (unpaced, capped by
//! sk_max_pacing_rate) where it would, never a wrapped small rate. The
//! expected values are computed here in u128, independently of the C code.
use std::io::Write;
use std::process::{Command, Stdio};

const BW_SCALE: u32 = 24;
const BBR_SCALE: u32 = 8;
const MARGIN: u128 = 1_000_000 / 100 * 99;

/// The C code's results for `(bw, mss, gain)` triples.
fn probe(cases: &[(u64, u32, u32)]) -> Vec<u64> {
    let mut child = Command::new(concat!(env!("OUT_DIR"), "/rate_probe"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running rate_probe");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for (bw, mss, gain) in cases {
            writeln!(stdin, "{bw} {mss} {gain}").expect("writing to rate_probe");
        }
    }
    let out = child.wait_with_output().expect("rate_probe output");
    assert!(out.status.success(), "rate_probe failed");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| l.parse().expect("a number"))
        .collect()
}

/// tcp_bbr.c's bbr_rate_bytes_per_sec() in exact arithmetic: `None` where
/// one of its u64 intermediate products would wrap.
fn exact(bw: u64, mss: u32, gain: u32) -> Option<u64> {
    let r = bw as u128 * mss as u128;
    let r = r * gain as u128;
    if r > u64::MAX as u128 {
        return None;
    }
    let r = (r >> BBR_SCALE) * MARGIN;
    if r > u64::MAX as u128 {
        return None;
    }
    Some((r >> BW_SCALE) as u64)
}

/// bw in BW_UNIT packets/us for `bit_per_s` at `mss`-byte packets.
fn bw_of(bit_per_s: f64, mss: u32) -> u64 {
    (bit_per_s / 8.0 / mss as f64 / 1e6 * (1u64 << BW_SCALE) as f64) as u64
}

#[test]
fn pacing_rate_is_exact_below_the_wrap_and_saturates_above_it() {
    let mss = 1448;
    // Gains: 1.0, STARTUP's 2.885, and patched_bbr's extreme: a probe gain of
    // 1.25 divided by Θ = 1/32 (x256 fixed point).
    let gains = [256, 739, 256 * 40];
    let mut cases = Vec::new();
    // 1 kbit/s to 10 Tbit/s, 40 steps per decade: covers both sides of the
    // wrap at every gain.
    let mut bits = 1e3;
    while bits <= 1e13 {
        for &g in &gains {
            cases.push((bw_of(bits, mss), mss, g));
        }
        bits *= 10f64.powf(1.0 / 40.0);
    }
    // The largest u32 bandwidth the BPF code holds, and u64's.
    for &g in &gains {
        cases.push((u32::MAX as u64, mss, g));
        cases.push((u64::MAX, mss, g));
        cases.push((0, mss, g));
    }
    let got = probe(&cases);
    assert_eq!(got.len(), cases.len());
    let (mut exact_n, mut saturated_n) = (0, 0);
    for (&(bw, mss, g), &r) in cases.iter().zip(&got) {
        match exact(bw, mss, g) {
            Some(want) => {
                exact_n += 1;
                assert_eq!(
                    r, want,
                    "bw {bw} mss {mss} gain {g}: {r}, tcp_bbr.c gives {want}"
                );
            }
            None => {
                saturated_n += 1;
                assert_eq!(
                    r,
                    u64::MAX,
                    "bw {bw} mss {mss} gain {g}: wraps in u64, got {r}"
                );
            }
        }
    }
    // Both sides of the edge were reached, at patched_bbr's gain within the
    // u32 bandwidths the BPF code holds (the case that wrapped before).
    assert!(
        exact_n > 100 && saturated_n > 10,
        "{exact_n} exact, {saturated_n} saturated"
    );
    assert!(
        exact(u32::MAX as u64, mss, 256 * 40).is_none(),
        "the test's extreme gain does not reach the wrap within a u32 bandwidth"
    );
    // Monotone in bw at every gain: a wrapped product would fall.
    for &g in &gains {
        let mut by_bw: Vec<(u64, u64)> = cases
            .iter()
            .zip(&got)
            .filter(|((bw, _, gg), _)| *gg == g && *bw <= u32::MAX as u64)
            .map(|(&(bw, _, _), &r)| (bw, r))
            .collect();
        by_bw.sort_unstable();
        let rates: Vec<u64> = by_bw.into_iter().map(|(_, r)| r).collect();
        assert!(
            rates.windows(2).all(|w| w[0] <= w[1]),
            "gain {g}: the rate falls as the bandwidth grows: {rates:?}"
        );
    }
}
