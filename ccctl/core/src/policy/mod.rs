//! Rollout policy: rules that give new TCP connections a congestion control
//! by what they are (local/remote prefix, port, cgroup, network namespace),
//! a canary share of them, and a way back.
//!
//! This module is the file format and its validation ([`PolicyFile`] ->
//! [`Policy`]); [`kernel`] installs a validated policy into BPF
//! (`bpf/policy.bpf.c`), reads it back, rolls rules back and clears it.
//!
//! ```toml
//! [[rule]]
//! name = "web-canary"
//! match = { remote_port = 443, remote = "198.18.0.0/15" }  # also local, local_port, cgroup, netns
//! algorithm = "modest-bbr"      # user names as in `ccctl list`, or a kernel one (cubic)
//! params = { w_min = 0.75 }     # optional: this rule's own parameter set
//! share = 0.25                  # optional canary share of matching new connections
//! control = "cubic"             # what the rest get (default: unchanged)
//! enforce = false               # true: also override an application's own TCP_CONGESTION
//! ```
//!
//! Rules are tried in file order and the first that matches a connection
//! takes it; overlapping rules are reported ([`Overlap`]), not refused.
//! Every refusal names the field (`rule[1].match.remote: ...`) and is
//! returned before anything is changed.
pub mod audit;
pub mod judge;
pub mod kernel;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{abi, params, registry as algos};

/// Most rules a policy can hold (the BPF map's half).
pub const MAX_RULES: usize = abi::CCCTL_POLICY_MAX_RULES as usize;

/// A policy file (or the `[[rule]]` tables of the daemon's config), as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleSpec>,
}

/// One `[[rule]]`, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    #[serde(default, rename = "match")]
    pub matches: MatchSpec,
    pub algorithm: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    #[serde(default)]
    pub enforce: bool,
    /// `[rule.judge]`: the daemon's canary judge for this rule ([`judge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<judge::JudgeSpec>,
}

/// `match = { ... }`: every field given must match; none given matches all.
/// Ports are taken as integers and checked here, so a bad one is named.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_port: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_port: Option<i64>,
    /// A cgroup v2 directory: absolute under the cgroup2 mount, or relative to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// A network namespace file: `/run/netns/NAME` or `/proc/PID/ns/net`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
}

/// A refusal: the field (`rule[0].share`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PolicyError {
    pub field: String,
    pub message: String,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        message: message.into(),
    }
}

