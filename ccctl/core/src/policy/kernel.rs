//! A validated [`Policy`] in the kernel: `bpf/policy.bpf.c` attached to the
//! cgroup v2 root, its rules in pinned maps, the registrations the rules
//! need, and the way back.
//!
//! Pins (`<bpffs>/ccctl/policy/`, 0700 like the rest of the tree):
//!   `policy_rules`, `policy_hdr`, `policy_doc`, `policy_stats`,
//!   `policy_iter_cfg`, `policy_sk`, `policy_mig_cfg`, `policy_mig_stats`
//!                                   the object's maps (pinned by name: a
//!                                   later load of the object reuses them;
//!                                   the last two are pinned at the first
//!                                   load that has them);
//!   `sockops_link`, `setsockopt_link` its cgroup attachments.
//! A rule with its own parameter set runs on a *derived registration*: the
//! algorithm's embedded object registered once more under a derived kernel
//! name (`modest_bbr_p1`) with that set in its own params map, pinned like
//! any algorithm as `<bpffs>/ccctl/<name>@p<N>/` (bpffs refuses dots in names). One registration per
//! distinct set (rules with equal sets share it); the per-ACK path is the
//! algorithm's own, untouched. `ccctl tune modest-bbr` does not reach them.
//!
//! The applied policy (rules, states, who applied it, which registrations
//! it made) is a JSON document in `policy_doc`, beside the rules it
//! describes, in the same half: the pins are the whole state, as for
//! algorithms, and a daemon or command started later finds it there.
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle};
use serde::{Deserialize, Serialize};

use super::{CgroupRef, Env, Overlap, Policy, Rule};
use crate::abi::{self, Plain};
use crate::error::{bpf, io, Error, Result};
use crate::registry::{self as algos, Algorithm};
use crate::{kernel, loader, pins};

const LINK_SOCKOPS: &str = "sockops_link";
const LINK_SETSOCKOPT: &str = "setsockopt_link";
const MAP_RULES: &str = "policy_rules";
const MAP_HDR: &str = "policy_hdr";
const MAP_DOC: &str = "policy_doc";
const MAP_STATS: &str = "policy_stats";
const MAP_ITER_CFG: &str = "policy_iter_cfg";
const MAP_MIG_CFG: &str = "policy_mig_cfg";
const MAP_MIG_STATS: &str = "policy_mig_stats";
const POLICY_LOCK: &str = "/run/ccctl/policy.lock";
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// `<bpffs>/ccctl/policy`.
pub fn policy_dir() -> PathBuf {
    pins::pin_root().join("policy")
}

/// Whether a policy is installed (its programs attached).
pub fn installed() -> bool {
    policy_dir().join(LINK_SOCKOPS).exists()
}

// ---- the machine, for validation ---------------------------------------------

/// The running machine as validation sees it.
pub struct HostEnv;

/// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a hybrid system), from /proc/self/mountinfo.
pub fn cgroup2_mount() -> std::result::Result<PathBuf, String> {
    let text = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    for line in text.lines() {
        // ... mount_point ... - fstype source options
        let mut halves = line.splitn(2, " - ");
        let (pre, post) = (halves.next().unwrap_or(""), halves.next().unwrap_or(""));
        if post.split_whitespace().next() == Some("cgroup2") {
            if let Some(mp) = pre.split_whitespace().nth(4) {
                return Ok(PathBuf::from(mp.replace("\\040", " ")));
            }
        }
    }
    Err("cgroup v2 is not mounted (no cgroup2 line in /proc/self/mountinfo)".into())
}

impl Env for HostEnv {
    fn cgroup(&self, path: &Path) -> std::result::Result<CgroupRef, String> {
        let mount = cgroup2_mount()?;
        let full = if path.starts_with(&mount) {
            path.to_path_buf()
        } else {
            mount.join(path.strip_prefix("/").unwrap_or(path))
        };
        let md = fs::metadata(&full).map_err(|e| {
            format!(
                "{}: {e} (a cgroup v2 directory, under {} or relative to it)",
                full.display(),
                mount.display()
            )
        })?;
        #[allow(clippy::unnecessary_cast)]
        let on_cgroup2 =
            rustix::fs::statfs(&full).is_ok_and(|st| st.f_type as i64 == CGROUP2_SUPER_MAGIC);
        if !md.is_dir() || !on_cgroup2 {
            return Err(format!(
                "{} is not a cgroup v2 directory (cgroup2 is mounted at {})",
                full.display(),
                mount.display()
            ));
        }
        let rel = full.strip_prefix(&mount).unwrap_or(Path::new(""));
        Ok(CgroupRef {
            level: rel.components().count() as u32,
            id: std::os::unix::fs::MetadataExt::ino(&md),
            path: full,
        })
    }

