//! `ccctl policy apply|show|rollback|clear`: the rollout policy
//! (`ccctl_core::policy`).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use ccctl_core::kernel;
use ccctl_core::policy::{
    audit, kernel as pk, CgroupRef, CgroupSubtrees, Migration, Policy, PolicyFile,
};
use ccctl_observe::sockdiag::{tcp_state, DiagSocket};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file and put it in force for new connections (the previous policy is replaced whole).
    Apply(ApplyArgs),
    /// The policy in force: rules in order (first match wins), states, counters.
    Show(ShowArgs),
    /// Roll a rule back: new connections it matches get its control, and its canary's live connections are moved back.
    Rollback(RollbackArgs),
    /// Remove the policy: programs detached, pins removed, the registrations it made unloaded.
    Clear(ClearArgs),
}

/// `--audit FILE`: where the change is recorded.
#[derive(Debug, Args, Default)]
pub struct AuditArg {
    /// Audit log to append this change to (one JSON line); default: $CCCTL_AUDIT, else
    /// /var/lib/ccctl/audit.jsonl. A log that cannot be written refuses the change.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ClearArgs {
    #[command(flatten)]
    pub audit: AuditArg,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The policy file (TOML, `[[rule]]` tables; see examples/fleet/policy.toml).
    pub file: PathBuf,
    /// Change nothing: validate, then list which current connections each rule would take
    /// (with --migrate: which of them a migration would move).
    #[arg(long)]
    pub dry_run: bool,
    /// Also move the live (ESTABLISHED) connections the rules match onto what each rule
    /// gives a new connection with their 4-tuple (canary or control by the same hash);
    /// one that runs its application's own choice is left unless the rule enforces.
    /// Without it live connections keep their algorithm.
    #[arg(long)]
    pub migrate: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub audit: AuditArg,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The rule's name.
    pub name: String,
    /// Why, for the record (kept with the rule's state).
    #[arg(long, default_value = "by hand (ccctl policy rollback)")]
    pub why: String,
    #[command(flatten)]
    pub audit: AuditArg,
}

/// The audit log for a command (`--audit`, `$CCCTL_AUDIT`, the default),
/// opened before anything is changed.
pub fn open_audit(arg: &AuditArg) -> Result<audit::Log> {
    let path = audit::resolve(arg.audit.as_deref(), None);
    audit::Log::open(&path).context(
        "the audit log (--audit FILE or $CCCTL_AUDIT to put it elsewhere); nothing changed",
    )
}

/// Append `rec`; a failure is the command's error (the change is made).
pub fn record(log: &mut audit::Log, rec: &audit::Record) -> Result<()> {
    log.append(rec).with_context(|| {
        format!(
            "the change is made but could not be recorded in {}",
            log.path().display()
        )
    })
}

pub fn run(cmd: PolicyCommand) -> Result<()> {
    match cmd {
        PolicyCommand::Apply(a) => apply(a),
        PolicyCommand::Show(a) => show(a),
        PolicyCommand::Rollback(a) => rollback(a),
        PolicyCommand::Clear(a) => clear(a),
    }
}

/// Read and validate a policy file; the error names the file and the field.
pub fn load_file(path: &Path) -> Result<Policy> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file =
        PolicyFile::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    file.validate(&pk::HostEnv)
        .map_err(|e| anyhow::anyhow!("{}: {e}; nothing applied", path.display()))
}