/// An address prefix, IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// `198.18.0.0/15`, `fd00:ccc::/48`, or one address (`198.18.0.2`).
    /// Host bits below the length are refused (a typo more often than not).
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let t = s.trim();
        let (a, l) = match t.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (t, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("`{s}`: `{a}` is not an IPv4 or IPv6 address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(format!(
                        "`{s}`: prefix length `{l}`: an {} prefix length is 0 to {max}",
                        if addr.is_ipv4() { "IPv4" } else { "IPv6" }
                    ))
                }
            },
        };
        let p = Prefix { addr, len };
        if p.network() != p.mapped() {
            return Err(format!(
                "`{s}`: host bits are set below /{len}; did you mean {}?",
                p.canonical()
            ));
        }
        Ok(p)
    }

    /// Length in the 128-bit IPv4-mapped space the BPF side compares in.
    fn mapped_len(&self) -> u32 {
        match self.addr {
            IpAddr::V4(_) => abi::CCCTL_ADDR_V4MAPPED_PREFIX + self.len as u32,
            IpAddr::V6(_) => self.len as u32,
        }
    }

    fn mapped(&self) -> u128 {
        u128::from_be_bytes(mapped_bytes(self.addr))
    }

    fn mask(&self) -> u128 {
        match self.mapped_len() {
            0 => 0,
            n => u128::MAX << (128 - n),
        }
    }

    fn network(&self) -> u128 {
        self.mapped() & self.mask()
    }

    fn canonical(&self) -> String {
        let bytes = self.network().to_be_bytes();
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(bytes[12], bytes[13], bytes[14], bytes[15])),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bytes)),
        };
        format!("{addr}/{}", self.len)
    }

    /// Whether `addr` (IPv4, IPv6 or IPv4-mapped IPv6) is in the prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        u128::from_be_bytes(mapped_bytes(addr)) & self.mask() == self.network()
    }

    /// Whether the two prefixes share an address.
    fn intersects(&self, other: &Prefix) -> bool {
        let m = self.mask() & other.mask();
        self.network() & m == other.network() & m
    }

    /// Whether every address of `other` is in `self`.
    fn covers(&self, other: &Prefix) -> bool {
        self.mapped_len() <= other.mapped_len() && other.network() & self.mask() == self.network()
    }

    /// (net, mask) as the BPF side's four native-order words of network-order bytes.
    fn words(&self) -> ([u32; 4], [u32; 4]) {
        (
            words(self.network().to_be_bytes()),
            words(self.mask().to_be_bytes()),
        )
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// 16 bytes, network order, IPv4 written IPv4-mapped (as the BPF side sees it).
pub fn mapped_bytes(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

fn words(b: [u8; 16]) -> [u32; 4] {
    let w = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    [w(0), w(4), w(8), w(12)]
}

/// The canary hash of a connection, as `bpf/policy.bpf.c` computes it:
/// FNV-1a over the local and remote address words and the ports, then
/// murmur3's finaliser. Stable for the life of the connection.
pub fn canary_hash(local: IpAddr, local_port: u16, remote: IpAddr, remote_port: u16) -> u32 {
    let mut h: u32 = 2_166_136_261;
    let mut mix = |w: u32| h = (h ^ w).wrapping_mul(16_777_619);
    for w in words(mapped_bytes(local))
        .into_iter()
        .chain(words(mapped_bytes(remote)))
    {
        mix(w);
    }
    mix(((local_port as u32) << 16) | remote_port as u32);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// Whether a connection with this hash falls into a canary of `share_bp`.
pub fn in_canary(hash: u32, share_bp: u32) -> bool {
    hash % abi::CCCTL_POLICY_SHARE_ONE < share_bp
}

/// FNV-1a 32 of a rule's name: its id in BPF, stable across applies.
pub fn rule_id(name: &str) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for b in name.bytes() {
        h = (h ^ b as u32).wrapping_mul(16_777_619);
    }
    h.max(1)
}

/// What validation needs from the machine, so tests can stand in for it.
pub trait Env {
    /// The cgroup v2 directory for `path` (absolute under the mount, or
    /// relative to it): (canonical path, id = inode number, level below the root).
    fn cgroup(&self, path: &Path) -> Result<CgroupRef, String>;
    /// The namespace cookie (`SO_NETNS_COOKIE`) of the namespace file `path`.
    fn netns_cookie(&self, path: &Path) -> Result<u64, String>;
    /// Congestion controls the kernel has registered now (not ours).
    fn kernel_congestion_controls(&self) -> Vec<String>;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupRef {
    pub path: PathBuf,
    pub id: u64,
    pub level: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetnsRef {
    pub path: PathBuf,
    pub cookie: u64,
}

/// An algorithm a rule names: one of ours (with the rule's parameter set,
/// if it has one) or one the kernel has.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlgoRef {
    /// User name (`modest-bbr`) or, for a kernel one, its kernel name.
    pub name: String,
    /// Kernel name of the registration connections get. For a rule with
    /// its own parameter set this is filled in at apply time (a derived
    /// registration, `modest_bbr_p1`); until then the base one.
    pub kernel_name: String,
    /// Ours (a BPF object of this binary).
    pub ours: bool,
    /// The rule's own parameter set, validated (`params` given).
    #[serde(skip)]
    pub params: Option<abi::ccctl_params>,
    /// The values as written, for show.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub param_values: BTreeMap<String, f64>,
}

impl PartialEq for AlgoRef {
    /// Equal names and values as written (the encoded set follows from them).
    fn eq(&self, o: &Self) -> bool {
        (&self.name, &self.kernel_name, self.ours, &self.param_values)
            == (&o.name, &o.kernel_name, o.ours, &o.param_values)
    }
}

/// One validated rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub name: String,
    pub id: u32,
    pub local: Option<Prefix>,
    pub remote: Option<Prefix>,
    pub local_port: Option<u16>,
    pub remote_port: Option<u16>,
    pub cgroup: Option<CgroupRef>,
    pub netns: Option<NetnsRef>,
    pub algorithm: AlgoRef,
    /// Canary share, in (0, 1]; 1 = every matching connection.
    pub share: f64,
    pub control: Option<AlgoRef>,
    pub enforce: bool,
    /// The canary judge's thresholds (the daemon acts on them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<judge::Thresholds>,
}

/// Two rules that can both match a connection: the earlier one takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlap {
    pub earlier: String,
    pub later: String,
    /// The later rule can never take a connection (the earlier covers it).
    pub shadowed: bool,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shadowed {
            write!(
                f,
                "rule `{}` is shadowed by `{}`: every connection it names matches `{}` first (first match wins), so it never applies",
                self.later, self.earlier, self.earlier
            )
        } else {
            write!(
                f,
                "rules `{}` and `{}` overlap: a connection matching both takes `{}` (first match wins)",
                self.earlier, self.later, self.earlier
            )
        }
    }
}