    fn netns_cookie(&self, path: &Path) -> std::result::Result<u64, String> {
        netns_cookie(path)
    }

    fn kernel_congestion_controls(&self) -> Vec<String> {
        kernel::available_congestion_controls()
            .unwrap_or_default()
            .into_iter()
            .filter(|k| {
                !algos::ALGORITHMS.iter().any(|a| a.kernel_name == k) && !is_derived_kernel_name(k)
            })
            .collect()
    }
}

/// The cookie of the network namespace at `path` (`SO_NETNS_COOKIE` of a
/// socket made there; Linux 5.14+).
pub fn netns_cookie(path: &Path) -> std::result::Result<u64, String> {
    let f = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    drop(f);
    let cookie = ccctl_sys::netns::run_in(path, || -> std::result::Result<u64, String> {
        let s = std::net::UdpSocket::bind("127.0.0.1:0")
            .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))
            .map_err(|e| format!("a socket in the namespace: {e}"))?;
        let mut v: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`, a u64.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NETNS_COOKIE,
                (&mut v as *mut u64).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(format!(
                "SO_NETNS_COOKIE: {} (Linux 5.14+)",
                std::io::Error::last_os_error()
            ));
        }
        Ok(v)
    })
    .map_err(|e| format!("{} is not a network namespace ({e})", path.display()))??;
    Ok(cookie)
}

// ---- the applied document ---------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleState {
    /// A canary whose judge measures the control first (`[rule.judge]
    /// baseline`): every matching connection gets the control until the
    /// daemon has the baseline and starts the canary.
    Baseline,
    /// Takes `share` < 1 of its connections, the rest get the control.
    Canary,
    /// Takes all of its connections.
    Active,
    /// Rolled back: its connections get the control (or are left alone).
    RolledBack,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedRule {
    #[serde(flatten)]
    pub rule: Rule,
    pub state: RuleState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<Event>,
    /// The control measured before the canary started (and when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<super::judge::Baseline>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_started: Option<Event>,
}

/// Who did something, when and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at_unix: u64,
    pub by: String,
    pub why: String,
}

/// The policy in force, as `policy show` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// Always "first match wins": rules are tried in order.
    pub order: String,
    pub applied: Event,
    pub generation: u32,
    pub rules: Vec<AppliedRule>,
    pub overlaps: Vec<Overlap>,
    /// ccctl algorithms (user names) the policy loaded; clear unloads them.
    pub loaded: Vec<String>,
    /// Derived registrations (user names, `modest-bbr@p1`) the rules run on.
    pub derived: Vec<String>,
}

/// `uid N (name) pid P`: who is doing this.
pub fn who() -> String {
    let uid = rustix::process::getuid().as_raw();
    let user = std::env::var("SUDO_USER")
        .ok()
        .map(|u| format!(" via sudo from {u}"))
        .unwrap_or_default();
    format!("uid {uid}{user} pid {}", std::process::id())
}

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---- derived registrations ----------------------------------------------------------

