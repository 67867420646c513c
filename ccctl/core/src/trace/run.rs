//! A trace session: enable, consume, stop, disable, drain, finish.
use std::{
    cell::RefCell,
    io::{ErrorKind, IsTerminal, Write},
    os::fd::{AsRawFd, RawFd},
    rc::Rc,
    time::Duration,
};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::{RingBuffer, RingBufferBuilder};
use tokio::{
    io::{unix::AsyncFd, Interest},
    signal::unix::{signal, SignalKind},
    time::Instant,
};

use super::{event, follow::FollowTable, sink::Sink, Filter, SharedMaps, TraceError};
use crate::abi;

/// Events taken from the ring per `consume` call, so that signals and the
/// deadline are noticed even when the ring never runs empty.
const CONSUME_BATCH: usize = 16_384;
/// How often the ring is drained even without a wakeup, and how often the
/// stop conditions are checked at the latest.
const TICK: Duration = Duration::from_millis(100);
/// How often a session checks that the pinned maps are still its own.
const PIN_CHECK: Duration = Duration::from_secs(1);
/// After tracing is switched off, events reserved just before are still
/// being filled in; they are committed within microseconds.
const GRACE: Duration = Duration::from_millis(20);

#[derive(Debug, Clone)]
pub struct TraceOptions {
    pub filter: Filter,
    /// Stop after this long; `None`: at SIGINT, SIGTERM or SIGHUP.
    pub duration: Option<Duration>,
    /// Tests: sleep this long after enabling tracing before consuming
    /// anything, so that the ring overflows.
    pub stall: Option<Duration>,
    /// Say on stderr what is being traced once tracing is on.
    pub announce: bool,
    /// Set by an embedding program (daemon, lab) to end the session; seen
    /// within one tick (100 ms). With it, the session installs no signal
    /// handlers: the embedding program owns SIGINT, SIGTERM and SIGHUP.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Duration,
    Signal(i32),
    /// The embedding program asked ([`TraceOptions::stop`]).
    Requested,
    /// `--follow` output went to a pipe that was closed.
    OutputClosed,
    /// Other tracing maps are pinned now (every algorithm was unloaded and
    /// one loaded again): the session follows them (see [`run_with`]).
    MapsReplaced,
}

#[derive(Debug, Clone)]
pub struct TraceSummary {
    /// Events written to the file (or shown, with `--follow`).
    pub events_written: u64,
    /// Events the BPF side could not reserve room for while we traced.
    pub events_dropped: u64,
    /// Events the BPF side produced (tried to reserve) while we traced:
    /// `events_written + events_dropped` when nothing was lost unseen.
    pub events_produced: u64,
    /// Samples too short to be an event (an ABI mismatch).
    pub malformed: u64,
    pub stop: Stop,
}

/// Run one session on maps already opened, by a caller holding the
/// [`TraceLock`], into `target` (made by the caller before anything is
/// switched on, so a bad output path fails first). Whatever happens,
/// tracing is switched off again before this returns, and a file being
/// written is left readable.
pub fn run_with(maps: &SharedMaps, opts: TraceOptions, target: Target) -> Result<TraceSummary> {
    let consumer = Rc::new(RefCell::new(Consumer::new(target)));
    // A tracer must not die without switching tracing off: while a session
    // runs a closed stdout is an error (`--follow | head` ends the session).
    let _sigpipe = ccctl_sys::signals::SigpipeIgnored::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let end = rt.block_on(sessions(maps, consumer.clone(), &opts));

    let consumer = Rc::try_unwrap(consumer)
        .map_err(|_| anyhow!("the ring-buffer callback outlived the session"))?
        .into_inner();
    let malformed = consumer.malformed;
    let (written, finished) = match (consumer.target, &end.counts) {
        (Target::Sink(sink), Ok(c)) => {
            let written = sink.written();
            (written, sink.finish(c.dropped).map(|_| ()))
        }
        // Without the drop count, the file is closed as incomplete (Drop).
        (Target::Sink(sink), Err(_)) => (sink.written(), Ok(())),
        (Target::Follow(table), _) => (table.total(), Ok(())),
    };
    let stop = end.stop?;
    let counts = end.counts?;
    finished?;
    if malformed > 0 {
        tracing::warn!(
            "{malformed} ring-buffer samples were shorter than struct ccctl_event ({} bytes) and \
             were skipped: the loaded BPF objects and this binary disagree on the ABI",
            event::EVENT_SIZE
        );
    }
    Ok(TraceSummary {
        events_written: written,
        events_dropped: counts.dropped,
        events_produced: counts.produced,
        malformed,
        stop,
    })
}