/// A validated policy: rules in order (first match wins) and the overlaps found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub overlaps: Vec<Overlap>,
}

impl PolicyFile {
    pub fn from_toml(text: &str) -> Result<PolicyFile, PolicyError> {
        toml_de(text)
    }
}

fn toml_de(text: &str) -> Result<PolicyFile, PolicyError> {
    // The toml crate's message names the key and the line.
    toml::from_str(text).map_err(|e| refuse("policy file", e.to_string().trim_end().to_string()))
}

fn check_name(field: &str, name: &str) -> Result<(), PolicyError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(refuse(
            field,
            format!("`{name}` is not a rule name (1-48 of a-z, A-Z, 0-9, '-', '_', '.')"),
        ))
    }
}

fn port(field: String, v: Option<i64>) -> Result<Option<u16>, PolicyError> {
    match v {
        None => Ok(None),
        Some(p) if (1..=65535).contains(&p) => Ok(Some(p as u16)),
        Some(p) => Err(refuse(field, format!("{p} is not a port (1 to 65535)"))),
    }
}

fn algo_ref(
    field: &str,
    name: &str,
    values: &BTreeMap<String, f64>,
    env: &dyn Env,
) -> Result<AlgoRef, PolicyError> {
    if let Ok(a) = algos::find(name) {
        let params = if values.is_empty() {
            None
        } else {
            Some(
                params::initial(a, values)
                    .map_err(|e| refuse(format!("{field}.params"), e.to_string()))?,
            )
        };
        return Ok(AlgoRef {
            name: a.name.into(),
            kernel_name: a.kernel_name.into(),
            ours: true,
            params,
            param_values: values.clone(),
        });
    }
    let kernel = env.kernel_congestion_controls();
    if kernel.iter().any(|k| k == name) {
        if !values.is_empty() {
            return Err(refuse(
                format!("{field}.params"),
                format!("`{name}` is the kernel's own congestion control; only ccctl's algorithms take parameters"),
            ));
        }
        return Ok(AlgoRef {
            name: name.into(),
            kernel_name: name.into(),
            ours: false,
            params: None,
            param_values: BTreeMap::new(),
        });
    }
    // `bbr` is the kernel's BBR: when this kernel lacks it, say which of
    // ours the name is easily mistaken for.
    if let Err(e @ crate::error::Error::KernelAlgorithm { .. }) = algos::find(name) {
        return Err(refuse(
            field,
            format!("{e}; this kernel has: {}", kernel.join(", ")),
        ));
    }
    Err(refuse(
        field,
        format!(
            "unknown algorithm `{name}`; ccctl's: {}; the kernel has: {}",
            algos::ALGORITHMS
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", "),
            kernel.join(", ")
        ),
    ))
}

