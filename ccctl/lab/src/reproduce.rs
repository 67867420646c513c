//! The reproduction suite behind `cargo xtask reproduce`: every seed's
//! headline result, re-measured by the lab and put beside the paper's.
//!
//! Two tables, written down before anything was measured and never tuned to
//! an outcome:
//! - [`SUITE`]: the scenarios (`scenarios/seeds/<name>.toml`) and what
//!   `--quick` changes in each (fewer repetitions, shorter runs, fewer
//!   sweep points; never the link that makes the effect);
//! - [`HEADLINES`]: per headline, the paper's number, the metric computed
//!   from the run's `summary.parquet` (which runs, which flows, which
//!   column), and the bands that decide the verdict. The rule for the
//!   bands: "reproduced" is within a factor of 2 of the paper's ratio (or,
//!   for a claim of about-equality or a bound, the claim's band), "partly"
//!   is the effect's direction without its size, anything else "not".
//!
//! [`report`] reads every scenario directory of a reproduction directory and
//! writes `REPORT.md` (and `report.json`, the same numbers unrounded).
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::run_dir::{self, Metadata, RunDir, RunDirError, SummaryRecord};

/// One scenario of the suite.
pub struct SuiteEntry {
    pub name: &'static str,
    /// TOML merged over the file for `--quick` (top-level keys replace,
    /// tables merge one level deep).
    pub quick: &'static str,
}

pub const SUITE: &[SuiteEntry] = &[
    SuiteEntry {
        name: "modest-bbr",
        quick: "duration = \"20s\"\nrepetitions = 1\n",
    },
    SuiteEntry {
        // 10 Mbit/s only: two Reno flows there see a congestion event about
        // every 4.2 s, so 30 s runs keep >= 5 in the measured window.
        name: "harm-fig7",
        quick: "duration = \"30s\"\nrepetitions = 1\n[sweep]\nrate = [\"10mbit\"]\n",
    },
    SuiteEntry {
        name: "fabric-fig6-taildrop",
        quick: "duration = \"25s\"\nwarmup = \"8s\"\n[sweep]\nbuffer = [\"0.5bdp\", \"4bdp\"]\n",
    },
    SuiteEntry {
        name: "fabric-fig6-fqcodel",
        quick: "duration = \"25s\"\nwarmup = \"8s\"\n[sweep]\nbuffer = [\"4bdp\"]\n",
    },
    SuiteEntry {
        name: "dstar-fig5",
        quick: "duration = \"25s\"\nwarmup = \"8s\"\n[sweep]\nflows = [\"dstar:16\", \"bbr:16\", \"cubic:16\"]\n",
    },
    SuiteEntry {
        name: "patched-fig10-11",
        quick: "duration = \"20s\"\n",
    },
];

/// Which main runs of a scenario a value is taken from.
#[derive(Debug, Clone, Copy)]
pub struct Runs {
    pub scenario: &'static str,
    /// The run's flows' algorithms, sorted (a multiset: `["bbr", "bbr"]`).
    pub ccs: &'static [&'static str],
    /// Only links with one of these buffers (as written, `"2bdp"`); empty: all.
    pub buffers: &'static [&'static str],
}

/// A per-run value.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    /// A flow-level column, over the run's flows of `cc` that `select`
    /// keeps: their mean.
    Flows {
        runs: Runs,
        cc: &'static str,
        select: Select,
        column: ColumnOf,
    },
    /// A run-level column (`jain_index`, `utilization`).
    Run { runs: Runs, column: ColumnOf },
}

/// A numeric column of `summary.parquet`, as a field of its typed row.
pub type ColumnOf = fn(&SummaryRecord) -> Option<f64>;

/// Which flows of a run a [`Value::Flows`] keeps.
#[derive(Debug, Clone, Copy)]
pub enum Select {
    All,
    /// Flows of this base RTT (ms).
    Rtt(f64),
    /// Flows behind a sender gate of this on-percentage Θ.
    Theta(f64),
}

/// What a headline computes. Values are paired per case, a case being one
/// (link, repetition) of the scenario; the headline is the mean over cases
/// and its spread their minimum and maximum.
#[derive(Debug, Clone, Copy)]
pub enum Metric {
    Value(Value),
    Ratio(Value, Value),
    /// The share of cases whose ratio is at least the threshold.
    ShareAtLeast(Value, Value, f64),
}

pub struct Headline {
    pub id: &'static str,
    pub seed: &'static str,
    pub figure: &'static str,
    pub claim: &'static str,
    pub metric_text: &'static str,
    pub paper: f64,
    pub paper_text: &'static str,
    pub metric: Metric,
    /// Inclusive bands on our value.
    pub reproduced: (f64, f64),
    pub partly: (f64, f64),
}

const INF: f64 = f64::INFINITY;