fn is_derived_kernel_name(k: &str) -> bool {
    algos::ALGORITHMS.iter().any(|a| {
        k.strip_prefix(a.kernel_name)
            .and_then(|r| r.strip_prefix("@p"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// A derived registration, as the loader takes algorithms (leaked: a
/// process makes a handful at most).
fn derived_algo(base: &'static Algorithm, n: u32) -> &'static Algorithm {
    let (name, kernel_name) = pins::derived_names(base, n);
    Box::leak(Box::new(Algorithm {
        id: base.id,
        name: Box::leak(name.into_boxed_str()),
        kernel_name: Box::leak(kernel_name.into_boxed_str()),
        summary: base.summary,
        object: base.object,
        events: base.events,
        plot_colour: base.plot_colour,
    }))
}

/// The derived registrations pinned now: (base, N, algorithm).
pub fn derived_pinned() -> Vec<(&'static Algorithm, u32, &'static Algorithm)> {
    pins::derived_dirs()
        .into_iter()
        .map(|(base, n)| (base, n, derived_algo(base, n)))
        .collect()
}

/// Whether any derived registration is pinned (the shared trace maps stay).
pub fn any_derived_pinned() -> bool {
    !derived_pinned().is_empty()
}

fn same_set(a: &abi::ccctl_params, b: &abi::ccctl_params) -> bool {
    let (mut a, mut b) = (*a, *b);
    a.version = 0;
    b.version = 0;
    a.as_bytes() == b.as_bytes()
}

/// The registration for `base` with the set `p`: an existing derived one
/// with that set, or a new one (and whether it was made now).
fn ensure_derived(
    base: &'static Algorithm,
    p: &abi::ccctl_params,
) -> Result<(&'static Algorithm, bool)> {
    let pinned = derived_pinned();
    for (b, _, d) in &pinned {
        if b.name == base.name && kernel::is_registered(d.kernel_name)? {
            if let Ok(cur) = pins::read_params(&pins::pin_dir(d)) {
                if same_set(&cur, p) {
                    return Ok((d, false));
                }
            }
        }
    }
    let taken: BTreeSet<u32> = pinned
        .iter()
        .filter(|(b, _, _)| b.name == base.name)
        .map(|(_, n, _)| *n)
        .collect();
    let n = (1..).find(|n| !taken.contains(n)).unwrap_or(1);
    let d = derived_algo(base, n);
    if d.kernel_name.len() >= abi::CCCTL_CA_NAME_MAX as usize {
        return Err(Error::Refused(format!(
            "a registration of {} for one more parameter set would be named `{}`, longer than \
             the kernel's 15 characters: too many distinct parameter sets",
            base.name, d.kernel_name
        )));
    }
    loader::load(
        d,
        &loader::LoadOptions {
            params: Some(*p),
            ..Default::default()
        },
    )?;
    Ok((d, true))
}

// ---- the object and its pins ----------------------------------------------------

fn open_skel(
    storage: &mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<crate::bpf::policy::OpenPolicySkel<'_>> {
    let mut builder = crate::bpf::policy::PolicySkelBuilder::default();
    builder
        .obj_builder
        .btf_custom_path(kernel::btf_path())
        .map_err(bpf("setting the kernel BTF path"))?
        .pin_root_path(policy_dir())
        .map_err(bpf("setting the policy pin path"))?;
    builder
        .open(storage)
        .map_err(bpf("opening the embedded policy BPF object"))
}

fn make_policy_dir() -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    pins::check_pin_tree()?;
    let dir = policy_dir();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io(format!("creating {}", dir.display())))?;
    for d in [pins::pin_root(), dir] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700))
            .map_err(io(format!("setting mode 0700 on {}", d.display())))?;
    }
    Ok(())
}

/// Load the object (its maps pinned by name, or the pinned ones reused)
/// and attach the sockops and setsockopt programs to the cgroup v2 root,
/// pinning the links. Nothing matches until rules are written and flipped
/// in, so a kill anywhere here leaves no rule in force.
fn install() -> Result<()> {
    if installed() && policy_dir().join(LINK_SETSOCKOPT).exists() {
        return Ok(());
    }
    make_policy_dir()?;
    let root = cgroup2_mount().map_err(|e| Error::Io {
        what: "finding the cgroup v2 root to attach the policy to".into(),
        source: std::io::Error::other(e),
    })?;
    let cg = fs::File::open(&root).map_err(io(format!("opening {}", root.display())))?;
    let mut storage = MaybeUninit::uninit();
    let mut open = open_skel(&mut storage)?;
    open.progs.ccctl_policy_rollback.set_autoload(false);
    open.progs.ccctl_policy_migrate.set_autoload(false);
    let skel = open.load().map_err(bpf("loading the policy BPF object"))?;
    for (prog, pin) in [
        (&skel.progs.ccctl_policy_sockops, LINK_SOCKOPS),
        (&skel.progs.ccctl_policy_setsockopt, LINK_SETSOCKOPT),
    ] {
        let path = policy_dir().join(pin);
        if path.exists() {
            continue;
        }
        let mut link = prog
            .attach_cgroup(cg.as_raw_fd())
            .map_err(bpf(format!("attaching {pin} to {}", root.display())))?;
        link.pin(&path)
            .map_err(bpf(format!("pinning {}", path.display())))?;
    }
    Ok(())
}

fn map(name: &str) -> Result<MapHandle> {
    let p = policy_dir().join(name);
    MapHandle::from_pinned_path(&p).map_err(bpf(format!("opening {}", p.display())))
}

fn read_hdr() -> Result<abi::ccctl_policy_hdr> {
    let m = map(MAP_HDR)?;
    let v = m
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf("reading policy_hdr"))?
        .unwrap_or_default();
    Ok(abi::ccctl_policy_hdr::from_bytes(&v).unwrap_or_default())
}

fn write_hdr(h: &abi::ccctl_policy_hdr) -> Result<()> {
    map(MAP_HDR)?
        .update(&0u32.to_ne_bytes(), h.as_bytes(), MapFlags::ANY)
        .map_err(bpf("writing policy_hdr"))
}

/// The applied document of the half in force, if any.
pub fn current() -> Result<Option<Applied>> {
    if !policy_dir().join(MAP_HDR).exists() {
        return Ok(None);
    }
    let h = read_hdr()?;
    if h.active == 0 || h.active > 2 {
        return Ok(None);
    }
    let v = map(MAP_DOC)?
        .lookup(&(h.active - 1).to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf("reading policy_doc"))?
        .unwrap_or_default();
    if v.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_ne_bytes([v[0], v[1], v[2], v[3]]) as usize;
    let json = v.get(4..4 + len).unwrap_or(&[]);
    let doc = serde_json::from_slice(json).map_err(|e| Error::Io {
        what: "reading the applied policy document".into(),
        source: std::io::Error::other(e),
    })?;
    Ok(Some(doc))
}

