//! Synthetic events: plausible, all different, for benchmarks of the
//! consumer side and for tests of everything that takes events.
use crate::abi;

/// A plausible event, different for every `i`: 16 flows of four algorithms
/// with drifting windows, rates and RTTs.
pub fn synthetic_event(i: u64) -> abi::ccctl_event {
    let flow = i % 16;
    let algo = (flow % 4 + 1) as u8;
    let wave = (i * 7919) % 1000;
    abi::ccctl_event {
        ts_ns: 1_000_000_000 + i * 1_500,
        flow_id: flow + 1,
        saddr: synthetic_addr(flow, 0, 1),
        daddr: synthetic_addr(flow, 1, 2),
        sport: 40_000 + flow as u16,
        dport: 5201,
        family: if flow % 4 == 3 {
            libc::AF_INET6
        } else {
            libc::AF_INET
        } as u16,
        algo,
        ca_state: if wave < 950 { 0 } else { 3 },
        cwnd: 10 + wave as u32,
        ssthresh: 0x7fff_ffff,
        pacing_rate: 1_000_000 + wave * 12_345,
        delivery_rate: if i % 3 == 0 {
            0
        } else {
            900_000 + wave * 11_111
        },
        mss: 1448,
        srtt_us: 40_000 + (wave as u32) * 7,
        min_rtt_us: 40_000,
        in_flight: 5 + wave as u32,
        edt_lead_ms: (wave % 7) as u16,
        delivered: i as u32,
        lost: (i / 1000) as u32,
        total_retrans: (i / 900) as u32,
        param_version: 1,
        bbr_mode: (i / 10_000 % 4) as u8,
        modest_phase: if algo as u32 == abi::CCCTL_ALGO_MODEST_BBR {
            (i / 5_000 % 3) as u8
        } else {
            0
        },
        pacing_gain: [256, 320, 192, 256][(i % 4) as usize],
        cwnd_gain: 512,
        btl_bw: 1_100_000 + wave * 10_000,
        min_win: if algo as u32 == abi::CCCTL_ALGO_MODEST_BBR {
            50
        } else {
            0
        },
        max_win: if algo as u32 == abi::CCCTL_ALGO_MODEST_BBR {
            150
        } else {
            0
        },
        last_cwnd: 9 + wave as u32,
        theta: if algo as u32 == abi::CCCTL_ALGO_PATCHED_BBR {
            (wave as u32 % 1024) + 1
        } else {
            0
        },
        dstar_mode: (i % 3) as u8,
        dstar_bdp: wave as u32,
        dstar_gain_cwnd: (i % 7) as u32,
        dstar_min_rtt_us: (i % 2) as u32,
        ..Default::default()
    }
}

/// Flow `flow`'s address (16 bytes as in an event): IPv6 `fd00:ccc:0:NET::FLOW:HOST`
/// for every fourth flow (`flow % 4 == 3`), else IPv4 `198.(18+NET).FLOW.HOST`
/// (IPv4-mapped; NET 0 or 1, inside 198.18.0.0/15).
pub fn synthetic_addr(flow: u64, net: u8, host: u8) -> [u8; 16] {
    if flow % 4 == 3 {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0xfd, 0x00, 0x0c, 0xcc]);
        a[7] = net;
        a[13] = flow as u8;
        a[15] = host;
        a
    } else {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&[198, 18 + net, flow as u8, host]);
        a
    }
}