impl PolicyFile {
    /// Validate every rule; the first problem is returned with its field.
    pub fn validate(&self, env: &dyn Env) -> Result<Policy, PolicyError> {
        if self.rules.len() > MAX_RULES {
            return Err(refuse(
                "rule",
                format!("{} rules; at most {MAX_RULES}", self.rules.len()),
            ));
        }
        let mut rules: Vec<Rule> = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let f = |k: &str| format!("rule[{i}].{k}");
            check_name(&f("name"), &r.name)?;
            if let Some(other) = rules.iter().position(|o| o.name == r.name) {
                return Err(refuse(
                    f("name"),
                    format!(
                        "`{}` is also rule[{other}]'s name; names must be unique",
                        r.name
                    ),
                ));
            }
            let id = rule_id(&r.name);
            if let Some(o) = rules.iter().find(|o| o.id == id) {
                return Err(refuse(
                    f("name"),
                    format!("`{}` hashes like `{}`; rename one", r.name, o.name),
                ));
            }
            let m = &r.matches;
            let prefix = |k: &str, v: &Option<String>| {
                v.as_deref()
                    .map(|s| Prefix::parse(s).map_err(|e| refuse(f(&format!("match.{k}")), e)))
                    .transpose()
            };
            let local = prefix("local", &m.local)?;
            let remote = prefix("remote", &m.remote)?;
            let local_port = port(f("match.local_port"), m.local_port)?;
            let remote_port = port(f("match.remote_port"), m.remote_port)?;
            let cgroup = m
                .cgroup
                .as_deref()
                .map(|p| env.cgroup(p).map_err(|e| refuse(f("match.cgroup"), e)))
                .transpose()?;
            if let Some(c) = &cgroup {
                if c.level >= abi::CCCTL_POLICY_CGROUP_LEVELS {
                    return Err(refuse(
                        f("match.cgroup"),
                        format!(
                            "{} is {} levels deep; at most {} below the root",
                            c.path.display(),
                            c.level,
                            abi::CCCTL_POLICY_CGROUP_LEVELS - 1
                        ),
                    ));
                }
            }
            let netns = m
                .netns
                .as_deref()
                .map(|p| {
                    env.netns_cookie(p)
                        .map(|cookie| NetnsRef {
                            path: p.to_path_buf(),
                            cookie,
                        })
                        .map_err(|e| refuse(f("match.netns"), e))
                })
                .transpose()?;
            let algorithm =
                algo_ref(&f("algorithm"), &r.algorithm, &r.params, env).map_err(|e| {
                    // params errors are named rule[i].params, not rule[i].algorithm.params
                    if e.field.ends_with(".algorithm.params") {
                        refuse(f("params"), e.message)
                    } else {
                        e
                    }
                })?;
            let share = match r.share {
                None => 1.0,
                Some(s) if s.is_finite() && s > 0.0 && s <= 1.0 => s,
                Some(s) => {
                    return Err(refuse(
                        f("share"),
                        format!("{s} is outside (0, 1]: the share of matching new connections the canary takes"),
                    ))
                }
            };
            if share_bp(share) == 0 {
                return Err(refuse(
                    f("share"),
                    format!(
                        "{share} is below the smallest share, 1/{}",
                        abi::CCCTL_POLICY_SHARE_ONE
                    ),
                ));
            }
            let control = r
                .control
                .as_deref()
                .map(|c| algo_ref(&f("control"), c, &BTreeMap::new(), env))
                .transpose()?;
            let judge = match &r.judge {
                None => None,
                Some(j) => {
                    if share >= 1.0 || control.is_none() {
                        return Err(refuse(
                            f("judge"),
                            "a judge compares a canary with its control: the rule needs a share below 1 and a control",
                        ));
                    }
                    Some(
                        j.validate(&f("judge"))
                            .map_err(|(field, message)| refuse(field, message))?,
                    )
                }
            };
            rules.push(Rule {
                name: r.name.clone(),
                id,
                local,
                remote,
                local_port,
                remote_port,
                cgroup,
                netns,
                algorithm,
                share,
                control,
                enforce: r.enforce,
                judge,
            });
        }
        let overlaps = overlaps(&rules);
        Ok(Policy { rules, overlaps })
    }
}