/// Write `doc` and its rules into the half not in force, then flip to it.
fn publish(doc: &Applied) -> Result<()> {
    let h = read_hdr()?;
    let next = if h.active == 1 { 1u32 } else { 0 };
    let rules = map(MAP_RULES)?;
    for (i, r) in doc.rules.iter().enumerate() {
        let key = next * abi::CCCTL_POLICY_MAX_RULES + i as u32;
        // A rule measuring its baseline gives the control, as a rolled-back one.
        let bpf_rule = r.rule.to_bpf(matches!(
            r.state,
            RuleState::RolledBack | RuleState::Baseline
        ));
        rules
            .update(&key.to_ne_bytes(), bpf_rule.as_bytes(), MapFlags::ANY)
            .map_err(bpf("writing policy_rules"))?;
    }
    let json = serde_json::to_vec(doc).map_err(|e| Error::Io {
        what: "encoding the policy document".into(),
        source: std::io::Error::other(e),
    })?;
    if json.len() > abi::CCCTL_POLICY_DOC_MAX as usize {
        return Err(Error::Refused(format!(
            "the policy document is {} bytes of JSON; at most {} fit its map: fewer or shorter rules",
            json.len(),
            abi::CCCTL_POLICY_DOC_MAX
        )));
    }
    let mut value = vec![0u8; 4 + abi::CCCTL_POLICY_DOC_MAX as usize];
    value[..4].copy_from_slice(&(json.len() as u32).to_ne_bytes());
    value[4..4 + json.len()].copy_from_slice(&json);
    map(MAP_DOC)?
        .update(&next.to_ne_bytes(), &value, MapFlags::ANY)
        .map_err(bpf("writing policy_doc"))?;
    // Count first, then the flip: each update changes one field a reader uses.
    let mut h2 = h;
    h2.count[next as usize] = doc.rules.len() as u32;
    write_hdr(&h2)?;
    h2.active = next + 1;
    h2.generation = doc.generation;
    write_hdr(&h2)
}

fn policy_lock() -> Result<ccctl_sys::lock::PidLock> {
    ccctl_sys::lock::PidLock::acquire(Path::new(POLICY_LOCK), ccctl_sys::lock::Wait::Yes).map_err(
        |e| Error::Io {
            what: format!("locking {POLICY_LOCK}"),
            source: std::io::Error::other(e.to_string()),
        },
    )
}

/// What `apply` did.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub generation: u32,
    pub rules: usize,
    /// Algorithms loaded for the rules (user names).
    pub loaded: Vec<String>,
    /// Derived registrations made now: (rule, kernel name).
    pub registered: Vec<(String, String)>,
    /// Derived registrations no rule needs any more, unloaded.
    pub unloaded: Vec<String>,
    /// What `--migrate` did to the live connections (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationReport>,
}

/// What the opt-in migration of live connections did (`policy apply --migrate`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationReport {
    /// Network namespaces walked (ccctl's own, then each rule's `netns`).
    pub namespaces: Vec<String>,
    /// ESTABLISHED connections looked at, in all of them.
    pub seen: u64,
    /// Live connections moved (or put) onto what their rule gives: canary + control.
    pub moved: u64,
    /// Per rule, in the policy's order (rules that took none included).
    pub rules: Vec<RuleMigration>,
    /// Why the migration stopped, if it did (the policy is applied either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One rule's share of a migration: the `policy_mig_stats` counters' change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleMigration {
    pub rule: String,
    /// Put on the rule's algorithm (its canary side).
    pub canary: u64,
    /// Put on the rule's control.
    pub control: u64,
    /// Outside the canary and the rule has no control: left as they are.
    pub left: u64,
    /// Left on the application's own choice (known or presumed; no `enforce`).
    pub app_kept: u64,
    /// `bpf_setsockopt` refused.
    pub failed: u64,
}

impl From<abi::ccctl_policy_mig_stats> for RuleMigration {
    fn from(s: abi::ccctl_policy_mig_stats) -> Self {
        RuleMigration {
            rule: String::new(),
            canary: s.canary,
            control: s.control,
            left: s.left,
            app_kept: s.app_kept,
            failed: s.failed,
        }
    }
}

impl RuleMigration {
    /// `self - before`, counter by counter (the counters only grow).
    pub(crate) fn since(&self, before: &RuleMigration) -> RuleMigration {
        RuleMigration {
            rule: self.rule.clone(),
            canary: self.canary.saturating_sub(before.canary),
            control: self.control.saturating_sub(before.control),
            left: self.left.saturating_sub(before.left),
            app_kept: self.app_kept.saturating_sub(before.app_kept),
            failed: self.failed.saturating_sub(before.failed),
        }
    }
}