/// Where a session's events go.
pub enum Target {
    /// A file (or files) written by a [`Sink`].
    Sink(Box<dyn Sink>),
    /// A live per-flow table on stdout, every second.
    Follow(FollowTable),
}

/// What the ring-buffer callback feeds.
pub struct Consumer {
    pub target: Target,
    pub malformed: u64,
    /// The sink's first error; the callback then stops the consume call.
    pub error: Option<anyhow::Error>,
}

impl Consumer {
    pub fn new(target: Target) -> Consumer {
        Consumer {
            target,
            malformed: 0,
            error: None,
        }
    }

    /// One ring-buffer sample, as libbpf hands it over; non-zero stops
    /// the `consume` in progress.
    #[inline]
    pub fn on_sample(&mut self, data: &[u8]) -> i32 {
        let Ok(ev) = event::decode_in_place(data) else {
            self.malformed += 1;
            return 0;
        };
        match &mut self.target {
            Target::Sink(sink) => {
                if let Err(e) = sink.push(&ev) {
                    self.error = Some(e);
                    return -libc::ECANCELED;
                }
            }
            Target::Follow(table) => table.push(&ev),
        }
        0
    }
}

struct SessionEnd {
    stop: Result<Stop>,
    counts: Result<Counts>,
}

/// The BPF side's counters over a session (differences from its start).
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    dropped: u64,
    produced: u64,
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            dropped: self.dropped + o.dropped,
            produced: self.produced + o.produced,
        }
    }
}

/// Sessions on the pinned maps, one after the other while they are
/// replaced: when every algorithm is unloaded and one is loaded again, the
/// new object pins new tracing maps and the events go there; the trace
/// follows them into the same output, the drops summed over both.
async fn sessions(
    maps: &SharedMaps,
    consumer: Rc<RefCell<Consumer>>,
    opts: &TraceOptions,
) -> SessionEnd {
    let started = Instant::now();
    let mut replacement: Option<SharedMaps> = None;
    let mut before = Counts::default();
    loop {
        let current = replacement.as_ref().unwrap_or(maps);
        let first = replacement.is_none();
        let end = session(current, consumer.clone(), opts, started, first).await;
        before = match (end.stop, end.counts) {
            (Ok(Stop::MapsReplaced), Ok(c)) => before + c,
            (stop, counts) => {
                return SessionEnd {
                    stop,
                    counts: counts.map(|c| before + c),
                }
            }
        };
        match SharedMaps::open_in(maps.dir()) {
            Ok(m) => {
                tracing::warn!(
                    "the ccctl algorithms were loaded again (new tracing maps in {}); following them",
                    maps.dir().display()
                );
                replacement = Some(m);
            }
            Err(e) => {
                return SessionEnd {
                    stop: Err(anyhow::Error::new(e).context("reopening the reloaded tracing maps")),
                    counts: Ok(before),
                }
            }
        }
    }
}