/// Share in the BPF side's units (1/10000).
pub fn share_bp(share: f64) -> u32 {
    (share * abi::CCCTL_POLICY_SHARE_ONE as f64).round() as u32
}

/// Per dimension: could both match one connection, and does `a` cover `b`.
fn dim<T>(
    a: &Option<T>,
    b: &Option<T>,
    meet: impl Fn(&T, &T) -> bool,
    cover: impl Fn(&T, &T) -> bool,
) -> (bool, bool) {
    match (a, b) {
        (None, _) => (true, true),
        (Some(_), None) => (true, false),
        (Some(x), Some(y)) => (meet(x, y), cover(x, y)),
    }
}

fn under(a: &Path, b: &Path) -> bool {
    b.starts_with(a)
}

/// Every pair of rules that can both match one connection.
pub fn overlaps(rules: &[Rule]) -> Vec<Overlap> {
    let mut out = Vec::new();
    for (j, b) in rules.iter().enumerate() {
        for a in &rules[..j] {
            let dims = [
                dim(&a.local, &b.local, Prefix::intersects, Prefix::covers),
                dim(&a.remote, &b.remote, Prefix::intersects, Prefix::covers),
                dim(&a.local_port, &b.local_port, |x, y| x == y, |x, y| x == y),
                dim(&a.remote_port, &b.remote_port, |x, y| x == y, |x, y| x == y),
                dim(
                    &a.cgroup,
                    &b.cgroup,
                    |x, y| under(&x.path, &y.path) || under(&y.path, &x.path),
                    |x, y| under(&x.path, &y.path),
                ),
                dim(
                    &a.netns,
                    &b.netns,
                    |x, y| x.cookie == y.cookie,
                    |x, y| x.cookie == y.cookie,
                ),
            ];
            if dims.iter().all(|(meet, _)| *meet) {
                out.push(Overlap {
                    earlier: a.name.clone(),
                    later: b.name.clone(),
                    shadowed: dims.iter().all(|(_, cover)| *cover),
                });
            }
        }
    }
    out
}

/// A connection as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    pub local: IpAddr,
    pub local_port: u16,
    pub remote: IpAddr,
    pub remote_port: u16,
    /// Its cgroup v2 id, if known (inet_diag reports it).
    pub cgroup_id: Option<u64>,
    pub netns_cookie: Option<u64>,
}

/// Which cgroups lie at or below each cgroup a rule names, by id (the
/// directory's inode number, what inet_diag reports as a socket's cgroup
/// and what the BPF side compares): the one answer to "is this
/// connection's cgroup the rule's or below it" for everything that reads
/// connections from userspace (`ccctl policy apply --dry-run`, the daemon's
/// judge), so they take the connections `bpf/policy.bpf.c` gives the rule.
///
/// Read when built: a cgroup created later is not in it (the judge builds
/// one per sample). A rule's cgroup whose directory is gone, or now holds
/// another cgroup (another id, as after `rmdir` and `mkdir`), has an empty
/// subtree: the BPF side matches by id, and that id has no sockets left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupSubtrees(BTreeMap<u64, BTreeSet<u64>>);