fn apply(args: ApplyArgs) -> Result<()> {
    if !args.dry_run {
        kernel::check_privileges().context("ccctl policy apply")?;
    }
    let policy = load_file(&args.file)?;
    for o in &policy.overlaps {
        eprintln!("ccctl: note: {o}");
    }
    if args.dry_run {
        let takes = dry_run(&policy, args.migrate)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&takes)?);
            return Ok(());
        }
        println!(
            "dry run: {} rule(s), first match wins; nothing changed",
            policy.rules.len()
        );
        for r in &policy.rules {
            let list = takes.get(&r.name).map(Vec::as_slice).unwrap_or(&[]);
            println!(
                "rule {} ({}) -> {}{}{}; would take {} current connection(s)",
                r.name,
                r.describe_match(),
                r.algorithm.name,
                if r.share < 1.0 {
                    format!(" on {:.1} % (canary)", r.share * 100.0)
                } else {
                    String::new()
                },
                r.control
                    .as_ref()
                    .map(|c| format!(", the rest {}", c.name))
                    .unwrap_or_default(),
                list.len()
            );
            for c in list {
                println!(
                    "  {} -> {}  {} -> {}{}",
                    c.local,
                    c.remote,
                    c.cc.as_deref().unwrap_or("?"),
                    c.gets.as_deref().unwrap_or("(unchanged)"),
                    match c.migration {
                        None => "",
                        Some(Migration::Moves) => "  [--migrate: moves]",
                        Some(Migration::Stays) => "  [--migrate: already on it]",
                        Some(Migration::Left) => "  [--migrate: left, no control]",
                        Some(Migration::AppKept) =>
                            "  [--migrate: kept, presumed the application's choice; no enforce]",
                        Some(Migration::NotEstablished) => "  [--migrate: closing, not moved]",
                    }
                );
            }
        }
        if args.migrate {
            let all: Vec<&Take> = takes.values().flatten().collect();
            let count = |m: Migration| all.iter().filter(|t| t.migration == Some(m)).count();
            println!(
                "--migrate would move {} live connection(s) ({} to a canary, {} to a control); {} already on theirs, {} left (no control), {} kept as the application's",
                count(Migration::Moves),
                all.iter()
                    .filter(|t| t.migration == Some(Migration::Moves) && t.canary)
                    .count(),
                all.iter()
                    .filter(|t| t.migration == Some(Migration::Moves) && !t.canary)
                    .count(),
                count(Migration::Stays),
                count(Migration::Left),
                count(Migration::AppKept)
            );
        } else {
            println!(
                "(new connections only: live ones keep their algorithm; --migrate moves them)"
            );
        }
        return Ok(());
    }
    let mut log = open_audit(&args.audit)?;
    let why = format!(
        "ccctl policy apply {}{}",
        args.file.display(),
        if args.migrate { " --migrate" } else { "" }
    );
    let report = pk::apply_with(&policy, &why, args.migrate)?;
    let mut rec = audit::Record::now(audit::Action::Apply, why);
    // The rules as applied (derived registrations named).
    rec.rules = match pk::current() {
        Ok(Some(doc)) => doc.rules.iter().map(|r| (&r.rule).into()).collect(),
        _ => policy.rules.iter().map(Into::into).collect(),
    };
    rec.outcome = serde_json::to_value(&report)?;
    record(&mut log, &rec)?;
    let migration_error = report.migration.as_ref().and_then(|m| m.error.clone());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "applied {} rule(s) from {} (generation {}); first match wins; new connections from now on{}",
            report.rules,
            args.file.display(),
            report.generation,
            if args.migrate { ", and live ones (--migrate)" } else { "" }
        );
        for a in &report.loaded {
            println!("  loaded {a}");
        }
        for (rule, k) in &report.registered {
            println!("  rule {rule}: its parameter set registered as `{k}`");
        }
        for k in &report.unloaded {
            println!("  unloaded `{k}` (no rule uses it now)");
        }
        if let Some(m) = &report.migration {
            println!(
                "  migrated {} live connection(s) of {} established in {}",
                m.moved,
                m.seen,
                m.namespaces.join(", ")
            );
            for r in &m.rules {
                println!(
                    "  rule {}: {} moved to the canary, {} to the control, {} left (no control), {} kept the application's choice, {} failed",
                    r.rule, r.canary, r.control, r.left, r.app_kept, r.failed
                );
            }
        }
    }
    if let Some(e) = migration_error {
        anyhow::bail!(
            "the policy is applied (generation {}), but migrating live connections stopped: {e}; \
             the connections moved so far are in the audit line",
            report.generation
        );
    }
    Ok(())
}

/// A current connection a rule would take.
#[derive(Debug, serde::Serialize)]
pub struct Take {
    pub local: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
    /// Its algorithm now.
    pub cc: Option<String>,
    pub canary: bool,
    /// What it would get (`None`: left as it is).
    pub gets: Option<String>,
    /// With `--migrate`: what the migration would do to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<Migration>,
}

