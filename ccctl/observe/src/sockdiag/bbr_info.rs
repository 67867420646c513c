//! The kernel's BBR state, `INET_DIAG_BBRINFO`.
use super::tcp_info::u32_ne;

/// `struct tcp_bbr_info` (`linux/inet_diag.h`, since 4.9): the model of a
/// socket running the kernel's `bbr`, as its `get_info` fills it. The dump
/// asks for it with the `INET_DIAG_VEGASINFO` extension bit, as `ss` does
/// (`idiag_ext` is a u8 with no room for bit 16); tcp_bbr.c answers that
/// bit with an `INET_DIAG_BBRINFO` attribute of five u32s, host order:
/// `bbr_bw_lo`, `bbr_bw_hi` (btl_bw, bytes/s, the long-term rate when
/// policed), `bbr_min_rtt` (µs, BBR's 10 s filter, not `tcpi_min_rtt`),
/// `bbr_pacing_gain`, `bbr_cwnd_gain` (<< 8: 256 = 1.0). BPF congestion
/// controls cannot fill it (`bpf_tcp_ca` has no `get_info`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BbrInfo {
    pub bw_bytes_per_s: u64,
    pub min_rtt_us: u32,
    pub pacing_gain: u32,
    pub cwnd_gain: u32,
}

impl BbrInfo {
    pub fn pacing_gain_f64(&self) -> f64 {
        f64::from(self.pacing_gain) / 256.0
    }
    pub fn cwnd_gain_f64(&self) -> f64 {
        f64::from(self.cwnd_gain) / 256.0
    }
}

/// `INET_DIAG_BBRINFO`'s attribute type (`linux/inet_diag.h`).
pub const INET_DIAG_BBRINFO: u16 = 16;

/// Parses an `INET_DIAG_BBRINFO` payload; `None` if shorter than its 20 bytes.
pub fn parse_bbr_info(b: &[u8]) -> Option<BbrInfo> {
    Some(BbrInfo {
        bw_bytes_per_s: u64::from(u32_ne(b, 4)?) << 32 | u64::from(u32_ne(b, 0)?),
        min_rtt_us: u32_ne(b, 8)?,
        pacing_gain: u32_ne(b, 12)?,
        cwnd_gain: u32_ne(b, 16)?,
    })
}
