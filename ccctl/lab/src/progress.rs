//! Progress over the runs of a scenario: an indicatif bar with time left on a
//! terminal, one line per run otherwise (logs, CI, the VM's console).
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::exec::JobRecord;
use super::plan::Job;

pub struct Progress {
    bar: Option<ProgressBar>,
    total_secs: f64,
    done_secs: f64,
    jobs: usize,
    /// Ordinal of the run in progress (1-based); a shard's differ from run ids.
    n: usize,
    started: Instant,
}

impl Progress {
    pub fn new(jobs: &[Job]) -> Progress {
        let total_secs: f64 = jobs.iter().map(Job::expected_secs).sum();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total_secs.ceil() as u64);
            let style = ProgressStyle::with_template(
                "{prefix} [{bar:30}] {msg} (elapsed {elapsed}, about {eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        eprintln!(
            "ccctl lab: {} runs, about {} expected",
            jobs.len(),
            fmt_secs(total_secs)
        );
        Progress {
            bar,
            total_secs,
            done_secs: 0.0,
            jobs: jobs.len(),
            n: 0,
            started: Instant::now(),
        }
    }

    fn describe(job: &Job) -> String {
        let flows: Vec<&str> = job.flows.iter().map(|f| f.cc.as_str()).collect();
        let mut ccs = flows.clone();
        ccs.dedup();
        let flows = if ccs.len() == 1 && flows.len() > 1 {
            format!("{}x{}", flows.len(), ccs[0])
        } else {
            flows.join(" vs ")
        };
        format!(
            "{} {} on {} / {} / {}",
            job.kind.as_str(),
            flows,
            job.link.rate,
            job.link.rtt,
            job.link.buffer
        )
    }

    /// `3/7`, and the plan's run id when it differs (a shard).
    fn ordinal(&self, job: &Job) -> String {
        if self.n == job.id + 1 {
            format!("{}/{}", self.n, self.jobs)
        } else {
            format!("{}/{} (plan run {})", self.n, self.jobs, job.id)
        }
    }

    pub fn start(&mut self, job: &Job) {
        self.n += 1;
        let msg = format!("run {}: {}", self.ordinal(job), Self::describe(job));
        match &self.bar {
            Some(bar) => {
                bar.set_prefix(self.ordinal(job));
                bar.set_message(Self::describe(job));
            }
            None => eprintln!("ccctl lab: {msg}"),
        }
    }

    pub fn finish(&mut self, job: &Job, rec: Option<&JobRecord>) {
        self.done_secs += job.expected_secs();
        if let Some(bar) = &self.bar {
            bar.set_position(self.done_secs.ceil() as u64);
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        // Time left scaled by how fast the runs so far actually went.
        let left = (self.total_secs - self.done_secs) * elapsed / self.done_secs.max(1.0);
        let goodputs = rec
            .map(|r| {
                r.flows
                    .iter()
                    .map(|f| format!("{} {:.1}", f.plan.cc, f.result.goodput_bps / 1e6))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "failed".into());
        eprintln!(
            "ccctl lab: run {} done in {:.0} s ({goodputs} Mbit/s); about {} left",
            self.ordinal(job),
            rec.map(|r| r.wall_secs).unwrap_or(0.0),
            fmt_secs(left)
        );
    }

    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        eprintln!(
            "ccctl lab: {} runs in {}",
            self.jobs,
            fmt_secs(self.started.elapsed().as_secs_f64())
        );
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}
