//! One ring-buffer sample: decoding `struct ccctl_event` (the layout comes
//! from bindgen, see [`crate::abi`]) and naming its enumerations.
use std::net::{IpAddr, Ipv6Addr};

use crate::abi::{self, Plain};

/// Size of one event as the BPF side writes it.
pub const EVENT_SIZE: usize = std::mem::size_of::<abi::ccctl_event>();
const _: () = assert!(EVENT_SIZE == abi::CCCTL_EVENT_SIZE as usize);

/// A sample shorter than `struct ccctl_event`: the BPF objects and this
/// binary disagree on the ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ring-buffer sample of {len} bytes, expected at least {EVENT_SIZE} (struct ccctl_event)")]
pub struct ShortSample {
    pub len: usize,
}

/// Decode one ring-buffer sample. Longer samples are accepted (a newer BPF
/// side may append fields); shorter ones are rejected.
#[inline]
pub fn decode(sample: &[u8]) -> Result<abi::ccctl_event, ShortSample> {
    abi::ccctl_event::from_bytes(sample).ok_or(ShortSample { len: sample.len() })
}

/// Like [`decode`], without copying the event when the sample is aligned
/// for it (the ring buffer's records are): the consumer's per-event path.
#[inline]
pub fn decode_in_place(
    sample: &[u8],
) -> Result<std::borrow::Cow<'_, abi::ccctl_event>, ShortSample> {
    match abi::ccctl_event::ref_from_bytes(sample) {
        Some(ev) => Ok(std::borrow::Cow::Borrowed(ev)),
        None => decode(sample).map(std::borrow::Cow::Owned),
    }
}

/// The raw bytes of an event, as the BPF side would have written them
/// (synthetic events for tests and the benchmark).
pub fn to_bytes(ev: &abi::ccctl_event) -> [u8; EVENT_SIZE] {
    let mut out = [0u8; EVENT_SIZE];
    out.copy_from_slice(ev.as_bytes());
    out
}

/// An address field of an event or of `trace_cfg` (16 bytes in network
/// order, IPv4 written IPv4-mapped `::ffff:a.b.c.d`, see `ccctl_abi.h`) as
/// an address: IPv4 when it is IPv4-mapped, IPv6 otherwise.
#[inline]
pub fn addr(bytes: [u8; 16]) -> IpAddr {
    Ipv6Addr::from(bytes).to_canonical()
}

/// An address as the BPF side writes it: IPv6 as is, IPv4 IPv4-mapped.
pub fn addr_bytes(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// An address as written in traces: `198.18.0.1`, `fd00:ccc::1`.
pub fn addr_string(bytes: [u8; 16]) -> String {
    addr(bytes).to_string()
}

/// `CCCTL_BBR_*` as a name.
#[inline]
pub fn bbr_mode_name(mode: u8) -> &'static str {
    match mode as u32 {
        abi::CCCTL_BBR_STARTUP => "startup",
        abi::CCCTL_BBR_DRAIN => "drain",
        abi::CCCTL_BBR_PROBE_BW => "probe_bw",
        abi::CCCTL_BBR_PROBE_RTT => "probe_rtt",
        _ => "unknown",
    }
}

/// `CCCTL_MODEST_*` as a name.
#[inline]
pub fn modest_phase_name(phase: u8) -> &'static str {
    match phase as u32 {
        abi::CCCTL_MODEST_INACTIVE => "inactive",
        abi::CCCTL_MODEST_BINARY => "binary",
        abi::CCCTL_MODEST_LINEAR => "linear",
        _ => "unknown",
    }
}

/// The kernel's `TCP_CA_*` state as a name.
#[inline]
pub fn ca_state_name(state: u8) -> &'static str {
    match state {
        0 => "open",
        1 => "disorder",
        2 => "cwr",
        3 => "recovery",
        4 => "loss",
        _ => "unknown",
    }
}

/// A gain in `CCCTL_GAIN_UNIT` fixed point as a factor.
#[inline]
pub fn gain(fp: u32) -> f64 {
    fp as f64 / abi::CCCTL_GAIN_UNIT as f64
}

