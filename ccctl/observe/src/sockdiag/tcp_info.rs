//! `struct tcp_info` read at any length (the table in the module docs).

/// Shortest `struct tcp_info` blob [`parse_tcp_info`] accepts: everything up
/// to and including `tcpi_total_retrans` (offset 100, 4 bytes).
pub const TCP_INFO_MIN_LEN: usize = 104;

/// The `struct tcp_info` fields the lab uses; see the module docs for
/// offsets and units. `Option` fields are `None` when the kernel's
/// `tcp_info` is too short to contain them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TcpInfo {
    pub ca_state: u8,
    pub retransmits: u8,
    pub delivery_rate_app_limited: bool,
    pub rto_us: u32,
    pub snd_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub total_retrans: u32,
    /// bytes/s as the kernel reports it; `u64::MAX` = unlimited.
    pub pacing_rate: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub segs_out: Option<u32>,
    /// Segments received (for a sender: ACKs).
    pub segs_in: Option<u32>,
    pub notsent_bytes: Option<u32>,
    pub min_rtt_us: Option<u32>,
    pub data_segs_out: Option<u32>,
    /// bytes/s
    pub delivery_rate: Option<u64>,
    pub delivered: Option<u32>,
    pub bytes_sent: Option<u64>,
    pub bytes_retrans: Option<u64>,
}

pub(super) fn u32_ne(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

pub(super) fn u64_ne(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    Some(u64::from_ne_bytes([
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
    ]))
}

/// Parses one `struct tcp_info` blob of any length.
///
/// Returns `None` if `b` is shorter than [`TCP_INFO_MIN_LEN`] (104 bytes,
/// through `tcpi_total_retrans`). The non-`Option` fields all lie in that
/// prefix; each `Option` field is `Some` only if `b` covers it completely.
pub fn parse_tcp_info(b: &[u8]) -> Option<TcpInfo> {
    if b.len() < TCP_INFO_MIN_LEN {
        return None;
    }
    let byte = |off: usize| b.get(off).copied().unwrap_or(0);
    let u32p = |off: usize| u32_ne(b, off).unwrap_or(0);
    // `__u8 tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2;`
    // The first bitfield member is the least significant bit on
    // little-endian ABIs and the most significant one on big-endian ABIs.
    let app_limited_mask = if cfg!(target_endian = "little") {
        0x01
    } else {
        0x80
    };
    Some(TcpInfo {
        ca_state: byte(1),
        retransmits: byte(2),
        delivery_rate_app_limited: byte(7) & app_limited_mask != 0,
        rto_us: u32p(8),
        snd_mss: u32p(16),
        unacked: u32p(24),
        sacked: u32p(28),
        lost: u32p(32),
        retrans: u32p(36),
        rtt_us: u32p(68),
        rttvar_us: u32p(72),
        snd_ssthresh: u32p(76),
        snd_cwnd: u32p(80),
        total_retrans: u32p(100),
        pacing_rate: u64_ne(b, 104),
        bytes_acked: u64_ne(b, 120),
        bytes_received: u64_ne(b, 128),
        segs_out: u32_ne(b, 136),
        segs_in: u32_ne(b, 140),
        notsent_bytes: u32_ne(b, 144),
        min_rtt_us: u32_ne(b, 148),
        data_segs_out: u32_ne(b, 156),
        delivery_rate: u64_ne(b, 160),
        delivered: u32_ne(b, 192),
        bytes_sent: u64_ne(b, 200),
        bytes_retrans: u64_ne(b, 208),
    })
}