async fn session(
    maps: &SharedMaps,
    consumer: Rc<RefCell<Consumer>>,
    opts: &TraceOptions,
    started: Instant,
    first: bool,
) -> SessionEnd {
    let failed = |e: anyhow::Error| SessionEnd {
        stop: Err(e),
        counts: Err(anyhow!("tracing never started")),
    };
    // Everything that can fail before tracing is switched on.
    let signals = if opts.stop.is_some() {
        None
    } else {
        match Signals::new() {
            Ok(s) => Some(s),
            Err(e) => return failed(e),
        }
    };
    let baseline = match maps.drops() {
        Ok(d) => d,
        Err(e) => return failed(e.into()),
    };
    let produced_base = match maps.produced() {
        Ok(p) => p,
        Err(e) => return failed(e.into()),
    };
    match maps.read_cfg() {
        Ok(prev) if prev.enabled != 0 => tracing::warn!(
            "tracing was left on by session {} (killed before it could switch it off); taking over",
            prev.session
        ),
        Ok(_) => {}
        Err(e) => return failed(e.into()),
    }
    let rb = {
        let c = consumer.clone();
        let mut b = RingBufferBuilder::new();
        let built = b
            .add(&maps.events, move |data: &[u8]| {
                c.borrow_mut().on_sample(data)
            })
            .map(|_| ())
            .and_then(|()| b.build());
        match built {
            Ok(rb) => rb,
            Err(e) => {
                return failed(anyhow::Error::new(e).context(format!(
                    "opening the ring buffer {}",
                    maps.dir().join(super::maps::EVENTS).display()
                )))
            }
        }
    };
    // SAFETY: EpollFd borrows the ring buffer, so the descriptor it names
    // stays open and the same for as long as the AsyncFd exists.
    let afd = match unsafe { AsyncFd::register_with_interest(EpollFd(&rb), Interest::READABLE) } {
        Ok(a) => a,
        Err(e) => {
            return failed(anyhow::Error::new(e.into_parts().1).context("watching the ring buffer"))
        }
    };

    let cfg = opts.filter.cfg(std::process::id() as u64);
    let mut guard = match CfgGuard::enable(maps, &cfg) {
        Ok(g) => g,
        Err(e) => return failed(e.into()),
    };
    if opts.announce && first {
        announce(opts, &consumer.borrow().target);
    }

    let stop = consume_until_stop(
        maps,
        &rb,
        &afd,
        &consumer,
        signals,
        opts,
        baseline,
        (started, first),
    )
    .await;

    // Off first, then what is left in the ring, then the counters.
    let disabled = guard.disable();
    let drained = drain(&rb, &consumer).await;
    drop(afd);
    drop(rb);
    let counts = maps
        .drops()
        .and_then(|d| Ok((d, maps.produced()?)))
        .map(|(d, p)| Counts {
            dropped: d.saturating_sub(baseline),
            produced: p.saturating_sub(produced_base),
        })
        .map_err(anyhow::Error::from);
    let stop = match (stop, disabled, drained) {
        (Err(e), _, _) => Err(e),
        (Ok(_), Err(e), _) => Err(e.into()),
        (Ok(_), Ok(()), Err(e)) => Err(e),
        (Ok(s), Ok(()), Ok(())) => Ok(s),
    };
    SessionEnd { stop, counts }
}

#[allow(clippy::too_many_arguments)]
async fn consume_until_stop(
    maps: &SharedMaps,
    rb: &RingBuffer<'_>,
    afd: &AsyncFd<EpollFd<'_>>,
    consumer: &RefCell<Consumer>,
    mut signals: Option<Signals>,
    opts: &TraceOptions,
    baseline: u64,
    (started, first): (Instant, bool),
) -> Result<Stop> {
    // A deadline decades away stands for "none".
    let deadline = started
        + opts
            .duration
            .unwrap_or(Duration::from_secs(86_400 * 365 * 30));
    let stall = opts.stall.filter(|_| first);
    if let Some(stall) = stall {
        tokio::select! {
            sig = recv(&mut signals) => return Ok(Stop::Signal(sig)),
            _ = tokio::time::sleep(stall) => {}
        }
    }
    let requested = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
    };
    let follow = matches!(consumer.borrow().target, Target::Follow(_));
    let tty = std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_render = Instant::now();
    let mut last_pin_check = Instant::now();
    loop {
        tokio::select! {
            sig = recv(&mut signals) => return Ok(Stop::Signal(sig)),
            _ = tokio::time::sleep_until(deadline) => return Ok(Stop::Duration),
            ready = afd.readable() => {
                let mut guard = ready.context("waiting on the ring buffer")?;
                // A full batch means there may be more: stay ready.
                if consume(rb, consumer)? < CONSUME_BATCH {
                    guard.clear_ready();
                }
            }
            _ = tick.tick() => {
                consume(rb, consumer)?;
                if requested() {
                    return Ok(Stop::Requested);
                }
                if last_pin_check.elapsed() >= PIN_CHECK {
                    last_pin_check = Instant::now();
                    if maps.replaced() {
                        return Ok(Stop::MapsReplaced);
                    }
                }
                if let Target::Sink(sink) = &mut consumer.borrow_mut().target {
                    sink.tick()?;
                }
                if follow && last_render.elapsed() >= Duration::from_secs(1) {
                    let elapsed = last_render.elapsed();
                    last_render = Instant::now();
                    let dropped = maps.drops()?.saturating_sub(baseline);
                    let text = match &mut consumer.borrow_mut().target {
                        Target::Follow(table) => table.render(elapsed, dropped),
                        Target::Sink(_) => String::new(),
                    };
                    if !print_table(&text, tty)? {
                        return Ok(Stop::OutputClosed);
                    }
                }
            }
        }
    }
}