/// Install `policy`: load what its rules need, write the rules, flip them in.
/// On an error everything this call loaded is taken out again and the
/// policy in force before stays in force.
pub fn apply(policy: &Policy, why: &str) -> Result<ApplyReport> {
    apply_with(policy, why, false)
}

/// [`apply`], and with `migrate` the live connections the rules match are
/// then moved onto what the rules give them ([`MigrationReport`]; a
/// migration that fails part-way is reported there, not as an error: the
/// policy is in force by then and stays).
pub fn apply_with(policy: &Policy, why: &str, migrate: bool) -> Result<ApplyReport> {
    kernel::check_privileges()?;
    kernel::ensure_bpffs(&kernel::bpffs_root())?;
    pins::check_pin_tree()?;
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = policy_lock()?;
    let before = if installed() { current()? } else { None };
    let mut loaded_now: Vec<&'static Algorithm> = Vec::new();
    let mut derived_now: Vec<&'static Algorithm> = Vec::new();
    let result = (|| -> Result<ApplyReport> {
        let mut rules = policy.rules.clone();
        let mut report = ApplyReport {
            generation: 0,
            rules: rules.len(),
            loaded: Vec::new(),
            registered: Vec::new(),
            unloaded: Vec::new(),
            migration: None,
        };
        let mut loaded: BTreeSet<String> = before
            .as_ref()
            .map(|b| b.loaded.iter().cloned().collect())
            .unwrap_or_default();
        let mut derived: BTreeSet<String> = BTreeSet::new();
        for r in &mut rules {
            for a in std::iter::once(&mut r.algorithm).chain(r.control.as_mut()) {
                if !a.ours {
                    continue;
                }
                let base = algos::find(&a.name)?;
                match &a.params {
                    None => {
                        if !kernel::is_registered(base.kernel_name)? {
                            loader::load(base, &loader::LoadOptions::default())?;
                            loaded_now.push(base);
                            loaded.insert(base.name.to_string());
                            report.loaded.push(base.name.to_string());
                        }
                    }
                    Some(p) => {
                        let (d, new) = ensure_derived(base, p)?;
                        if new {
                            derived_now.push(d);
                            report
                                .registered
                                .push((r.name.clone(), d.kernel_name.to_string()));
                        }
                        a.kernel_name = d.kernel_name.to_string();
                        derived.insert(d.name.to_string());
                    }
                }
            }
        }
        install()?;
        let generation = read_hdr()?.generation.wrapping_add(1);
        let doc = Applied {
            order: "first match wins".into(),
            applied: Event {
                at_unix: now_unix(),
                by: who(),
                why: why.into(),
            },
            generation,
            rules: rules
                .into_iter()
                .map(|rule| AppliedRule {
                    state: if rule.share >= 1.0 {
                        RuleState::Active
                    } else if rule.judge.is_some_and(|j| j.baseline_s.is_some()) {
                        RuleState::Baseline
                    } else {
                        RuleState::Canary
                    },
                    rule,
                    rolled_back: None,
                    baseline: None,
                    canary_started: None,
                })
                .collect(),
            overlaps: policy.overlaps.clone(),
            loaded: loaded.into_iter().collect(),
            derived: derived.iter().cloned().collect(),
        };
        publish(&doc)?;
        report.generation = generation;
        // Registrations of the previous policy nobody needs now. Flows on
        // them keep running (sockets hold their ops until they close).
        for (_, _, d) in derived_pinned() {
            if !derived.contains(d.name) {
                loader::unload(d)?;
                report.unloaded.push(d.kernel_name.to_string());
            }
        }
        Ok(report)
    })();
    if result.is_err() {
        for d in derived_now.iter().chain(loaded_now.iter()) {
            let _ = loader::unload(d);
        }
    }
    let mut report = result?;
    if migrate {
        report.migration = Some(migrate_live(&policy.rules, report.generation));
    }
    Ok(report)
}

/// The namespaces a walk over live connections covers: ccctl's own, then
/// each rule's `netns` (each once, by cookie), as (path, cookie).
fn walk_namespaces(rules: &[Rule]) -> Vec<(PathBuf, Option<u64>)> {
    let own = PathBuf::from("/proc/self/ns/net");
    let own_cookie = netns_cookie(&own).ok();
    let mut out = vec![(own, own_cookie)];
    for r in rules {
        if let Some(n) = &r.netns {
            if !out.iter().any(|(_, c)| *c == Some(n.cookie)) {
                out.push((n.path.clone(), Some(n.cookie)));
            }
        }
    }
    out
}