impl CgroupSubtrees {
    /// The subtree of every cgroup the rules name, walked now.
    pub fn of(rules: &[Rule]) -> CgroupSubtrees {
        let mut out = BTreeMap::new();
        for g in rules.iter().filter_map(|r| r.cgroup.as_ref()) {
            out.entry(g.id)
                .or_insert_with(|| subtree_ids(&g.path, g.id));
        }
        CgroupSubtrees(out)
    }

    /// Whether cgroup `id` is `g` or below it (`in_cgroup` of
    /// [`Policy::decide`] and [`Rule::matches`]).
    pub fn contains(&self, g: &CgroupRef, id: u64) -> bool {
        id == g.id || self.0.get(&g.id).is_some_and(|s| s.contains(&id))
    }
}

/// The ids (inode numbers) of `root` and every directory below it; empty
/// when `root` is missing or is not the cgroup `id` any more.
fn subtree_ids(root: &Path, id: u64) -> BTreeSet<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut ids = BTreeSet::new();
    if !std::fs::metadata(root).is_ok_and(|m| m.is_dir() && m.ino() == id) {
        return ids;
    }
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        if let Ok(md) = std::fs::symlink_metadata(&d) {
            ids.insert(md.ino());
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                // Not through symlinks: cgroupfs has none, a test tree may.
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(e.path());
                }
            }
        }
    }
    ids
}

/// Where a connection goes under a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub rule: String,
    pub canary: bool,
    /// Kernel name it gets; `None`: left as it is (no control set).
    pub gets: Option<String>,
}

impl Policy {
    /// The first rule that takes `c` (as the BPF side decides);
    /// `in_cgroup(rule's cgroup, connection's cgroup id)` answers whether
    /// the connection's cgroup is the rule's or below it.
    pub fn decide(
        &self,
        c: &Conn,
        in_cgroup: &dyn Fn(&CgroupRef, u64) -> bool,
    ) -> Option<Decision> {
        let r = self.rules.iter().find(|r| r.matches(c, in_cgroup))?;
        let canary = in_canary(
            canary_hash(c.local, c.local_port, c.remote, c.remote_port),
            share_bp(r.share),
        );
        Some(Decision {
            rule: r.name.clone(),
            canary,
            gets: if canary {
                Some(r.algorithm.kernel_name.clone())
            } else {
                r.control.as_ref().map(|c| c.kernel_name.clone())
            },
        })
    }
}

/// What `policy apply --migrate` does to a live connection a rule takes,
/// as the dry run predicts it (`bpf/policy.bpf.c`, `ccctl_policy_migrate`,
/// decides the same way from what it can see).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Migration {
    /// Moved onto what the rule gives it.
    Moves,
    /// Already runs what the rule gives it (set again, no change).
    Stays,
    /// Outside the canary and the rule has no control: left as it is.
    Left,
    /// Left alone: it runs something other than its namespace's default
    /// that the policy did not set, presumed the application's own choice,
    /// and the rule does not enforce.
    AppKept,
    /// Not ESTABLISHED (closing): not migrated.
    NotEstablished,
}

/// The migration's verdict for a connection: it runs `cc` (`None`:
/// unknown), its rule gives it `gets` (`None`: left as it is); `default`
/// is its namespace's default; `ours` says the policy in force set `cc`
/// (the BPF side knows this from socket storage; the dry run presumes it
/// when the applied policy gives the connection what it runs).
pub fn migration(
    established: bool,
    cc: Option<&str>,
    gets: Option<&str>,
    default: &str,
    ours: bool,
    enforce: bool,
) -> Migration {
    if !established {
        return Migration::NotEstablished;
    }
    let chosen = !ours && cc.is_some_and(|c| c != default);
    if chosen && !enforce {
        return Migration::AppKept;
    }
    match gets {
        None => Migration::Left,
        Some(g) if Some(g) == cc => Migration::Stays,
        Some(_) => Migration::Moves,
    }
}

