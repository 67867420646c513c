//! Sampling every socket of a namespace on a fixed period, per socket.
use std::net::SocketAddr as IpSocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::socket::DiagSocket;
use super::tcp_info::TcpInfo;
use super::{DiagError, TcpSocket, SENDER_STATES};

/// One reading of one socket's `tcp_info`: the lab's record of a socket
/// over time (a flow's samples, a [`Sampler`]'s).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Seconds since sampling started.
    pub t: f64,
    pub info: TcpInfo,
    /// The kernel's BBR state read beside `info` (`None` for other algorithms).
    #[serde(default)]
    pub bbr: Option<super::BbrInfo>,
}

/// Everything a [`Sampler`] saw of one socket (one inet_diag cookie).
#[derive(Debug, Clone, PartialEq)]
pub struct SocketTrack {
    pub local: IpSocketAddr,
    pub remote: IpSocketAddr,
    pub cookie: u64,
    /// Congestion-control names in the order they were reported
    /// (`INET_DIAG_CONG`), repeats in a row collapsed: `["bpf_bbr"]` for a
    /// socket that ran bpf_bbr throughout.
    pub cc: Vec<String>,
    /// The readings that carried a `tcp_info`.
    pub samples: Vec<Sample>,
}

/// What a [`Sampler`] collected.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// In the order the sockets were first seen.
    pub sockets: Vec<SocketTrack>,
    /// Dumps attempted.
    pub ticks: u64,
    /// Dumps that failed, and the last error seen.
    pub failures: u64,
    pub last_error: Option<String>,
}

impl Samples {
    /// The sockets whose local port is `port` (e.g.
    /// `FlowResult::local_port`, to keep only an iperf3 data connection).
    pub fn for_local_port(&self, port: u16) -> impl Iterator<Item = &SocketTrack> {
        self.sockets.iter().filter(move |s| s.local.port() == port)
    }

    /// The sockets whose peer port is `port` (data and control connections
    /// of an iperf3 flow both match).
    pub fn for_peer_port(&self, port: u16) -> impl Iterator<Item = &SocketTrack> {
        self.sockets.iter().filter(move |s| s.remote.port() == port)
    }

    pub(super) fn add(&mut self, t: f64, sock: TcpSocket) {
        let i = match self.sockets.iter().position(|s| s.cookie == sock.cookie) {
            Some(i) => i,
            None => {
                self.sockets.push(SocketTrack {
                    local: sock.local,
                    remote: sock.remote,
                    cookie: sock.cookie,
                    cc: Vec::new(),
                    samples: Vec::new(),
                });
                self.sockets.len() - 1
            }
        };
        let track = &mut self.sockets[i];
        if let Some(cc) = sock.cc {
            if track.cc.last() != Some(&cc) {
                track.cc.push(cc);
            }
        }
        if let Some(info) = sock.info {
            track.samples.push(Sample {
                t,
                info,
                bbr: sock.bbr,
            });
        }
    }
}

/// [`Sampler`] options.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Sampling period (default 100 ms). Ticks on a fixed schedule; a tick
    /// that overruns skips the missed ones.
    pub interval: Duration,
    /// `idiag_states` mask of the sockets to sample (default
    /// [`SENDER_STATES`]).
    pub states: u32,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: Duration::from_millis(100),
            states: SENDER_STATES,
        }
    }
}

/// Samples every TCP socket of one network namespace on a fixed period,
/// in a thread of its own; [`Sampler::stop`] returns what it saw. Dropping
/// it without `stop` stops the thread too.
#[derive(Debug)]
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<Samples>>,
}

impl Sampler {
    /// Starts sampling in the namespace at `netns_path` (e.g.
    /// `ccctl_sys::netns::named(&tb.ns(role))`). The socket is opened and
    /// dumped once before this returns, so a missing namespace fails here
    /// rather than silently.
    pub fn start(netns_path: &Path, cfg: SamplerConfig) -> Result<Self, DiagError> {
        let diag = DiagSocket::open_in_netns(netns_path)?;
        diag.tcp_sockets_in_states(cfg.states)?;
        let interval = cfg.interval.max(Duration::from_millis(1));
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("sockdiag-sampler".into())
            .spawn(move || {
                let mut s = Samples::default();
                let t0 = Instant::now();
                let mut k: u32 = 0;
                loop {
                    let t = t0.elapsed().as_secs_f64();
                    s.ticks += 1;
                    match diag.tcp_sockets_in_states(cfg.states) {
                        Ok(socks) => socks.into_iter().for_each(|sock| s.add(t, sock)),
                        Err(e) => {
                            s.failures += 1;
                            s.last_error = Some(e.to_string());
                        }
                    }
                    // Next tick on the fixed schedule, skipping missed ones.
                    let el = t0.elapsed();
                    k = k.max((el.as_nanos() / interval.as_nanos()) as u32) + 1;
                    let wait = (interval * k).saturating_sub(t0.elapsed());
                    match stopped.recv_timeout(wait) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return s,
                    }
                }
            })
            .map_err(|source| DiagError::Sampler { source })?;
        Ok(Sampler {
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// Stops the thread and returns everything sampled.
    pub fn stop(mut self) -> Samples {
        self.finish().unwrap_or_default()
    }

    fn finish(&mut self) -> Option<Samples> {
        drop(self.stop.take());
        let h = self.handle.take()?;
        Some(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.finish();
        }
    }
}