/// Print a table; false when stdout is a closed pipe.
fn print_table(text: &str, tty: bool) -> Result<bool> {
    let mut out = std::io::stdout().lock();
    let written = if tty {
        // Home, clear screen.
        write!(out, "\x1b[H\x1b[2J{text}")
    } else {
        writeln!(out, "{text}")
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Take up to a batch of events from the ring; how many were taken.
fn consume(rb: &RingBuffer<'_>, consumer: &RefCell<Consumer>) -> Result<usize> {
    let n = rb.consume_raw_n(CONSUME_BATCH);
    if let Some(e) = consumer.borrow_mut().error.take() {
        return Err(e);
    }
    if n < 0 {
        return Err(anyhow::Error::new(std::io::Error::from_raw_os_error(-n))
            .context("reading the trace ring buffer"));
    }
    Ok(n as usize)
}

/// Everything committed so far, then, after a grace period, what was
/// reserved before tracing went off. Bounded, in case a BPF object ignores
/// `trace_cfg`.
async fn drain(rb: &RingBuffer<'_>, consumer: &RefCell<Consumer>) -> Result<()> {
    const MAX_BATCHES: usize = 1024;
    for _ in 0..MAX_BATCHES {
        if consume(rb, consumer)? < CONSUME_BATCH {
            break;
        }
    }
    tokio::time::sleep(GRACE).await;
    for _ in 0..MAX_BATCHES {
        if consume(rb, consumer)? < CONSUME_BATCH {
            break;
        }
    }
    Ok(())
}

fn announce(opts: &TraceOptions, target: &Target) {
    let f = &opts.filter;
    let mut what = if f.algos.is_empty() {
        "every ccctl algorithm".to_string()
    } else {
        f.algos.join(", ")
    };
    if let Some(p) = f.port {
        what += &format!(", port {p}");
    }
    if f.sample_every > 1 {
        what += &format!(", every {}th ACK", f.sample_every);
    }
    if f.once_per_rtt {
        what += ", once per round trip";
    }
    let into = match target {
        Target::Sink(sink) => format!(" into {}", sink.destination()),
        Target::Follow(_) => String::new(),
    };
    let until = match opts.duration {
        Some(d) => format!("for {}", crate::units::HumanDuration(d)),
        None => "until Ctrl-C".to_string(),
    };
    eprintln!("ccctl trace: tracing {what}{into} {until}");
}

/// `trace_cfg` switched on; switched off again on drop (unwinding too) if
/// [`CfgGuard::disable`] was not called.
struct CfgGuard<'a> {
    maps: &'a SharedMaps,
    armed: bool,
}

impl<'a> CfgGuard<'a> {
    fn enable(
        maps: &'a SharedMaps,
        cfg: &abi::ccctl_trace_cfg,
    ) -> Result<CfgGuard<'a>, TraceError> {
        maps.write_cfg(cfg)?;
        Ok(CfgGuard { maps, armed: true })
    }

    fn disable(&mut self) -> Result<(), TraceError> {
        self.armed = false;
        self.maps.write_cfg(&abi::ccctl_trace_cfg::default())
    }
}

impl Drop for CfgGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = self.disable() {
                tracing::error!("switching tracing off: {e}");
            }
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP end a session (a closed terminal must not
/// leave tracing on). Once registered, tokio keeps handling them for the
/// life of the process, so a second Ctrl-C cannot cut the finish short.
/// The next signal, or never without handlers.
async fn recv(signals: &mut Option<Signals>) -> i32 {
    match signals {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        let sig = |kind: SignalKind| signal(kind).context("installing signal handlers");
        Ok(Signals {
            int: sig(SignalKind::interrupt())?,
            term: sig(SignalKind::terminate())?,
            hup: sig(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// The ring buffer's epoll descriptor, which the [`RingBuffer`] owns.
struct EpollFd<'a>(&'a RingBuffer<'a>);

impl AsRawFd for EpollFd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.epoll_fd()
    }
}
