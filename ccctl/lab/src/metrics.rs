//! The measures the lab reports, as plain functions of measured numbers,
//! each written from its paper's formula:
//!
//! - Jain's fairness index, Ware et al.'s harm paper eq. 1;
//! - Ware et al.'s harm: `(x - y) / x` for more-is-better metrics
//!   (throughput), `(y - x) / x` for less-is-better ones (delay), where `x`
//!   is the flow's performance alone and `y` with the competitor;
//! - Ware et al.'s harm paper eq. 2, the signed linear metric behind `m_f`
//!   (fairness: `x = m(beta)`, `y = m(alpha)`) and `m_h` (harm:
//!   `x = m(beta)` against alpha, `y = m(beta_1)` against another beta).
//!
//! Functions return `None` where the formula is undefined (no samples, a
//! zero denominator) rather than a NaN that would poison later averages.

/// Jain's fairness index: `(sum x)^2 / (n * sum x^2)`, from 1/n (one flow
/// takes everything) to 1 (equal shares).
pub fn jain_fairness(xs: &[f64]) -> Option<f64> {
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().sum();
    let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
    (n > 0.0 && sum_sq > 0.0).then(|| sum * sum / (n * sum_sq))
}

/// Harm for a more-is-better metric (throughput): `(x - y) / x`.
/// 0 = unharmed, 1 = starved, negative = the competitor helped.
pub fn harm_more_is_better(solo: f64, with_competitor: f64) -> Option<f64> {
    (solo > 0.0).then(|| (solo - with_competitor) / solo)
}

/// Harm for a less-is-better metric (RTT, completion time): `(y - x) / x`.
/// 0 = unharmed, 1 = doubled.
pub fn harm_less_is_better(solo: f64, with_competitor: f64) -> Option<f64> {
    (solo > 0.0).then(|| (with_competitor - solo) / solo)
}

/// harm-vs-fairness eq. 2: `1 - y/x` if `x/y < 1`, 0 if `x = y`, else
/// `x/y - 1`. Negative when `x` is the smaller of the two, positive when it
/// is the larger; linear on both sides, so values can be averaged.
pub fn eq2(x: f64, y: f64) -> Option<f64> {
    if !(x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite()) {
        return None;
    }
    let r = x / y;
    Some(if r < 1.0 {
        1.0 - y / x
    } else if r == 1.0 {
        0.0
    } else {
        r - 1.0
    })
}

/// `m_f`: eq. 2 with `x = m(beta)`, `y = m(alpha)` from the alpha-vs-beta run.
pub fn fairness_m_f(beta_vs_alpha: f64, alpha: f64) -> Option<f64> {
    eq2(beta_vs_alpha, alpha)
}

/// `m_h`: eq. 2 with `x = m(beta)` from the alpha-vs-beta run and
/// `y = m(beta_1)` from the beta-vs-beta run. Negative: alpha harms beta more
/// than beta harms itself.
pub fn harm_m_h(beta_vs_alpha: f64, beta_vs_beta: f64) -> Option<f64> {
    eq2(beta_vs_alpha, beta_vs_beta)
}

pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The p-th percentile (0 < p <= 100) by the nearest-rank method: the
/// smallest sample with at least p % of the samples at or below it.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Goodput in bit/s of `bytes` delivered over `secs` seconds.
pub fn goodput_bps(bytes: u64, secs: f64) -> Option<f64> {
    (secs > 0.0).then(|| bytes as f64 * 8.0 / secs)
}