/// Which current connections (inet_diag: this namespace and each rule's)
/// each rule would take if it applied to them; with `migrate`, what the
/// migration would do to each ([`ccctl_core::policy::migration`]: the
/// namespace's default is read there; a connection is presumed the
/// policy's own when the policy in force gives its 4-tuple what it runs,
/// since socket storage cannot be read from here).
pub fn dry_run(policy: &Policy, migrate: bool) -> Result<BTreeMap<String, Vec<Take>>> {
    let mut spaces: Vec<(Option<PathBuf>, Option<u64>)> = vec![(None, None)];
    if let Ok(c) = pk::netns_cookie(Path::new("/proc/self/ns/net")) {
        spaces[0].1 = Some(c);
    }
    for r in &policy.rules {
        if let Some(n) = &r.netns {
            if !spaces.iter().any(|(_, c)| *c == Some(n.cookie)) {
                spaces.push((Some(n.path.clone()), Some(n.cookie)));
            }
        }
    }
    let subtrees = CgroupSubtrees::of(&policy.rules);
    let in_cgroup = |g: &CgroupRef, id: u64| subtrees.contains(g, id);
    // The policy in force, to tell the connections it set (migrate only).
    let in_force: Option<Policy> = if migrate {
        pk::current().ok().flatten().map(|d| Policy {
            rules: d.rules.into_iter().map(|r| r.rule).collect(),
            overlaps: Vec::new(),
        })
    } else {
        None
    };
    let in_force_subtrees = in_force
        .as_ref()
        .map(|p| CgroupSubtrees::of(&p.rules))
        .unwrap_or_default();
    let in_force_cgroup = |g: &CgroupRef, id: u64| in_force_subtrees.contains(g, id);
    let mut out: BTreeMap<String, Vec<Take>> = BTreeMap::new();
    for (path, cookie) in spaces {
        let default = if migrate {
            let p = path
                .clone()
                .unwrap_or_else(|| PathBuf::from("/proc/self/ns/net"));
            pk::namespace_default_cc(&p).map_err(anyhow::Error::msg)?
        } else {
            String::new()
        };
        let diag = DiagSocket::open_at(path.as_deref()).context("opening inet_diag")?;
        for s in diag.tcp_sockets().context("listing TCP connections")? {
            let c = s.conn(cookie);
            if let Some(d) = policy.decide(&c, &in_cgroup) {
                let migration = migrate.then(|| {
                    let ours = in_force.as_ref().is_some_and(|p| {
                        p.decide(&c, &in_force_cgroup)
                            .is_some_and(|o| o.gets.is_some() && o.gets == s.cc)
                    });
                    let enforce = policy
                        .rules
                        .iter()
                        .find(|r| r.name == d.rule)
                        .is_some_and(|r| r.enforce);
                    ccctl_core::policy::migration(
                        s.state == tcp_state::ESTABLISHED,
                        s.cc.as_deref(),
                        d.gets.as_deref(),
                        &default,
                        ours,
                        enforce,
                    )
                });
                out.entry(d.rule).or_default().push(Take {
                    local: s.local,
                    remote: s.remote,
                    cc: s.cc,
                    canary: d.canary,
                    gets: d.gets,
                    migration,
                });
            }
        }
    }
    Ok(out)
}

#[derive(serde::Serialize)]
struct ShowJson<'a> {
    installed: bool,
    policy: Option<&'a pk::Applied>,
    /// Counters per rule name.
    counters: BTreeMap<String, Counters>,
}

#[derive(serde::Serialize, Default)]
struct Counters {
    canary: u64,
    control: u64,
    app_kept: u64,
    failed: u64,
    app_refused: u64,
    rolled_back: u64,
    /// Live connections `apply --migrate` put on the canary / the control,
    /// left (no control), kept (the application's), failed.
    migrated_canary: u64,
    migrated_control: u64,
    migrated_left: u64,
    migrated_app_kept: u64,
    migrated_failed: u64,
}