impl Rule {
    /// Whether `c` matches every field given (`in_cgroup` as for [`Policy::decide`]).
    pub fn matches(&self, c: &Conn, in_cgroup: &dyn Fn(&CgroupRef, u64) -> bool) -> bool {
        self.local.is_none_or(|p| p.contains(c.local))
            && self.remote.is_none_or(|p| p.contains(c.remote))
            && self.local_port.is_none_or(|p| p == c.local_port)
            && self.remote_port.is_none_or(|p| p == c.remote_port)
            && self
                .netns
                .as_ref()
                .is_none_or(|n| c.netns_cookie == Some(n.cookie))
            && self.cgroup.as_ref().is_none_or(|g| match c.cgroup_id {
                Some(id) => id == g.id || in_cgroup(g, id),
                None => false,
            })
    }

    /// The rule in the BPF map's layout.
    pub fn to_bpf(&self, rolled_back: bool) -> abi::ccctl_policy_rule {
        let mut r = abi::ccctl_policy_rule {
            rule_id: self.id,
            share_bp: share_bp(self.share),
            ..Default::default()
        };
        if let Some(p) = &self.local {
            r.match_ |= abi::CCCTL_PM_LOCAL;
            (r.local_net, r.local_mask) = p.words();
        }
        if let Some(p) = &self.remote {
            r.match_ |= abi::CCCTL_PM_REMOTE;
            (r.remote_net, r.remote_mask) = p.words();
        }
        if let Some(p) = self.local_port {
            r.match_ |= abi::CCCTL_PM_LOCAL_PORT;
            r.local_port = p;
        }
        if let Some(p) = self.remote_port {
            r.match_ |= abi::CCCTL_PM_REMOTE_PORT;
            r.remote_port = p;
        }
        if let Some(c) = &self.cgroup {
            r.match_ |= abi::CCCTL_PM_CGROUP;
            r.cgroup_id = c.id;
            r.cgroup_level = c.level;
        }
        if let Some(n) = &self.netns {
            r.match_ |= abi::CCCTL_PM_NETNS;
            r.netns_cookie = n.cookie;
        }
        if self.enforce {
            r.flags |= abi::CCCTL_POLICY_F_ENFORCE;
        }
        if rolled_back {
            r.flags |= abi::CCCTL_POLICY_F_ROLLED_BACK;
        }
        r.algo = ca_name(&self.algorithm.kernel_name);
        if let Some(c) = &self.control {
            r.control = ca_name(&c.kernel_name);
        }
        r
    }

    /// `remote_port 443, remote 198.18.0.0/15`: the match, for show.
    pub fn describe_match(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.local {
            parts.push(format!("local {p}"));
        }
        if let Some(p) = self.local_port {
            parts.push(format!("local_port {p}"));
        }
        if let Some(p) = &self.remote {
            parts.push(format!("remote {p}"));
        }
        if let Some(p) = self.remote_port {
            parts.push(format!("remote_port {p}"));
        }
        if let Some(c) = &self.cgroup {
            parts.push(format!("cgroup {}", c.path.display()));
        }
        if let Some(n) = &self.netns {
            parts.push(format!("netns {}", n.path.display()));
        }
        if parts.is_empty() {
            "every connection".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A kernel name as a C string field (NUL-terminated, truncated to 15).
pub fn ca_name(name: &str) -> [libc::c_char; abi::CCCTL_CA_NAME_MAX as usize] {
    let mut out = [0 as libc::c_char; abi::CCCTL_CA_NAME_MAX as usize];
    for (d, s) in out
        .iter_mut()
        .zip(name.bytes().take(abi::CCCTL_CA_NAME_MAX as usize - 1))
    {
        *d = s as libc::c_char;
    }
    out
}

#[cfg(test)]
mod tests;