/// Share of the bottleneck the flows used together: the bits they delivered,
/// each flow `(goodput bit/s, seconds it was measured)`, over what the link
/// could carry in the run's window of `run_secs` seconds. Flows that do not
/// overlap in time do not add up their rates: five flows one after the
/// other at the full rate use the link once, not five times.
pub fn link_utilization(flows: &[(f64, f64)], capacity_bps: f64, run_secs: f64) -> Option<f64> {
    (capacity_bps > 0.0 && run_secs > 0.0)
        .then(|| flows.iter().map(|(g, s)| g * s).sum::<f64>() / (capacity_bps * run_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn jain_by_hand() {
        // Equal shares: 1.
        assert!(close(jain_fairness(&[5.0, 5.0, 5.0]), 1.0));
        // One flow takes all of n = 4: 1/n.
        assert!(close(jain_fairness(&[8.0, 0.0, 0.0, 0.0]), 0.25));
        // 5.6 vs 22.1 Mbit/s (Cubic vs BBR measured here): 27.7^2 / (2 * (31.36 + 488.41)).
        assert!(close(jain_fairness(&[5.6, 22.1]), 767.29 / 1039.54));
        assert_eq!(jain_fairness(&[]), None);
        assert_eq!(jain_fairness(&[0.0, 0.0]), None);
    }

    #[test]
    fn ware_harm_by_hand() {
        // Solo 20 Mbit/s, 5 Mbit/s against a competitor: 75 % throughput harm.
        assert!(close(harm_more_is_better(20.0, 5.0), 0.75));
        // Solo RTT 40 ms, 60 ms with a competitor: 50 % latency harm.
        assert!(close(harm_less_is_better(40.0, 60.0), 0.5));
        // A competitor that helps gives negative harm.
        assert!(close(harm_more_is_better(10.0, 12.0), -0.2));
        assert_eq!(harm_more_is_better(0.0, 1.0), None);
    }

    #[test]
    fn eq2_by_hand() {
        // x < y: 1 - y/x = 1 - 10/5 = -1.
        assert!(close(eq2(5.0, 10.0), -1.0));
        // x = y: 0.
        assert!(close(eq2(7.0, 7.0), 0.0));
        // x > y: x/y - 1 = 10/4 - 1 = 1.5.
        assert!(close(eq2(10.0, 4.0), 1.5));
        // Symmetric magnitudes: swapping x and y flips the sign.
        assert!(close(eq2(4.0, 10.0), -1.5));
        assert_eq!(eq2(0.0, 1.0), None);
        assert_eq!(eq2(1.0, f64::NAN), None);
    }

    #[test]
    fn m_f_and_m_h_follow_figure_1() {
        // alpha = BBR gets 22.1, beta = Cubic 5.6 when they compete; two
        // Cubic flows get 13.9 each. m_f = eq2(5.6, 22.1), m_h = eq2(5.6, 13.9).
        assert!(close(fairness_m_f(5.6, 22.1), 1.0 - 22.1 / 5.6));
        assert!(close(harm_m_h(5.6, 13.9), 1.0 - 13.9 / 5.6));
        assert!(
            harm_m_h(5.6, 13.9).is_some_and(|h| h < 0.0),
            "BBR harms Cubic: negative"
        );
    }

    #[test]
    fn percentile_nearest_rank_by_hand() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        // p95 of 1..20: rank ceil(0.95 * 20) = 19 -> 19.
        assert!(close(percentile(&xs, 95.0), 19.0));
        assert!(close(percentile(&xs, 50.0), 10.0));
        assert!(close(percentile(&xs, 100.0), 20.0));
        assert!(close(percentile(&[3.0, 1.0, 2.0], 1.0), 1.0));
        assert_eq!(percentile(&[], 95.0), None);
        assert_eq!(percentile(&xs, 0.0), None);
    }

    #[test]
    fn goodput_utilization_and_mean_by_hand() {
        // 25 MB in 10 s = 20 Mbit/s.
        assert!(close(goodput_bps(25_000_000, 10.0), 20e6));
        // Two concurrent flows over the same 10 s: rates add up.
        assert!(close(
            link_utilization(&[(9e6, 10.0), (9e6, 10.0)], 20e6, 10.0),
            0.9
        ));
        // A 7 s flow at 20 Mbit/s, then four flows of 1 s at 5 Mbit/s each
        // in the last second of an 8 s window: (140 + 20) Mbit / 160 Mbit.
        let late = [(20e6, 7.0), (5e6, 1.0), (5e6, 1.0), (5e6, 1.0), (5e6, 1.0)];
        assert!(close(link_utilization(&late, 20e6, 8.0), 1.0));
        assert_eq!(link_utilization(&[(1e6, 1.0)], 20e6, 0.0), None);
        assert!(close(mean(&[1.0, 2.0, 6.0]), 3.0));
        assert_eq!(mean(&[]), None);
        assert_eq!(goodput_bps(1, 0.0), None);
    }
}