/// The default congestion control of the namespace at `path`
/// (`net.ipv4.tcp_congestion_control` as seen from inside it).
pub fn namespace_default_cc(path: &Path) -> std::result::Result<String, String> {
    ccctl_sys::netns::run_in(path, || {
        fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("reading net.ipv4.tcp_congestion_control: {e}"))
    })
    .map_err(|e| format!("entering {}: {e}", path.display()))?
}

/// Per-rule migration counters (cumulative), by rule id.
pub fn mig_stats() -> Result<BTreeMap<u32, abi::ccctl_policy_mig_stats>> {
    per_rule(MAP_MIG_STATS)
}

/// Run the migration iterator in every namespace of [`walk_namespaces`]
/// for the rules just flipped in (`generation`); the counts are the
/// change of each rule's counters over the run.
fn migrate_live(rules: &[Rule], generation: u32) -> MigrationReport {
    let per_rule = |m: &BTreeMap<u32, abi::ccctl_policy_mig_stats>| -> Vec<RuleMigration> {
        rules
            .iter()
            .map(|r| RuleMigration {
                rule: r.name.clone(),
                ..m.get(&r.id).copied().unwrap_or_default().into()
            })
            .collect()
    };
    let before = per_rule(&mig_stats().unwrap_or_default());
    let spaces = walk_namespaces(rules);
    let mut report = MigrationReport {
        namespaces: spaces
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect(),
        ..Default::default()
    };
    let mut seen = 0u64;
    let walked = (|| -> Result<()> {
        // Loaded first, so the maps it adds are pinned before they are opened.
        let iter = IterProgram::load(Iter::Migrate)?;
        let cfg_map = map(MAP_MIG_CFG)?;
        let result = (|| -> Result<()> {
            for (path, cookie) in &spaces {
                let cookie = cookie.ok_or_else(|| {
                    Error::Refused(format!(
                        "cannot migrate in {}: its namespace cookie is unknown (SO_NETNS_COOKIE, Linux 5.14+)",
                        path.display()
                    ))
                })?;
                let dflt = namespace_default_cc(path).map_err(|e| Error::Io {
                    what: format!("the default congestion control of {}", path.display()),
                    source: std::io::Error::other(e),
                })?;
                let cfg = abi::ccctl_policy_mig_cfg {
                    generation,
                    netns_cookie: cookie,
                    dflt: super::ca_name(&dflt),
                    ..Default::default()
                };
                cfg_map
                    .update(&0u32.to_ne_bytes(), cfg.as_bytes(), MapFlags::ANY)
                    .map_err(bpf("writing policy_mig_cfg"))?;
                iter.run_in(path)?;
                let out = cfg_map
                    .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
                    .map_err(bpf("reading policy_mig_cfg"))?
                    .and_then(|v| abi::ccctl_policy_mig_cfg::from_bytes(&v))
                    .unwrap_or_default();
                seen += out.seen;
            }
            Ok(())
        })();
        // Off again whatever happened: a later walk starts from a written cfg.
        let _ = cfg_map.update(
            &0u32.to_ne_bytes(),
            abi::ccctl_policy_mig_cfg::default().as_bytes(),
            MapFlags::ANY,
        );
        result
    })();
    report.seen = seen;
    report.rules = per_rule(&mig_stats().unwrap_or_default())
        .iter()
        .zip(&before)
        .map(|(a, b)| a.since(b))
        .collect();
    report.moved = report.rules.iter().map(|r| r.canary + r.control).sum();
    if let Err(e) = walked {
        report.error = Some(e.to_string());
    }
    report
}

/// Per-rule counters, by rule id.
pub fn stats() -> Result<BTreeMap<u32, abi::ccctl_policy_stats>> {
    per_rule(MAP_STATS)
}

/// A pinned per-rule hash map (key: the rule id, u32) read whole; empty if
/// the policy (or this map, from an older ccctl) is not pinned.
fn per_rule<T: abi::Plain>(name: &str) -> Result<BTreeMap<u32, T>> {
    let mut out = BTreeMap::new();
    if !policy_dir().join(name).exists() {
        return Ok(out);
    }
    let m = map(name)?;
    for key in m.keys() {
        let Ok(id) = <[u8; 4]>::try_from(key.as_slice()).map(u32::from_ne_bytes) else {
            continue;
        };
        if let Some(v) = m
            .lookup(&key, MapFlags::ANY)
            .map_err(bpf(format!("reading {name}")))?
        {
            if let Some(s) = T::from_bytes(&v) {
                out.insert(id, s);
            }
        }
    }
    Ok(out)
}

/// What a rollback did.
#[derive(Debug, Clone, Serialize)]
pub struct RollbackReport {
    pub rule: String,
    /// Live connections moved back, per network namespace swept.
    pub moved: u64,
    pub failed: u64,
    pub namespaces: Vec<String>,
    /// What they were moved to: the control, or `previous` (each its own).
    pub to: String,
}