const fn runs(scenario: &'static str, ccs: &'static [&'static str]) -> Runs {
    Runs {
        scenario,
        ccs,
        buffers: &[],
    }
}

const fn goodput(runs: Runs, cc: &'static str) -> Value {
    Value::Flows {
        runs,
        cc,
        select: Select::All,
        column: |r| r.goodput_bps,
    }
}

const fn retrans(runs: Runs, cc: &'static str) -> Value {
    Value::Flows {
        runs,
        cc,
        select: Select::All,
        column: |r| r.retransmits.map(|x| x as f64),
    }
}

const MB_C: Runs = runs("modest-bbr", &["bbr", "cubic"]);
const CC: Runs = runs("modest-bbr", &["cubic", "cubic"]);
const MOD_C: Runs = runs("modest-bbr", &["cubic", "modest_bbr"]);
const MOD_B: Runs = runs("modest-bbr", &["bbr", "modest_bbr"]);
const H_CR: Runs = runs("harm-fig7", &["cubic", "reno"]);
const H_BC: Runs = runs("harm-fig7", &["bbr", "cubic"]);
const HARM_CUBIC: Value = Value::Flows {
    runs: H_BC,
    cc: "cubic",
    select: Select::All,
    column: |r| r.harm_tput,
};
const HARM_RENO: Value = Value::Flows {
    runs: H_CR,
    cc: "reno",
    select: Select::All,
    column: |r| r.harm_tput,
};
const FT_SHALLOW: Runs = Runs {
    scenario: "fabric-fig6-taildrop",
    ccs: &["bbr", "bbr"],
    buffers: &["0.5bdp"],
};
const FT_DEEP: Runs = Runs {
    scenario: "fabric-fig6-taildrop",
    ccs: &["bbr", "bbr"],
    buffers: &["2bdp", "4bdp"],
};
const FQ: Runs = runs("fabric-fig6-fqcodel", &["bbr", "bbr"]);
const D16: Runs = runs("dstar-fig5", &["dstar"; 16]);
const B16: Runs = runs("dstar-fig5", &["bbr"; 16]);
const C16: Runs = runs("dstar-fig5", &["cubic"; 16]);
const P_RUNS: Runs = runs("patched-fig10-11", &["patched_bbr"]);
const B_RUNS: Runs = runs("patched-fig10-11", &["bpf_bbr"]);
const P5: Runs = runs("patched-fig10-11", &["patched_bbr"; 5]);

/// A gated single-flow run: the schedule is told apart by `schedule_theta`.
const fn gated(runs: Runs, theta: f64) -> Value {
    Value::Flows {
        runs,
        cc: if runs.ccs.is_empty() { "" } else { runs.ccs[0] },
        select: Select::Theta(theta),
        column: |r| r.goodput_bps,
    }
}

/// The headline table. Bands per the rule in the module comment.
pub const HEADLINES: &[Headline] = &[
    Headline {
        id: "modest-fig2-tput",
        seed: "modest-bbr.txt",
        figure: "Figs. 2(b), 3",
        claim: "BBR starves Cubic on a shared bottleneck",
        metric_text: "goodput BBR / Cubic, same run",
        paper: 88.1 / 6.3,
        paper_text: "88.1 / 6.3 Mbit/s = 14.0",
        metric: Metric::Ratio(goodput(MB_C, "bbr"), goodput(MB_C, "cubic")),
        reproduced: (7.0, 28.0),
        partly: (1.5, INF),
    },
    Headline {
        id: "modest-fig2-cubic-loss",
        seed: "modest-bbr.txt",
        figure: "Figs. 2(a)/(b)",
        claim: "Cubic beside BBR keeps a fraction of what it gets beside Cubic",
        metric_text: "Cubic's goodput beside BBR / a Cubic flow's beside Cubic",
        paper: 6.3 / 36.0,
        paper_text: "6.3 / 36 Mbit/s = 0.175",
        metric: Metric::Ratio(goodput(MB_C, "cubic"), goodput(CC, "cubic")),
        reproduced: (0.0875, 0.35),
        partly: (0.0, 0.8),
    },
    Headline {
        id: "modest-fig5-retrans",
        seed: "modest-bbr.txt",
        figure: "Figs. 5, 6",
        claim: "BBR retransmits more than the Cubic flow beside it",
        metric_text: "retransmissions BBR / Cubic, same run (after warm-up)",
        paper: 1600.0 / 615.0,
        paper_text: "1600 / 615 per 30 s = 2.6",
        metric: Metric::Ratio(retrans(MB_C, "bbr"), retrans(MB_C, "cubic")),
        reproduced: (1.3, 5.2),
        partly: (1.0, INF),
    },
    Headline {
        id: "modest-fig9-cubic-gain",
        seed: "modest-bbr.txt",
        figure: "Figs. 9(a), 10",
        claim: "Cubic gets more beside Modest BBR than beside BBR",
        metric_text: "Cubic's goodput beside modest_bbr / beside bbr",
        paper: 39.5 / 6.3,
        paper_text: "39.5 / 6.3 Mbit/s = 6.3 (text: \"almost 4X\")",
        metric: Metric::Ratio(goodput(MOD_C, "cubic"), goodput(MB_C, "cubic")),
        reproduced: (3.13, 12.5),
        partly: (1.2, INF),
    },
    Headline {
        id: "modest-fig9-own-tput",
        seed: "modest-bbr.txt",
        figure: "Fig. 9(a)",
        claim: "Modest BBR still gets more than the Cubic beside it",
        metric_text: "goodput modest_bbr / Cubic, same run",
        paper: 3.0,
        paper_text: "3x",
        metric: Metric::Ratio(goodput(MOD_C, "modest_bbr"), goodput(MOD_C, "cubic")),
        reproduced: (1.5, 6.0),
        partly: (1.0, 12.0),
    },
    Headline {
        id: "modest-fig9b-vs-bbr",
        seed: "modest-bbr.txt",
        figure: "Fig. 9(b)",
        claim: "against BBR, Modest BBR gets only ~7 % less",
        metric_text: "goodput modest_bbr / bbr, same run",
        paper: 0.93,
        paper_text: "~0.93 (\"about 7 % lower\")",
        metric: Metric::Ratio(goodput(MOD_B, "modest_bbr"), goodput(MOD_B, "bbr")),
        reproduced: (0.75, 1.15),
        partly: (0.5, 1.5),
    },
    Headline {
        id: "modest-fig11b-retrans",
        seed: "modest-bbr.txt",
        figure: "Fig. 11(b)",
        claim: "against BBR, Modest BBR retransmits ~50 % less",
        metric_text: "retransmissions modest_bbr / bbr, same run",
        paper: 0.5,
        paper_text: "~0.5 (\"almost 50 % less\")",
        metric: Metric::Ratio(retrans(MOD_B, "modest_bbr"), retrans(MOD_B, "bbr")),
        reproduced: (0.25, 0.9),
        partly: (0.0, 1.0),
    },
    Headline {
        id: "harm-fig7-mean",
        seed: "harm-vs-fairness.txt",
        figure: "Fig. 7, abstract",
        claim: "BBR harms Cubic 1.6x as much as Cubic harms Reno (high BDP)",
        metric_text: "Ware throughput harm to Cubic (vs BBR) / to Reno (vs Cubic), mean over cases",
        paper: 1.6,
        paper_text: "1.6 on average",
        metric: Metric::Ratio(HARM_CUBIC, HARM_RENO),
        reproduced: (1.2, 3.2),
        partly: (1.0, INF),
    },
    Headline {
        id: "harm-fig7-ge1.6",
        seed: "harm-vs-fairness.txt",
        figure: "Fig. 7",
        claim: "share of cases where that ratio is >= 1.6",
        metric_text: "cases with harm ratio >= 1.6 / cases",
        paper: 0.5,
        paper_text: "50 %",
        metric: Metric::ShareAtLeast(HARM_CUBIC, HARM_RENO, 1.6),
        reproduced: (0.25, 1.0),
        partly: (0.01, 1.0),
    },
    Headline {
        id: "harm-fig7-ge2",
        seed: "harm-vs-fairness.txt",
        figure: "Fig. 7",
        claim: "share of cases where that ratio is >= 2",
        metric_text: "cases with harm ratio >= 2 / cases",
        paper: 0.38,
        paper_text: "38 %",
        metric: Metric::ShareAtLeast(HARM_CUBIC, HARM_RENO, 2.0),
        reproduced: (0.19, 0.76),
        partly: (0.01, 1.0),
    },
    Headline {
        id: "harm-eq2-mh",
        seed: "harm-vs-fairness.txt",
        figure: "eq. 2, Figs. 3-5",
        claim: "eq. 2's m_h(tput): BBR->Cubic more negative than Cubic->Reno",
        metric_text: "m_h(tput) of Cubic (vs BBR) / of Reno (vs Cubic), mean over cases",
        paper: 1.6,
        paper_text: "1.6 (the abstract's \"1.6 times more harmful\")",
        metric: Metric::Ratio(
            Value::Flows {
                runs: H_BC,
                cc: "cubic",
                select: Select::All,
                column: |r| r.m_h_tput,
            },
            Value::Flows {
                runs: H_CR,
                cc: "reno",
                select: Select::All,
                column: |r| r.m_h_tput,
            },
        ),
        reproduced: (1.2, 3.2),
        partly: (1.0, INF),
    },
    Headline {
        id: "fabric-fig6a-shallow",
        seed: "bbrv2-fabric.txt",
        figure: "Fig. 6(a)",
        claim: "BBRv1, 61 vs 113 ms, tail drop, buffer < 1 BDP: JFI below 0.9",
        metric_text: "Jain's index at 0.5 BDP",
        paper: 0.9,
        paper_text: "< 0.9",
        metric: Metric::Value(Value::Run {
            runs: FT_SHALLOW,
            column: |r| r.jain_index,
        }),
        reproduced: (0.0, 0.9),
        partly: (0.0, 0.95),
    },
    Headline {
        id: "fabric-fig6a-deep",
        seed: "bbrv2-fabric.txt",
        figure: "Fig. 6(a)",
        claim: "tail drop, buffer > 1 BDP: JFI about 0.8",
        metric_text: "Jain's index at 2 and 4 BDP",
        paper: 0.8,
        paper_text: "~0.8",
        metric: Metric::Value(Value::Run {
            runs: FT_DEEP,
            column: |r| r.jain_index,
        }),
        reproduced: (0.7, 0.9),
        partly: (0.5, 0.95),
    },
    Headline {
        id: "fabric-fig6a-long-ahead",
        seed: "bbrv2-fabric.txt",
        figure: "Fig. 6(a)",
        claim: "tail drop, buffer > 1 BDP: the 113 ms flow ahead",
        metric_text: "goodput 113 ms flow / 61 ms flow at 2 and 4 BDP",
        paper: 3.0,
        paper_text: "> 1 (JFI 0.8 of two flows = 3x)",
        metric: Metric::Ratio(
            Value::Flows {
                runs: FT_DEEP,
                cc: "bbr",
                select: Select::Rtt(113.0),
                column: |r| r.goodput_bps,
            },
            Value::Flows {
                runs: FT_DEEP,
                cc: "bbr",
                select: Select::Rtt(61.0),
                column: |r| r.goodput_bps,
            },
        ),
        reproduced: (1.5, 6.0),
        partly: (1.0, INF),
    },
    Headline {
        id: "fabric-fig6c-fqcodel",
        seed: "bbrv2-fabric.txt",
        figure: "Fig. 6(c)",
        claim: "FQ-CoDel removes the RTT unfairness",
        metric_text: "Jain's index, fq_codel, 1 and 4 BDP",
        paper: 1.0,
        paper_text: "~1.0",
        metric: Metric::Value(Value::Run {
            runs: FQ,
            column: |r| r.jain_index,
        }),
        reproduced: (0.95, 1.0),
        partly: (0.9, 1.0),
    },
    Headline {
        id: "dstar-fig5-rtt",
        seed: "tcp-dstar.txt",
        figure: "Fig. 5",
        claim: "many flows: D*'s RTT about half the next best (BBR's)",
        metric_text: "mean RTT of the 16 D* flows / of the 16 BBR flows",
        paper: 0.5,
        paper_text: "~0.5",
        metric: Metric::Ratio(
            Value::Flows {
                runs: D16,
                cc: "dstar",
                select: Select::All,
                column: |r| r.mean_rtt_ms,
            },
            Value::Flows {
                runs: B16,
                cc: "bbr",
                select: Select::All,
                column: |r| r.mean_rtt_ms,
            },
        ),
        reproduced: (0.25, 0.75),
        partly: (0.0, 0.99),
    },
    Headline {
        id: "dstar-fig5-util",
        seed: "tcp-dstar.txt",
        figure: "Fig. 5",
        claim: "... while using the full bandwidth",
        metric_text: "link utilization of the 16 D* flows",
        paper: 1.0,
        paper_text: "~1.0",
        metric: Metric::Value(Value::Run {
            runs: D16,
            column: |r| r.utilization,
        }),
        reproduced: (0.9, 1.05),
        partly: (0.8, 1.05),
    },
    Headline {
        id: "dstar-tab1-dstar",
        seed: "tcp-dstar.txt",
        figure: "Table 1",
        claim: "Jain's index among 16 D* flows",
        metric_text: "Jain's index, dstar:16",
        paper: 0.9985,
        paper_text: "0.9985",
        metric: Metric::Value(Value::Run {
            runs: D16,
            column: |r| r.jain_index,
        }),
        reproduced: (0.95, 1.0),
        partly: (0.9, 1.0),
    },
    Headline {
        id: "dstar-tab1-bbr",
        seed: "tcp-dstar.txt",
        figure: "Table 1",
        claim: "Jain's index among 16 BBR flows",
        metric_text: "Jain's index, bbr:16",
        paper: 0.9995,
        paper_text: "0.9995",
        metric: Metric::Value(Value::Run {
            runs: B16,
            column: |r| r.jain_index,
        }),
        reproduced: (0.95, 1.0),
        partly: (0.9, 1.0),
    },
    Headline {
        id: "dstar-tab1-cubic",
        seed: "tcp-dstar.txt",
        figure: "Table 1",
        claim: "Jain's index among 16 Cubic flows (loss-based: less fair)",
        metric_text: "Jain's index, cubic:16",
        paper: 0.6237,
        paper_text: "0.6237",
        metric: Metric::Value(Value::Run {
            runs: C16,
            column: |r| r.jain_index,
        }),
        reproduced: (0.47, 0.77),
        partly: (0.0, 0.95),
    },
    Headline {
        id: "patched-fig10-heavy",
        seed: "patched-bbr-cloud.txt",
        figure: "Fig. 10(b), Heavy",
        claim: "heavy scheduling: patched BBR gets much more than BBR",
        metric_text: "goodput patched_bbr / bpf_bbr, On 10 / Off 70 ms",
        paper: 10.0,
        paper_text: ">= 10 (~100 vs < 10 Mbit/s; abstract: > +50 %)",
        metric: Metric::Ratio(gated(P_RUNS, 0.125), gated(B_RUNS, 0.125)),
        reproduced: (1.5, INF),
        partly: (1.1, INF),
    },
    Headline {
        id: "patched-fig10-little",
        seed: "patched-bbr-cloud.txt",
        figure: "Fig. 10(b), Little",
        claim: "little scheduling: patched BBR performs as BBR",
        metric_text: "goodput patched_bbr / bpf_bbr, On 30 / Off 10 ms",
        paper: 1.0,
        paper_text: "~1.0",
        metric: Metric::Ratio(gated(P_RUNS, 0.75), gated(B_RUNS, 0.75)),
        reproduced: (0.9, 1.1),
        partly: (0.75, 1.25),
    },
    Headline {
        id: "patched-fig11-jfi",
        seed: "patched-bbr-cloud.txt",
        figure: "Fig. 11",
        claim: "five patched BBR flows share the link fairly",
        metric_text: "Jain's index, patched_bbr:5",
        paper: 1.0,
        paper_text: "~1.0",
        metric: Metric::Value(Value::Run {
            runs: P5,
            column: |r| r.jain_index,
        }),
        reproduced: (0.95, 1.0),
        partly: (0.85, 1.0),
    },
];

/// `suite.json` of a reproduction directory (written by `cargo xtask
/// reproduce`): whether it ran `--quick`.
pub const SUITE_FILE: &str = "suite.json";

#[derive(Debug, Default, serde::Deserialize)]
struct SuiteFile {
    #[serde(default)]
    quick: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReproError {
    #[error("{what}: {message}")]
    Io { what: String, message: String },
    #[error("unknown scenario `{0}`: the suite has {1}")]
    Unknown(String, String),
    #[error("{what}: {message}")]
    Data { what: String, message: String },
    #[error(transparent)]
    RunDir(#[from] RunDirError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ReproError {
    let what = what.into();
    move |e| ReproError::Io {
        what,
        message: e.to_string(),
    }
}

/// A scenario to run: its name and the file to hand `ccctl lab run`.
#[derive(Debug, Serialize)]
pub struct Planned {
    pub name: String,
    pub file: PathBuf,
}

/// The scenarios to run, in suite order; with `quick`, each file with its
/// quick patch applied is written to `out/<name>.quick.toml`.
pub fn plan(
    seeds_dir: &Path,
    names: &[String],
    quick: bool,
    out: &Path,
) -> Result<Vec<Planned>, ReproError> {
    for n in names {
        if !SUITE.iter().any(|e| e.name == n) {
            let all: Vec<&str> = SUITE.iter().map(|e| e.name).collect();
            return Err(ReproError::Unknown(n.clone(), all.join(", ")));
        }
    }
    let mut planned = Vec::new();
    for e in SUITE {
        if !names.is_empty() && !names.iter().any(|n| n == e.name) {
            continue;
        }
        let file = seeds_dir.join(format!("{}.toml", e.name));
        if !quick {
            planned.push(Planned {
                name: e.name.into(),
                file,
            });
            continue;
        }
        let text = fs::read_to_string(&file).map_err(io(format!("reading {}", file.display())))?;
        let patched = apply_quick(&text, e.quick).map_err(|message| ReproError::Data {
            what: format!("{} with its --quick patch", file.display()),
            message,
        })?;
        fs::create_dir_all(out).map_err(io(format!("creating {}", out.display())))?;
        let qfile = out.join(format!("{}.quick.toml", e.name));
        let header = format!(
            "# {} with `cargo xtask reproduce --quick`'s changes: {}\n",
            file.display(),
            e.quick.replace('\n', " ")
        );
        fs::write(&qfile, header + &patched).map_err(io(format!("writing {}", qfile.display())))?;
        planned.push(Planned {
            name: e.name.into(),
            file: qfile,
        });
    }
    Ok(planned)
}

fn apply_quick(text: &str, patch: &str) -> Result<String, String> {
    let mut base: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let patch: toml::Table = toml::from_str(patch).map_err(|e| e.to_string())?;
    for (k, v) in patch {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(p)) => {
                for (pk, pv) in p {
                    b.insert(pk, pv);
                }
            }
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
    toml::to_string(&base).map_err(|e| e.to_string())
}

/// One scenario's results in a reproduction directory.
struct ScenarioData {
    dir: PathBuf,
    rows: Vec<SummaryRecord>,
    meta: Metadata,
}

/// Case = (link_index, repetition).
type Case = (u32, u32);

fn run_matches(data: &ScenarioData, runs: &Runs, run_id: u32) -> bool {
    let flows: Vec<&SummaryRecord> = data
        .rows
        .iter()
        .filter(|r| r.level == "flow" && r.kind == "main" && r.run_id == run_id)
        .collect();
    let mut ccs: Vec<&str> = flows.iter().map(|r| r.cc.as_str()).collect();
    ccs.sort_unstable();
    ccs == runs.ccs
        && flows
            .first()
            .is_some_and(|r| runs.buffers.is_empty() || runs.buffers.contains(&r.buffer.as_str()))
}

/// A value per case, and the cases left out because a run they read was
/// testbed-limited (its link's reference Cubic flow or paced reference
/// below 85 % of the rate): those are listed, never used.
fn values(
    all: &BTreeMap<String, ScenarioData>,
    v: &Value,
) -> Result<(BTreeMap<Case, f64>, BTreeSet<Case>), String> {
    let runs = match v {
        Value::Flows { runs, .. } | Value::Run { runs, .. } => runs,
    };
    let data = all
        .get(runs.scenario)
        .ok_or_else(|| format!("scenario {} was not run", runs.scenario))?;
    let mut per_case: BTreeMap<Case, Vec<f64>> = BTreeMap::new();
    let mut excluded = BTreeSet::new();
    for r in &data.rows {
        if r.kind != "main" || !run_matches(data, runs, r.run_id) {
            continue;
        }
        let case = (r.link_index, r.repetition);
        if r.testbed_limited {
            excluded.insert(case);
            continue;
        }
        match v {
            Value::Run { column, .. } if r.level == "run" => {
                if let Some(x) = column(r) {
                    per_case.entry(case).or_default().push(x);
                }
            }
            Value::Flows {
                cc, select, column, ..
            } if r.level == "flow" && r.cc == *cc => {
                let keep = match select {
                    Select::All => true,
                    Select::Rtt(t) => r.flow_rtt_ms.is_some_and(|x| (x - t).abs() < 0.5),
                    Select::Theta(t) => r.schedule_theta.is_some_and(|x| (x - t).abs() < 1e-3),
                };
                if keep {
                    if let Some(x) = column(r) {
                        per_case.entry(case).or_default().push(x);
                    }
                }
            }
            _ => {}
        }
    }
    Ok((
        per_case
            .into_iter()
            .filter(|(k, _)| !excluded.contains(k))
            .map(|(k, xs)| (k, xs.iter().sum::<f64>() / xs.len() as f64))
            .collect(),
        excluded,
    ))
}

/// A headline's result: the statistic over cases, its 95 % interval, the
/// cases' spread, and the cases left out.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub id: String,
    pub value: Option<f64>,
    /// 95 % bootstrap interval of `value` over the cases (percentile
    /// method, [`BOOTSTRAP_RESAMPLES`] resamples, seeded by the headline's
    /// id so a report is reproducible).
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// The per-case values' range (for a share, the per-case ratios').
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub cases: usize,
    pub ratio_to_paper: Option<f64>,
    /// Cases (`link L, repetition R`) left out as testbed-limited.
    pub excluded: Vec<String>,
    pub verdict: String,
    pub reason: String,
}

/// Bootstrap resamples per interval.
pub const BOOTSTRAP_RESAMPLES: usize = 4000;

fn paired(
    all: &BTreeMap<String, ScenarioData>,
    a: &Value,
    b: &Value,
) -> Result<(Vec<f64>, BTreeSet<Case>), String> {
    let ((va, ea), (vb, eb)) = (values(all, a)?, values(all, b)?);
    let ratios = va
        .iter()
        .filter_map(|(k, x)| vb.get(k).filter(|y| **y != 0.0).map(|y| x / y))
        .collect();
    Ok((ratios, ea.union(&eb).copied().collect()))
}

fn within(x: f64, (lo, hi): (f64, f64)) -> bool {
    x >= lo && x <= hi
}

fn band(b: (f64, f64)) -> String {
    if b.1.is_infinite() {
        format!(">= {}", num(b.0))
    } else {
        format!("{}..{}", num(b.0), num(b.1))
    }
}

/// Three significant digits, as the report prints every number.
pub fn num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

/// The 95 % percentile-bootstrap interval of `stat` over `xs`: resample
/// the cases with replacement, `resamples` times, with a xorshift stream
/// seeded from `seed`; the 2.5th and 97.5th percentiles of the statistic.
/// One case gives the point itself.
pub fn bootstrap_ci(
    xs: &[f64],
    stat: &dyn Fn(&[f64]) -> f64,
    resamples: usize,
    seed: u64,
) -> (f64, f64) {
    if xs.len() < 2 {
        let x = stat(xs);
        return (x, x);
    }
    let mut state = seed | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut sample = vec![0.0; xs.len()];
    let mut stats: Vec<f64> = (0..resamples)
        .map(|_| {
            for s in sample.iter_mut() {
                *s = xs[(next() % xs.len() as u64) as usize];
            }
            stat(&sample)
        })
        .collect();
    stats.sort_by(f64::total_cmp);
    let at = |q: f64| stats[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    (at(0.025), at(0.975))
}

/// FNV-1a of a headline's id: its bootstrap seed.
fn seed_of(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The verdict from the interval: reproduced when it lies within the
/// reproduced band, not when it lies wholly outside the partly band (the
/// effect's direction), partly otherwise (the direction without the size,
/// or an interval too wide to decide).
fn verdict(h: &Headline, lo: f64, hi: f64) -> (&'static str, String) {
    let ci = format!("95 % interval {}..{}", num(lo), num(hi));
    if within(lo, h.reproduced) && within(hi, h.reproduced) {
        (
            "reproduced",
            format!("{ci} lies in the reproduced band {}", band(h.reproduced)),
        )
    } else if hi < h.partly.0 || lo > h.partly.1 {
        (
            "not",
            format!(
                "{ci} lies outside {} (the effect's direction)",
                band(h.partly)
            ),
        )
    } else {
        (
            "partly",
            format!(
                "{ci} meets {} (the effect's direction) but not wholly {} (its size)",
                band(h.partly),
                band(h.reproduced)
            ),
        )
    }
}

fn measure(all: &BTreeMap<String, ScenarioData>, h: &Headline) -> Measured {
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    let per_case = match &h.metric {
        Metric::Value(v) => values(all, v).map(|(m, e)| (m.into_values().collect::<Vec<_>>(), e)),
        Metric::Ratio(a, b) | Metric::ShareAtLeast(a, b, _) => paired(all, a, b),
    };
    let threshold = match &h.metric {
        Metric::ShareAtLeast(_, _, t) => Some(*t),
        _ => None,
    };
    let share = move |xs: &[f64]| {
        let t = threshold.unwrap_or(INF);
        xs.iter().filter(|x| **x >= t).count() as f64 / xs.len().max(1) as f64
    };
    let stat: &dyn Fn(&[f64]) -> f64 = if threshold.is_some() { &share } else { &mean };
    let (xs, excluded, missing) = match per_case {
        Ok((xs, e)) if !xs.is_empty() => (xs, e, None),
        Ok((_, e)) if !e.is_empty() => (
            Vec::new(),
            e,
            Some("every case was testbed-limited".to_string()),
        ),
        Ok((_, e)) => (
            Vec::new(),
            e,
            Some("no runs matched in the results".to_string()),
        ),
        Err(e) => (Vec::new(), BTreeSet::new(), Some(e)),
    };
    let excluded: Vec<String> = excluded
        .iter()
        .map(|(l, r)| format!("link {l}, repetition {r}"))
        .collect();
    if let Some(why) = missing {
        return Measured {
            id: h.id.into(),
            value: None,
            ci_low: None,
            ci_high: None,
            min: None,
            max: None,
            cases: 0,
            ratio_to_paper: None,
            excluded,
            verdict: "not measured".into(),
            reason: why,
        };
    }
    let value = stat(&xs);
    let (lo, hi) = bootstrap_ci(&xs, stat, BOOTSTRAP_RESAMPLES, seed_of(h.id));
    let min = xs.iter().cloned().fold(INF, f64::min);
    let max = xs.iter().cloned().fold(-INF, f64::max);
    let (verdict, reason) = verdict(h, lo, hi);
    Measured {
        id: h.id.into(),
        value: Some(value),
        ci_low: Some(lo),
        ci_high: Some(hi),
        min: Some(min),
        max: Some(max),
        cases: xs.len(),
        ratio_to_paper: Some(value / h.paper),
        reason: if excluded.is_empty() {
            reason
        } else {
            format!(
                "{reason}; {} testbed-limited case(s) left out",
                excluded.len()
            )
        },
        excluded,
        verdict: verdict.into(),
    }
}

/// Reads the scenario directories under `dir` (named as in [`SUITE`]) and
/// writes `REPORT.md` and `report.json` there. Returns the report's text.
pub fn report(dir: &Path) -> Result<String, ReproError> {
    let mut all = BTreeMap::new();
    for e in SUITE {
        let sdir = dir.join(e.name);
        if !sdir.join(run_dir::SUMMARY).exists() {
            continue;
        }
        let RunDir {
            dir,
            metadata,
            summary,
        } = RunDir::read(&sdir)?;
        all.insert(
            e.name.to_string(),
            ScenarioData {
                dir,
                rows: summary,
                meta: metadata,
            },
        );
    }
    let quick = fs::read_to_string(dir.join(SUITE_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<SuiteFile>(&t).ok())
        .is_some_and(|s| s.quick);
    let measured: Vec<Measured> = HEADLINES.iter().map(|h| measure(&all, h)).collect();

    let mut out = String::new();
    let _ = writeln!(out, "# Reproduction report\n");
    let _ = writeln!(
        out,
        "Mode: {}. Numbers computed from each scenario's `summary.parquet` by `cargo xtask reproduce` (`reproduction report`) \
         (headline table: `ccctl/lab/src/reproduce.rs`). A value is the mean over cases (one case = one link \
         setting x repetition of the scenario; for a share, the share of cases), with its 95 % interval \
         (percentile bootstrap over the cases, {BOOTSTRAP_RESAMPLES} resamples); `spread` is the cases' \
         min..max; `ratio` is ours / the paper's. The verdict reads the interval: reproduced when it lies in \
         the reproduced band, not when it lies outside the partly band (the effect's direction), partly \
         otherwise. A case whose run was testbed-limited is left out and listed.\n",
        if quick { "`--quick`" } else { "full" }
    );
    let _ = writeln!(out, "## Testbed\n");
    let _ = writeln!(
        out,
        "| scenario | ran on | kernel | commit | status | reference Cubic (share of the rate) | wall time |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for (name, d) in &all {
        let m = &d.meta;
        let mut shares: Vec<String> = m
            .calibrations
            .iter()
            .filter_map(|c| c.share)
            .map(|s| format!("{:.1} %", s * 100.0))
            .collect();
        shares.dedup();
        let wall = match m.finished_unix {
            Some(b) => format!("{:.0} s", b - m.started_unix),
            None => "?".into(),
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {wall} |",
            m.ran_on,
            m.kernel,
            m.git_commit,
            m.status,
            shares.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nA reference Cubic flow, or the paced reference (the kernel's BBR alone), below 85 % of the rate \
         marks that link testbed-limited (the testbed, not the algorithm); every number below is from the \
         scenario as run.\n"
    );
    let _ = writeln!(out, "## Headlines\n");
    let _ = writeln!(
        out,
        "| id | seed, figure | claim | metric | paper | ours | 95 % interval | spread (cases) | ratio | verdict | reason |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for (h, m) in HEADLINES.iter().zip(&measured) {
        let _ = writeln!(
            out,
            "| {} | {} {} | {} | {} | {} | {} | {} | {} | {} | **{}** | {} |",
            h.id,
            h.seed,
            h.figure,
            h.claim,
            h.metric_text,
            h.paper_text,
            m.value.map(num).unwrap_or_else(|| "-".into()),
            match (m.ci_low, m.ci_high) {
                (Some(a), Some(b)) => format!("{}..{}", num(a), num(b)),
                _ => "-".into(),
            },
            match (m.min, m.max) {
                (Some(a), Some(b)) => format!("{}..{} ({})", num(a), num(b), m.cases),
                _ => "-".into(),
            },
            m.ratio_to_paper.map(num).unwrap_or_else(|| "-".into()),
            m.verdict,
            m.reason
        );
    }
    let excluded: Vec<String> = HEADLINES
        .iter()
        .zip(&measured)
        .filter(|(_, m)| !m.excluded.is_empty())
        .map(|(h, m)| format!("- {}: {}", h.id, m.excluded.join("; ")))
        .collect();
    let _ = writeln!(out, "\n## Left out as testbed-limited\n");
    if excluded.is_empty() {
        let _ = writeln!(
            out,
            "No case: every run a headline reads was on a healthy link."
        );
    } else {
        let _ = writeln!(out, "{}", excluded.join("\n"));
    }
    let _ = writeln!(out, "\n## Plots\n");
    for (name, d) in &all {
        let plots = d.dir.join(run_dir::PLOTS);
        let mut pngs: Vec<String> = fs::read_dir(&plots)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".png"))
                    .collect()
            })
            .unwrap_or_default();
        pngs.sort();
        let links: Vec<String> = pngs
            .iter()
            .map(|p| format!("[{p}]({name}/plots/{p})"))
            .collect();
        let _ = writeln!(out, "- {name}: {}", links.join(", "));
    }
    let report_path = dir.join("REPORT.md");
    fs::write(&report_path, &out).map_err(io(format!("writing {}", report_path.display())))?;
    let json = serde_json::to_string_pretty(&measured).map_err(|e| ReproError::Data {
        what: "report.json".into(),
        message: e.to_string(),
    })?;
    let json_path = dir.join("report.json");
    fs::write(&json_path, json + "\n").map_err(io(format!("writing {}", json_path.display())))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_headline_reads_a_suite_scenario_and_bands_nest() {
        for h in HEADLINES {
            let vals: Vec<&Value> = match &h.metric {
                Metric::Value(v) => vec![v],
                Metric::Ratio(a, b) | Metric::ShareAtLeast(a, b, _) => vec![a, b],
            };
            for v in vals {
                let (Value::Flows { runs, .. } | Value::Run { runs, .. }) = v;
                assert!(
                    SUITE.iter().any(|e| e.name == runs.scenario),
                    "{}: {}",
                    h.id,
                    runs.scenario
                );
                let mut sorted = runs.ccs.to_vec();
                sorted.sort_unstable();
                assert_eq!(sorted, runs.ccs, "{}: ccs must be sorted", h.id);
            }
            assert!(
                h.partly.0 <= h.reproduced.0 && h.reproduced.1 <= h.partly.1,
                "{}: the partly band must contain the reproduced band",
                h.id
            );
        }
    }

    #[test]
    fn quick_patches_parse_and_keep_the_scenarios_valid() {
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/seeds");
        for e in SUITE {
            let text = fs::read_to_string(seeds.join(format!("{}.toml", e.name))).expect("file");
            crate::scenario::Scenario::from_toml(&text).expect("full scenario valid");
            let q = apply_quick(&text, e.quick).expect("patch applies");
            crate::scenario::Scenario::from_toml(&q).expect("quick scenario valid");
        }
    }

    /// A hand-made harm-fig7 summary: two links, one repetition; a solo
    /// and a same-cc row that must not count. Per link the harm ratio is
    /// Cubic's harm beside BBR over Reno's beside Cubic: 0.8/0.4 = 2.0 and
    /// 0.6/0.5 = 1.2, so the mean is 1.6, the share >= 1.6 and >= 2 is 0.5.
    #[test]
    fn harm_headlines_pair_cases_and_ignore_baselines() {
        // (kind, run, link, cc, harm_tput)
        type R = (&'static str, u32, u32, &'static str, f64);
        let rows: &[R] = &[
            ("main", 1, 0, "cubic", 0.1),
            ("main", 1, 0, "reno", 0.4),
            ("main", 2, 0, "bbr", 0.0),
            ("main", 2, 0, "cubic", 0.8),
            ("solo", 3, 0, "cubic", 9.0),
            ("same-cc", 4, 0, "reno", 9.0),
            ("same-cc", 4, 0, "reno", 9.0),
            ("main", 5, 1, "cubic", 0.2),
            ("main", 5, 1, "reno", 0.5),
            ("main", 6, 1, "bbr", 0.0),
            ("main", 6, 1, "cubic", 0.6),
            // Link 2 was testbed-limited: its ratio 0.1/0.9 must not count.
            ("main", 7, 2, "cubic", 0.1),
            ("main", 7, 2, "reno", 0.9),
            ("main", 8, 2, "bbr", 0.0),
            ("main", 8, 2, "cubic", 0.1),
        ];
        // Written by the run directory's writers, as `lab run` writes it.
        let records: Vec<SummaryRecord> = rows
            .iter()
            .map(|r| {
                let mut row = crate::run_dir::tests::summary_row(r.0, r.1, r.3);
                row.link_index = r.2;
                row.flow_rtt_ms = Some(100.0);
                row.testbed_limited = r.2 == 2;
                row.harm_tput = Some(r.4);
                row
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("ccctl-repro-unit-{}", std::process::id()));
        let sdir = dir.join("harm-fig7");
        fs::create_dir_all(&sdir).expect("dir");
        run_dir::write_summary(&sdir, &records).expect("summary");
        crate::run_dir::tests::metadata()
            .write(&sdir)
            .expect("metadata");
        report(&dir).expect("report");
        let json: Vec<serde_json::Value> =
            serde_json::from_str(&fs::read_to_string(dir.join("report.json")).expect("json"))
                .expect("parses");
        let get = |id: &str| {
            json.iter()
                .find(|m| m["id"] == id)
                .expect("headline")
                .clone()
        };
        let mean = get("harm-fig7-mean");
        assert!(
            (mean["value"].as_f64().expect("value") - 1.6).abs() < 1e-12,
            "{mean}"
        );
        assert_eq!(mean["cases"], 2);
        assert_eq!(
            mean["excluded"],
            serde_json::json!(["link 2, repetition 0"]),
            "{mean}"
        );
        // Two cases, 1.2 and 2.0: the bootstrap means lie in 1.2..2.0.
        assert!((mean["ci_low"].as_f64().expect("ci") - 1.2).abs() < 1e-12);
        assert!((mean["ci_high"].as_f64().expect("ci") - 2.0).abs() < 1e-12);
        assert!((mean["min"].as_f64().expect("min") - 1.2).abs() < 1e-12);
        assert_eq!(mean["verdict"], "reproduced");
        assert_eq!(get("harm-fig7-ge1.6")["value"], 0.5);
        assert_eq!(get("harm-fig7-ge2")["value"], 0.5);
        assert_eq!(get("modest-fig2-tput")["verdict"], "not measured");
        // The testbed table is the scenario's metadata.json, read typed.
        let md = fs::read_to_string(dir.join("REPORT.md")).expect("REPORT.md");
        assert!(
            md.contains("| harm-fig7 | host | 6.1.0 | abc123 | complete | 95.0 % | 60 s |"),
            "{md}"
        );
        // A scenario directory of a newer format is refused by its version.
        let meta = sdir.join(run_dir::METADATA);
        let text = fs::read_to_string(&meta).expect("metadata");
        let newer = format!("\"format\": {}", run_dir::FORMAT + 1);
        fs::write(
            &meta,
            text.replacen(&format!("\"format\": {}", run_dir::FORMAT), &newer, 1),
        )
        .expect("write");
        let e = report(&dir).expect_err("newer format");
        assert!(
            e.to_string()
                .contains(&format!("format {}", run_dir::FORMAT + 1)),
            "{e}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn bootstrap_interval_holds_the_mean_and_narrows_with_cases() {
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
        assert_eq!(bootstrap_ci(&[3.0], &mean, 1000, 1), (3.0, 3.0));
        assert_eq!(bootstrap_ci(&[2.0; 7], &mean, 1000, 1), (2.0, 2.0));
        // 10 cases 0..9 (mean 4.5, sd 3.03): the mean's 95 % interval is
        // about 4.5 +- 1.96 x 3.03 / sqrt(10) = 2.6..6.4.
        let ten: Vec<f64> = (0..10).map(f64::from).collect();
        let (lo, hi) = bootstrap_ci(&ten, &mean, 4000, 7);
        assert!(
            (2.0..3.2).contains(&lo) && (5.8..7.0).contains(&hi),
            "{lo}..{hi}"
        );
        // 40 cases of the same spread: about half as wide.
        let forty: Vec<f64> = (0..40).map(|i| f64::from(i % 10)).collect();
        let (lo4, hi4) = bootstrap_ci(&forty, &mean, 4000, 7);
        assert!(
            hi4 - lo4 < 0.65 * (hi - lo),
            "{lo4}..{hi4} against {lo}..{hi}"
        );
        // Seeded: the same interval twice.
        assert_eq!(bootstrap_ci(&ten, &mean, 4000, 7), (lo, hi));
    }

    #[test]
    fn verdict_reads_the_interval() {
        let h = HEADLINES
            .iter()
            .find(|h| h.id == "modest-fig2-tput")
            .expect("headline");
        // reproduced 7..28, partly >= 1.5
        assert_eq!(verdict(h, 8.0, 20.0).0, "reproduced");
        assert_eq!(verdict(h, 5.0, 20.0).0, "partly", "straddles 7");
        assert_eq!(verdict(h, 2.0, 4.0).0, "partly");
        assert_eq!(verdict(h, 1.0, 2.0).0, "partly", "meets the direction");
        assert_eq!(verdict(h, 0.5, 1.4).0, "not");
    }

    #[test]
    fn num_prints_three_significant_digits() {
        assert_eq!(num(14.0), "14.0");
        assert_eq!(num(0.175), "0.175");
        assert_eq!(num(2.6016), "2.60");
        assert_eq!(num(1234.5), "1234");
    }
}