fn show(args: ShowArgs) -> Result<()> {
    let doc = pk::current()?;
    let stats = pk::stats().unwrap_or_default();
    let mig = pk::mig_stats().unwrap_or_default();
    let mut counters = BTreeMap::new();
    if let Some(d) = &doc {
        for r in &d.rules {
            let s = stats.get(&r.rule.id).copied().unwrap_or_default();
            let m = mig.get(&r.rule.id).copied().unwrap_or_default();
            counters.insert(
                r.rule.name.clone(),
                Counters {
                    canary: s.canary,
                    control: s.control,
                    app_kept: s.app_kept,
                    failed: s.failed,
                    app_refused: s.app_refused,
                    rolled_back: s.rolled_back,
                    migrated_canary: m.canary,
                    migrated_control: m.control,
                    migrated_left: m.left,
                    migrated_app_kept: m.app_kept,
                    migrated_failed: m.failed,
                },
            );
        }
    }
    if args.json {
        let j = ShowJson {
            installed: pk::installed(),
            policy: doc.as_ref(),
            counters,
        };
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    let Some(d) = doc else {
        println!("no policy applied");
        return Ok(());
    };
    println!(
        "policy generation {}, applied {} by {} ({})",
        d.generation,
        ccctl_core::units::utc(d.applied.at_unix, "-", " ", ":", ""),
        d.applied.by,
        d.applied.why
    );
    println!("rules are tried in order; the first that matches a new connection takes it (first match wins)");
    for (i, r) in d.rules.iter().enumerate() {
        let c = counters
            .get(&r.rule.name)
            .map(|c| (c.canary, c.control, c.app_kept, c.failed));
        let (can, ctl, kept, failed) = c.unwrap_or_default();
        println!(
            "{}. {} [{}] {}: {} `{}`{}{}{}",
            i + 1,
            r.rule.name,
            match r.state {
                pk::RuleState::Baseline => "baseline",
                pk::RuleState::Canary => "canary",
                pk::RuleState::Active => "active",
                pk::RuleState::RolledBack => "rolled back",
            },
            r.rule.describe_match(),
            r.rule.algorithm.name,
            r.rule.algorithm.kernel_name,
            if r.rule.share < 1.0 {
                format!(" on {:.1} %", r.rule.share * 100.0)
            } else {
                String::new()
            },
            r.rule
                .control
                .as_ref()
                .map(|c| format!(", the rest {}", c.kernel_name))
                .unwrap_or_default(),
            if r.rule.enforce { ", enforced" } else { "" },
        );
        println!(
            "   connections: {can} canary, {ctl} control, {kept} kept the application's choice, {failed} failed"
        );
        if let Some(c) = counters.get(&r.rule.name) {
            let m = (
                c.migrated_canary,
                c.migrated_control,
                c.migrated_left,
                c.migrated_app_kept,
                c.migrated_failed,
            );
            if m != (0, 0, 0, 0, 0) {
                println!(
                    "   live connections migrated: {} to the canary, {} to the control, {} left, {} kept the application's choice, {} failed",
                    m.0, m.1, m.2, m.3, m.4
                );
            }
        }
        if r.state == pk::RuleState::Baseline {
            let secs = r.rule.judge.and_then(|j| j.baseline_s).unwrap_or(0.0);
            println!(
                "   measuring its baseline: every connection gets the control until `ccctl daemon` has measured {secs:.0}s of it, then the canary starts"
            );
        }
        if let (Some(b), Some(e)) = (&r.baseline, &r.canary_started) {
            println!(
                "   canary started {} after a baseline of {:.1}s: control {:.1} connections, {:.1} Mbit/s in all, srtt {:.1} ms",
                ccctl_core::units::utc(e.at_unix, "-", " ", ":", ""),
                b.secs,
                b.flows,
                b.total_goodput_bps / 1e6,
                b.rtt_ms
            );
        }
        if let Some(e) = &r.rolled_back {
            println!(
                "   rolled back {} by {}: {}",
                ccctl_core::units::utc(e.at_unix, "-", " ", ":", ""),
                e.by,
                e.why
            );
        }
    }
    for o in &d.overlaps {
        println!("note: {o}");
    }
    Ok(())
}

fn rollback(args: RollbackArgs) -> Result<()> {
    kernel::check_privileges().context("ccctl policy rollback")?;
    let mut log = open_audit(&args.audit)?;
    let rule = pk::current()
        .ok()
        .flatten()
        .and_then(|d| d.rules.into_iter().find(|r| r.rule.name == args.name));
    let r = pk::rollback(&args.name, &args.why)?;
    let mut rec = audit::Record::now(audit::Action::Rollback, args.why.clone());
    rec.rules = rule.iter().map(|r| (&r.rule).into()).collect();
    rec.outcome = serde_json::to_value(&r)?;
    record(&mut log, &rec)?;
    println!(
        "rolled back {}: new connections it matches get {}; {} live canary connection(s) moved back to {} ({} failed) in {}",
        r.rule,
        if r.to == "previous" {
            "what they would have had"
        } else {
            &r.to
        },
        r.moved,
        r.to,
        r.failed,
        r.namespaces.join(", ")
    );
    Ok(())
}

fn clear(args: ClearArgs) -> Result<()> {
    kernel::check_privileges().context("ccctl policy clear")?;
    let mut log = open_audit(&args.audit)?;
    let before = pk::current().ok().flatten();
    let r = pk::clear()?;
    let mut rec = audit::Record::now(audit::Action::Clear, "ccctl policy clear");
    rec.rules = before
        .iter()
        .flat_map(|d| d.rules.iter().map(|r| (&r.rule).into()))
        .collect();
    rec.outcome = serde_json::to_value(&r)?;
    record(&mut log, &rec)?;
    if !r.had_policy && r.unloaded.is_empty() {
        println!("no policy applied; nothing to do");
        return Ok(());
    }
    println!("policy removed: programs detached, pins removed");
    for u in r.unloaded {
        println!("  unloaded {u}");
    }
    Ok(())
}