/// TCP D*'s mode (`CCCTL_DSTAR_*`, Fig. 1 of the TCP D* paper) as a name.
#[inline]
pub fn dstar_mode_name(mode: u8) -> &'static str {
    match mode as u32 {
        abi::CCCTL_DSTAR_DRAIN => "drain",
        abi::CCCTL_DSTAR_GAIN1 => "gain1",
        abi::CCCTL_DSTAR_GAIN2 => "gain2",
        _ => "unknown",
    }
}

/// Patched BBR's Θ (x `CCCTL_THETA_UNIT`) as a number.
#[inline]
pub fn theta(fp: u32) -> f64 {
    fp as f64 / abi::CCCTL_THETA_UNIT as f64
}

/// Bytes/s as bit/s; `u64::MAX` (saturated) for "unlimited" (`~0UL` pacing).
#[inline]
pub fn bits_per_s(bytes_per_s: u64) -> u64 {
    bytes_per_s.saturating_mul(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample_event() -> abi::ccctl_event {
        abi::ccctl_event {
            ts_ns: 123_456_789_000,
            flow_id: 7,
            saddr: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1],
            daddr: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 1, 2],
            sport: 40_000,
            dport: 5201,
            family: libc::AF_INET as u16,
            algo: abi::CCCTL_ALGO_BBR as u8,
            ca_state: 3,
            cwnd: 120,
            ssthresh: 0x7fff_ffff,
            pacing_rate: 1_250_000,
            delivery_rate: 1_000_000,
            mss: 1448,
            srtt_us: 40_500,
            min_rtt_us: 40_000,
            in_flight: 100,
            delivered: 10_000,
            lost: 12,
            total_retrans: 13,
            param_version: 2,
            bbr_mode: abi::CCCTL_BBR_PROBE_BW as u8,
            modest_phase: abi::CCCTL_MODEST_BINARY as u8,
            pacing_gain: 320,
            cwnd_gain: 512,
            btl_bw: 1_200_000,
            min_win: 80,
            max_win: 160,
            last_cwnd: 119,
            theta: 512,
            alpha: 256,
            on_us: 9_000,
            off_us: 71_000,
            bw_raw: 250_000,
            bw_corrected: 2_000_000,
            dstar_mode: 1,
            dstar_bdp: 2,
            dstar_gain_cwnd: 3,
            dstar_min_rtt_us: 4,
            dstar_min_rtt_stamp_ns: 5,
            bbr_min_rtt_us: 40_300,
            bbr_min_rtt_age_ms: 9_999,
            edt_lead_ms: 118,
            ..Default::default()
        }
    }

    /// An aligned sample is read in place, an unaligned one copied; both
    /// give the event, and a short one is refused either way.
    #[test]
    fn decodes_in_place_when_aligned() {
        let ev = sample_event();
        // u64 storage: 8-byte aligned, as the ring buffer's records are.
        let mut words = [0u64; EVENT_SIZE / 8 + 1];
        let bytes: &mut [u8] = bytemuck_bytes(&mut words);
        bytes[..EVENT_SIZE].copy_from_slice(&to_bytes(&ev));
        match decode_in_place(&bytes[..EVENT_SIZE]).unwrap() {
            std::borrow::Cow::Borrowed(e) => assert_eq!(e.as_bytes(), ev.as_bytes()),
            std::borrow::Cow::Owned(_) => panic!("an aligned sample was copied"),
        }
        bytes.copy_within(0..EVENT_SIZE, 1);
        match decode_in_place(&bytes[1..=EVENT_SIZE]).unwrap() {
            std::borrow::Cow::Owned(e) => assert_eq!(e.as_bytes(), ev.as_bytes()),
            std::borrow::Cow::Borrowed(_) => panic!("an unaligned sample read in place"),
        }
        assert!(decode_in_place(&bytes[..EVENT_SIZE - 1]).is_err());
    }

    fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64s are plain bytes; the slice covers exactly their storage.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
    }

    #[test]
    fn decodes_a_hand_built_event() {
        let ev = sample_event();
        let bytes = to_bytes(&ev);
        assert_eq!(bytes.len(), 256);
        // Offsets from the header, checked independently of bindgen.
        assert_eq!(&bytes[0..8], &123_456_789_000u64.to_ne_bytes());
        // IPv4 as ::ffff:a.b.c.d (RFC 4291 2.5.5.2), remote after the local.
        assert_eq!(&bytes[16..28], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&bytes[28..32], &[198, 18, 0, 1]);
        assert_eq!(&bytes[44..48], &[198, 18, 1, 2]);
        assert_eq!(&bytes[48..50], &40_000u16.to_ne_bytes());
        assert_eq!(bytes[54], abi::CCCTL_ALGO_BBR as u8);
        assert_eq!(&bytes[114..116], &118u16.to_ne_bytes());
        assert_eq!(&bytes[128..136], &1_200_000u64.to_ne_bytes());
        assert_eq!(&bytes[152..156], &512u32.to_ne_bytes());
        assert_eq!(&bytes[156..160], &256u32.to_ne_bytes());
        assert_eq!(&bytes[160..164], &9_000u32.to_ne_bytes());
        assert_eq!(&bytes[164..168], &71_000u32.to_ne_bytes());
        assert_eq!(&bytes[184..192], &250_000u64.to_ne_bytes());
        assert_eq!(&bytes[192..200], &2_000_000u64.to_ne_bytes());
        assert_eq!(bytes[200], 1);
        assert_eq!(&bytes[204..208], &2u32.to_ne_bytes());
        assert_eq!(&bytes[212..216], &3u32.to_ne_bytes());
        assert_eq!(&bytes[220..224], &4u32.to_ne_bytes());
        assert_eq!(&bytes[240..248], &5u64.to_ne_bytes());
        assert_eq!(&bytes[248..252], &40_300u32.to_ne_bytes());
        assert_eq!(&bytes[252..256], &9_999u32.to_ne_bytes());
        // Unaligned, and with a longer sample (appended fields are ignored).
        let mut buf = vec![0u8; 1];
        buf.extend_from_slice(&bytes);
        buf.extend_from_slice(&[0xff; 8]);
        let d = decode(&buf[1..]).expect("decodes");
        assert_eq!(d.ts_ns, 123_456_789_000);
        assert_eq!(d.flow_id, 7);
        assert_eq!(addr(d.saddr), "198.18.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(addr_string(d.daddr), "198.18.1.2");
        assert_eq!((d.sport, d.dport), (40_000, 5201));
        assert_eq!(crate::registry::kernel_name_of(d.algo), "bpf_bbr");
        assert_eq!(ca_state_name(d.ca_state), "recovery");
        assert_eq!(bbr_mode_name(d.bbr_mode), "probe_bw");
        assert_eq!(modest_phase_name(d.modest_phase), "binary");
        assert_eq!(gain(d.pacing_gain), 1.25);
        assert_eq!(gain(d.cwnd_gain), 2.0);
        assert_eq!(theta(d.theta), 0.5);
        assert_eq!(bits_per_s(d.pacing_rate), 10_000_000);
        assert_eq!(bits_per_s(u64::MAX), u64::MAX);
        assert_eq!(dstar_mode_name(d.dstar_mode), "gain1");
        assert_eq!(
            (
                d.dstar_bdp,
                d.dstar_gain_cwnd,
                d.dstar_min_rtt_us,
                d.dstar_min_rtt_stamp_ns
            ),
            (2, 3, 4, 5)
        );
        assert_eq!((d.bbr_min_rtt_us, d.bbr_min_rtt_age_ms), (40_300, 9_999));
        assert_eq!(d.edt_lead_ms, 118);
        assert_eq!(dstar_mode_name(9), "unknown");
    }

    #[test]
    fn rejects_short_samples() {
        let bytes = to_bytes(&sample_event());
        assert_eq!(decode(&bytes[..255]).err(), Some(ShortSample { len: 255 }));
        assert_eq!(decode(&[]).err(), Some(ShortSample { len: 0 }));
        let msg = decode(&bytes[..8]).unwrap_err().to_string();
        assert!(msg.contains("8 bytes") && msg.contains("256"), "{msg}");
    }

    #[test]
    fn addresses_of_both_families_as_text() {
        let v6: [u8; 16] = [0xfd, 0, 0x0c, 0xcc, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(addr_string(v6), "fd00:ccc::1");
        assert_eq!(addr_bytes("fd00:ccc::1".parse().unwrap()), v6);
        let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1];
        assert_eq!(addr_string(mapped), "198.18.0.1");
        assert_eq!(addr_bytes("198.18.0.1".parse().unwrap()), mapped);
        // An AF_INET6 socket's unspecified address stays IPv6.
        assert_eq!(addr_string([0; 16]), "::");
    }
}