/// Roll `name` back: new connections it matches get its control (or are
/// left alone), then its canary's live connections are moved back by the
/// `iter/tcp` program, in this network namespace and the rule's own.
/// Flipped first, so a rollback killed midway has already stopped new
/// canary connections; running it again finishes the move.
pub fn rollback(name: &str, why: &str) -> Result<RollbackReport> {
    kernel::check_privileges()?;
    pins::check_pin_tree()?;
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = policy_lock()?;
    let mut doc = applied_or_refuse(&format!("roll back `{name}`"))?;
    let r = rule_or_refuse(&mut doc, name, &format!("roll back `{name}`"))?;
    let rule = r.rule.clone();
    if r.state != RuleState::RolledBack {
        r.state = RuleState::RolledBack;
        r.rolled_back = Some(Event {
            at_unix: now_unix(),
            by: who(),
            why: why.into(),
        });
        doc.generation = doc.generation.wrapping_add(1);
        publish(&doc)?;
    }
    let to = rule
        .control
        .as_ref()
        .map(|c| c.kernel_name.clone())
        .unwrap_or_default();
    let mut namespaces = vec![PathBuf::from("/proc/self/ns/net")];
    if let Some(n) = &rule.netns {
        namespaces = vec![n.path.clone()];
    }
    let (moved, failed) = roll_back_live(rule.id, &to, &namespaces)?;
    Ok(RollbackReport {
        rule: name.into(),
        moved,
        failed,
        namespaces: namespaces.iter().map(|p| p.display().to_string()).collect(),
        to: if to.is_empty() { "previous".into() } else { to },
    })
}

/// The policy in force, or "cannot {what}: no policy is applied".
fn applied_or_refuse(what: &str) -> Result<Applied> {
    current()?.ok_or_else(|| Error::Refused(format!("cannot {what}: no policy is applied")))
}

/// The rule of that name, or "cannot {what}: no rule of that name; the
/// policy has: ...".
fn rule_or_refuse<'a>(doc: &'a mut Applied, name: &str, what: &str) -> Result<&'a mut AppliedRule> {
    let known: Vec<String> = doc.rules.iter().map(|r| r.rule.name.clone()).collect();
    doc.rules
        .iter_mut()
        .find(|r| r.rule.name == name)
        .ok_or_else(|| {
            Error::Refused(format!(
                "cannot {what}: no rule of that name; the policy has: {}",
                known.join(", ")
            ))
        })
}

/// Ends rule `name`'s baseline: keeps `baseline` in the applied policy and
/// starts its canary (new connections split by the share from now on).
/// Refused unless the rule is measuring its baseline.
pub fn start_canary(name: &str, baseline: super::judge::Baseline, why: &str) -> Result<()> {
    kernel::check_privileges()?;
    pins::check_pin_tree()?;
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = policy_lock()?;
    let what = format!("start the canary of `{name}`");
    let mut doc = applied_or_refuse(&what)?;
    let r = rule_or_refuse(&mut doc, name, &what)?;
    if r.state != RuleState::Baseline {
        return Err(Error::Refused(format!(
            "cannot start the canary of `{name}`: it is not measuring a baseline"
        )));
    }
    r.state = RuleState::Canary;
    r.baseline = Some(baseline);
    r.canary_started = Some(Event {
        at_unix: now_unix(),
        by: who(),
        why: why.into(),
    });
    doc.generation = doc.generation.wrapping_add(1);
    publish(&doc)
}

/// One of the object's `iter/tcp` programs, loaded alone and attached.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Iter {
    Rollback,
    Migrate,
}

struct IterProgram {
    link: Link,
}

impl IterProgram {
    fn load(which: Iter) -> Result<IterProgram> {
        make_policy_dir()?;
        let mut storage = MaybeUninit::uninit();
        let mut open = open_skel(&mut storage)?;
        for p in [
            &mut open.progs.ccctl_policy_sockops,
            &mut open.progs.ccctl_policy_setsockopt,
        ] {
            p.set_autoload(false);
        }
        open.progs
            .ccctl_policy_rollback
            .set_autoload(which == Iter::Rollback);
        open.progs
            .ccctl_policy_migrate
            .set_autoload(which == Iter::Migrate);
        let skel = open.load().map_err(bpf("loading the policy BPF object"))?;
        let (prog, what) = match which {
            Iter::Rollback => (&skel.progs.ccctl_policy_rollback, "the rollback iterator"),
            Iter::Migrate => (&skel.progs.ccctl_policy_migrate, "the migration iterator"),
        };
        let link = prog.attach().map_err(bpf(format!("attaching {what}")))?;
        Ok(IterProgram { link })
    }

    /// Walk the TCP sockets of the namespace at `ns` once.
    fn run_in(&self, ns: &Path) -> Result<()> {
        let link_fd = self.link.as_fd().as_raw_fd();
        let r = ccctl_sys::netns::run_in(ns, move || -> std::io::Result<()> {
            // The iterator walks the TCP sockets of the namespace its fd
            // is made in: made here, in `ns`.
            // SAFETY: plain syscall wrapper on a valid link fd.
            let fd = unsafe { libbpf_rs::libbpf_sys::bpf_iter_create(link_fd) };
            if fd < 0 {
                return Err(std::io::Error::from_raw_os_error(-fd));
            }
            // SAFETY: `fd` was just returned to us and is owned by nobody else.
            let mut f = unsafe { fs::File::from_raw_fd(fd) };
            let mut sink = Vec::new();
            f.read_to_end(&mut sink)?;
            Ok(())
        });
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Io {
                what: format!("running the TCP socket iterator in {}", ns.display()),
                source: e,
            }),
            Err(e) => Err(Error::Io {
                what: format!("entering {}", ns.display()),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    }
}

/// Run the rollback iterator for `rule_id` in each namespace.
fn roll_back_live(rule_id: u32, to: &str, namespaces: &[PathBuf]) -> Result<(u64, u64)> {
    let iter = IterProgram::load(Iter::Rollback)?;
    let cfg_map = map(MAP_ITER_CFG)?;
    let cfg = abi::ccctl_policy_iter_cfg {
        rule_id,
        to: super::ca_name(to),
        ..Default::default()
    };
    cfg_map
        .update(&0u32.to_ne_bytes(), cfg.as_bytes(), MapFlags::ANY)
        .map_err(bpf("writing policy_iter_cfg"))?;
    let mut result = Ok(());
    for ns in namespaces {
        if let Err(e) = iter.run_in(ns) {
            result = Err(e);
        }
    }
    let out = cfg_map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf("reading policy_iter_cfg"))?
        .and_then(|v| abi::ccctl_policy_iter_cfg::from_bytes(&v))
        .unwrap_or_default();
    let _ = cfg_map.update(
        &0u32.to_ne_bytes(),
        abi::ccctl_policy_iter_cfg::default().as_bytes(),
        MapFlags::ANY,
    );
    drop(iter);
    result.map(|()| (out.moved, out.failed))
}

/// What `clear` took out.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClearReport {
    pub had_policy: bool,
    pub unloaded: Vec<String>,
}

/// Take everything out: detach the programs, unpin the maps, unload the
/// derived registrations and the algorithms the policy loaded. Connections
/// keep the algorithm they have (sockets hold their ops until they close).
pub fn clear() -> Result<ClearReport> {
    kernel::check_privileges()?;
    pins::check_pin_tree()?;
    let _signals = ccctl_sys::signals::Deferred::new();
    let _lock = policy_lock()?;
    let doc = current().ok().flatten();
    let dir = policy_dir();
    let mut report = ClearReport {
        had_policy: dir.exists(),
        ..Default::default()
    };
    // Programs first: no new connection is matched from here on.
    for pin in [LINK_SOCKOPS, LINK_SETSOCKOPT] {
        let p = dir.join(pin);
        if p.exists() {
            if let Ok(l) = Link::open(&p) {
                let _ = l.detach();
            }
            fs::remove_file(&p).map_err(io(format!("removing {}", p.display())))?;
        }
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(io(format!("removing {}", dir.display())))?;
    }
    for (_, _, d) in derived_pinned() {
        loader::unload(d)?;
        report.unloaded.push(d.name.to_string());
    }
    if let Some(doc) = doc {
        for name in &doc.loaded {
            if let Ok(a) = algos::find(name) {
                if pins::pin_dir(a).exists() {
                    loader::unload(a)?;
                    report.unloaded.push(a.name.to_string());
                }
            }
        }
    }
    let _ = fs::remove_dir(pins::pin_root());
    Ok(report)
}

/// After a ccctl killed midway: derived registrations no applied policy
/// names (an apply killed before its flip) are unloaded, and derived pins
/// without a registration removed. Returns what was fixed.
pub fn repair() -> Vec<String> {
    let mut fixed = Vec::new();
    let pinned = derived_pinned();
    if pinned.is_empty() {
        return fixed;
    }
    let Ok(_lock) = policy_lock() else {
        return fixed;
    };
    let wanted: BTreeSet<String> = current()
        .ok()
        .flatten()
        .map(|d| d.derived.into_iter().collect())
        .unwrap_or_default();
    for (_, _, d) in pinned {
        if !wanted.contains(d.name) {
            match loader::unload(d) {
                Ok(_) => fixed.push(format!(
                    "unloaded {} (`{}`): a registration for a parameter set no applied policy uses (a policy apply killed midway)",
                    d.name, d.kernel_name
                )),
                Err(e) => tracing::debug!("repairing {}: {e}", d.name),
            }
        }
    }
    fixed
}
