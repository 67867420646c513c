use std::net::IpAddr;

use super::*;

/// A machine with two cgroups (/web at level 1 and /web/api at level 2), one
/// named network namespace and the kernel's cubic and reno.
struct FakeEnv;

impl Env for FakeEnv {
    fn cgroup(&self, path: &Path) -> Result<CgroupRef, String> {
        let p = path.to_string_lossy();
        let (id, level) = match p.trim_start_matches("/sys/fs/cgroup").trim_end_matches('/') {
            "/web" | "web" => (100, 1),
            "/web/api" | "web/api" => (101, 2),
            _ => return Err(format!("{p}: No such file or directory")),
        };
        Ok(CgroupRef {
            path: PathBuf::from(format!(
                "/sys/fs/cgroup/{}",
                p.trim_start_matches("/sys/fs/cgroup/")
                    .trim_start_matches('/')
            )),
            id,
            level,
        })
    }
    fn netns_cookie(&self, path: &Path) -> Result<u64, String> {
        match path.to_str() {
            Some("/run/netns/a") => Ok(4097),
            Some("/run/netns/b") => Ok(4098),
            _ => Err(format!("{} is not a network namespace", path.display())),
        }
    }
    fn kernel_congestion_controls(&self) -> Vec<String> {
        vec!["cubic".into(), "reno".into()]
    }
}

fn policy(text: &str) -> Result<Policy, PolicyError> {
    PolicyFile::from_toml(text)?.validate(&FakeEnv)
}

const ISSUE_EXAMPLE: &str = r#"
[[rule]]
name = "web-canary"
match = { remote_port = 443, remote = "198.18.0.0/15" }
algorithm = "modest-bbr"
params = { w_min = 0.75 }
share = 0.25
control = "cubic"
"#;

#[test]
fn the_issue_example_is_valid_and_keeps_its_keys() {
    let p = policy(ISSUE_EXAMPLE).expect("valid");
    let r = &p.rules[0];
    assert_eq!(r.name, "web-canary");
    assert_eq!(r.remote_port, Some(443));
    assert_eq!(
        r.remote.map(|p| p.to_string()).as_deref(),
        Some("198.18.0.0/15")
    );
    assert_eq!(r.algorithm.kernel_name, "modest_bbr");
    assert!(r.algorithm.params.is_some(), "its own parameter set");
    assert_eq!(r.share, 0.25);
    assert_eq!(
        r.control.as_ref().map(|c| c.kernel_name.as_str()),
        Some("cubic")
    );
    assert!(!r.enforce);
    let b = r.to_bpf(false);
    assert_eq!(b.share_bp, 2500);
    assert_eq!(
        b.match_,
        abi::CCCTL_PM_REMOTE | abi::CCCTL_PM_REMOTE_PORT,
        "only the fields given are matched"
    );
    assert_eq!(b.remote_port, 443);
}

#[test]
fn bad_input_names_the_field() {
    let rule = |body: &str| format!("[[rule]]\nname = \"r\"\nalgorithm = \"bpf-bbr\"\n{body}");
    let cases: Vec<(String, &str)> = vec![
        (rule("match = { remote = \"198.18.0.0/33\" }"), "rule[0].match.remote: `198.18.0.0/33`: prefix length `33`"),
        (rule("match = { local = \"198.18.0.1/15\" }"), "rule[0].match.local: `198.18.0.1/15`: host bits are set below /15; did you mean 198.18.0.0/15?"),
        (rule("match = { remote = \"fd00:ccc::/129\" }"), "rule[0].match.remote: `fd00:ccc::/129`: prefix length `129`"),
        (rule("match = { remote = \"fd00::zz\" }"), "rule[0].match.remote: `fd00::zz`: `fd00::zz` is not an IPv4 or IPv6 address"),
        (rule("match = { remote_port = 0 }"), "rule[0].match.remote_port: 0 is not a port (1 to 65535)"),
        (rule("match = { local_port = 70000 }"), "rule[0].match.local_port: 70000 is not a port"),
        (rule("match = { cgroup = \"/nosuch\" }"), "rule[0].match.cgroup: /nosuch: No such file"),
        (rule("match = { netns = \"/run/netns/zz\" }"), "rule[0].match.netns: /run/netns/zz is not a network namespace"),
        (rule("match = { port = 1 }"), "unknown field `port`"),
        (rule("share = 0.0"), "rule[0].share: 0 is outside (0, 1]"),
        (rule("share = 1.5"), "rule[0].share: 1.5 is outside (0, 1]"),
        (rule("share = -0.1"), "rule[0].share: -0.1 is outside (0, 1]"),
        (rule("share = nan"), "rule[0].share: NaN is outside (0, 1]"),
        (rule("share = 0.00001"), "rule[0].share: 0.00001 is below the smallest share"),
        (rule("control = \"vegas\""), "rule[0].control: unknown algorithm `vegas`"),
        (rule("params = { w_min = 0.5 }"), "rule[0].params: bpf-bbr: parameter `w_min (--wmin)`: not a parameter of bpf-bbr"),
        (rule("params = { cwnd_gain = 9.0 }"), "rule[0].params: bpf-bbr: parameter `cwnd_gain (--cwnd-gain)`"),
        (rule("bogus = 1"), "unknown field `bogus`"),
        ("[[rule]]\nname = \"r\"\nalgorithm = \"nosuch\"".into(), "rule[0].algorithm: unknown algorithm `nosuch`"),
        ("[[rule]]\nname = \"r\"\nalgorithm = \"cubic\"\nparams = { cwnd_gain = 2.0 }".into(), "rule[0].params: `cubic` is the kernel's own"),
        ("[[rule]]\nname = \"a b\"\nalgorithm = \"bpf-bbr\"".into(), "rule[0].name: `a b` is not a rule name"),
        ("[[rule]]\nname = \"x\"\nalgorithm = \"bpf-bbr\"\n[[rule]]\nname = \"x\"\nalgorithm = \"cubic\"".into(), "rule[1].name: `x` is also rule[0]'s name"),
        ("[[rule]]\nalgorithm = \"bpf-bbr\"".into(), "missing field `name`"),
        // `bbr` is the kernel's; this test kernel lacks it: the hint names ours.
        ("[[rule]]\nname = \"r\"\nalgorithm = \"bbr\"".into(), "rule[0].algorithm: `bbr` is the kernel's own congestion control, not one ccctl loads; did you mean `bpf-bbr`"),
    ];
    for (text, needle) in cases {
        let e = policy(&text).expect_err(&text).to_string();
        assert!(e.contains(needle), "{text}\n=> {e}\n(wanted {needle})");
    }
}

#[test]
fn modest_bbr_params_are_checked_as_a_set() {
    let text = "[[rule]]\nname = \"m\"\nalgorithm = \"modest-bbr\"\nparams = { w_max = 0.7 }";
    let e = policy(text)
        .expect_err("w_min 0.75 >= w_max 0.7")
        .to_string();
    assert!(
        e.starts_with("rule[0].params:") && e.contains("must be below w_max"),
        "{e}"
    );
}

#[test]
fn too_many_rules_are_refused() {
    let text: String = (0..=MAX_RULES)
        .map(|i| format!("[[rule]]\nname = \"r{i}\"\nalgorithm = \"cubic\"\n"))
        .collect();
    let e = policy(&text).expect_err("65 rules").to_string();
    assert!(e.contains(&format!("at most {MAX_RULES}")), "{e}");
}

#[test]
fn overlapping_rules_are_reported_and_the_first_wins() {
    let text = r#"
[[rule]]
name = "wide"
match = { remote = "198.18.0.0/15" }
algorithm = "cubic"
[[rule]]
name = "narrow"
match = { remote = "198.18.3.0/24", remote_port = 443 }
algorithm = "reno"
[[rule]]
name = "v6"
match = { remote = "fd00:ccc::/48" }
algorithm = "reno"
[[rule]]
name = "port"
match = { remote_port = 443 }
algorithm = "bpf-bbr"
"#;
    let p = policy(text).expect("overlaps are not refused");
    let pairs: Vec<(&str, &str, bool)> = p
        .overlaps
        .iter()
        .map(|o| (o.earlier.as_str(), o.later.as_str(), o.shadowed))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("wide", "narrow", true),
            ("wide", "port", false),
            ("narrow", "port", false),
            ("v6", "port", false),
        ],
        "v6 and the IPv4 rules never meet"
    );
    assert!(p.overlaps[0].to_string().contains("first match wins"));
    // A connection to 198.18.3.9:443 is the first rule's.
    let c = Conn {
        local: "198.18.0.1".parse().expect("addr"),
        local_port: 40000,
        remote: "198.18.3.9".parse().expect("addr"),
        remote_port: 443,
        cgroup_id: None,
        netns_cookie: None,
    };
    let d = p.decide(&c, &|_, _| false).expect("matched");
    assert_eq!(d.rule, "wide");
    assert_eq!(d.gets.as_deref(), Some("cubic"));
    // To fd00:ccc::9 port 443: v6 before port.
    let c6 = Conn {
        remote: "fd00:ccc::9".parse().expect("addr"),
        local: "fd00:ccc::1".parse().expect("addr"),
        ..c
    };
    assert_eq!(
        p.decide(&c6, &|_, _| false).map(|d| d.rule).as_deref(),
        Some("v6")
    );
    // Port 80 to a v6 address outside the prefix: nothing.
    let other = Conn {
        remote: "fd00:cce::9".parse().expect("addr"),
        remote_port: 80,
        ..c6
    };
    assert!(p.decide(&other, &|_, _| false).is_none());
}

#[test]
fn cgroup_and_netns_rules_match_only_their_own() {
    let text = r#"
[[rule]]
name = "api"
match = { cgroup = "/web/api" }
algorithm = "reno"
[[rule]]
name = "web"
match = { cgroup = "web" }
algorithm = "cubic"
[[rule]]
name = "ns-b"
match = { netns = "/run/netns/b" }
algorithm = "bpf-bbr"
"#;
    let p = policy(text).expect("valid");
    assert_eq!(
        p.rules[0].cgroup.as_ref().map(|c| (c.id, c.level)),
        Some((101, 2))
    );
    assert_eq!(
        p.rules[1].cgroup.as_ref().map(|c| (c.id, c.level)),
        Some((100, 1))
    );
    // api is below web: they overlap (api is first, so not shadowed); both
    // name no namespace, so both meet ns-b.
    let pairs: Vec<(&str, &str, bool)> = p
        .overlaps
        .iter()
        .map(|o| (o.earlier.as_str(), o.later.as_str(), o.shadowed))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("api", "web", false),
            ("api", "ns-b", false),
            ("web", "ns-b", false)
        ]
    );
    let base = Conn {
        local: "198.18.0.1".parse().expect("addr"),
        local_port: 1,
        remote: "198.18.0.2".parse().expect("addr"),
        remote_port: 2,
        cgroup_id: Some(101),
        netns_cookie: Some(4097),
    };
    // 102 is a child of /web (the closure knows the tree).
    let tree = |g: &CgroupRef, id: u64| g.id == 100 && (id == 101 || id == 102);
    assert_eq!(
        p.decide(&base, &tree).map(|d| d.rule).as_deref(),
        Some("api")
    );
    let child = Conn {
        cgroup_id: Some(102),
        ..base
    };
    assert_eq!(
        p.decide(&child, &tree).map(|d| d.rule).as_deref(),
        Some("web")
    );
    let elsewhere = Conn {
        cgroup_id: Some(7),
        ..base
    };
    assert!(p.decide(&elsewhere, &tree).is_none(), "netns a is not b");
    let in_b = Conn {
        netns_cookie: Some(4098),
        ..elsewhere
    };
    assert_eq!(
        p.decide(&in_b, &tree).map(|d| d.rule).as_deref(),
        Some("ns-b")
    );
    let b = p.rules[2].to_bpf(false);
    assert_eq!((b.match_, b.netns_cookie), (abi::CCCTL_PM_NETNS, 4098));
}

#[test]
fn prefixes_are_ipv4_mapped_like_the_bpf_side() {
    let p = Prefix::parse("198.18.0.0/15").expect("valid");
    assert!(p.contains("198.19.255.255".parse::<IpAddr>().expect("addr")));
    assert!(!p.contains("198.20.0.0".parse::<IpAddr>().expect("addr")));
    // A dual-stack socket's IPv4-mapped peer matches the IPv4 prefix.
    assert!(p.contains("::ffff:198.18.1.1".parse::<IpAddr>().expect("addr")));
    let (net, mask) = p.words();
    // ::ffff:198.18.0.0 / 96+15, as network-order bytes read natively.
    assert_eq!(net[2], u32::from_ne_bytes([0, 0, 0xff, 0xff]));
    assert_eq!(net[3], u32::from_ne_bytes([198, 18, 0, 0]));
    assert_eq!(mask[3], u32::from_ne_bytes([255, 254, 0, 0]));
    assert_eq!(mask[0], u32::MAX);
    let any = Prefix::parse("0.0.0.0/0").expect("valid");
    assert!(any.contains("198.51.100.1".parse::<IpAddr>().expect("addr")));
    assert!(
        !any.contains("fd00:ccc::1".parse::<IpAddr>().expect("addr")),
        "v4 /0 is all IPv4 only"
    );
    let host = Prefix::parse("fd00:ccc::2").expect("valid");
    assert_eq!(host.len, 128);
}

#[test]
fn the_canary_hash_splits_connections_near_the_share() {
    // 4000 connections from one client to one server port: the share the
    // hash gives is within 2 points of the rule's.
    for share in [0.05, 0.25, 0.5, 0.9] {
        let bp = share_bp(share);
        let n = 4000u32;
        let hits = (0..n)
            .filter(|i| {
                in_canary(
                    canary_hash(
                        "198.18.0.1".parse().expect("addr"),
                        32768 + *i as u16,
                        "198.19.0.1".parse().expect("addr"),
                        443,
                    ),
                    bp,
                )
            })
            .count() as f64;
        let got = hits / n as f64;
        assert!((got - share).abs() < 0.02, "share {share}: {got}");
    }
    // Stable: the same 4-tuple always falls on the same side.
    let h = |p| {
        canary_hash(
            "198.18.0.1".parse().expect("a"),
            p,
            "198.19.0.1".parse().expect("a"),
            443,
        )
    };
    assert_eq!(h(40000), h(40000));
    assert_ne!(h(40000), h(40001));
}

#[test]
fn rule_ids_are_stable_and_nonzero() {
    assert_eq!(rule_id("web-canary"), rule_id("web-canary"));
    assert_ne!(rule_id("a"), rule_id("b"));
    assert_ne!(rule_id(""), 0);
}

#[test]
fn an_empty_policy_is_valid() {
    let p = policy("").expect("no rules");
    assert!(p.rules.is_empty() && p.overlaps.is_empty());
}

#[test]
fn the_fleet_example_is_valid() {
    let p = policy(include_str!("../../../../examples/fleet/policy.toml")).expect("valid");
    let names: Vec<&str> = p.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["web-canary", "rsync-dstar"]);
    assert!(p.rules[1].enforce);
    assert!(
        p.overlaps.is_empty(),
        "IPv4 and IPv6 rules never meet: {:?}",
        p.overlaps
    );
}

/// `CgroupSubtrees` walks the directory a cgroup rule names, by inode
/// number (what a cgroup id is): a child and a grandchild are below it, a
/// sibling is not, and a directory replaced under the same path (another
/// inode: another cgroup) has no subtree.
#[test]
fn cgroup_subtrees_hold_the_rules_cgroup_and_its_descendants() {
    use std::os::unix::fs::MetadataExt;
    let base = crate::sys::scratch_dir("subtrees").expect("scratch dir");
    let (parent, child, grandchild, sibling) = (
        base.join("web"),
        base.join("web/api"),
        base.join("web/api/v2"),
        base.join("db"),
    );
    for d in [&grandchild, &sibling] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let ino = |p: &Path| std::fs::metadata(p).expect("stat").ino();
    let rule = |path: &Path, id: u64| Rule {
        cgroup: Some(CgroupRef {
            path: path.to_path_buf(),
            id,
            level: 1,
        }),
        ..policy("[[rule]]\nname = \"r\"\nalgorithm = \"reno\"\n")
            .expect("valid")
            .rules
            .remove(0)
    };
    let r = rule(&parent, ino(&parent));
    let trees = CgroupSubtrees::of(std::slice::from_ref(&r));
    let g = r.cgroup.as_ref().expect("cgroup");
    for d in [&parent, &child, &grandchild] {
        assert!(
            trees.contains(g, ino(d)),
            "{} is below the rule's",
            d.display()
        );
    }
    assert!(!trees.contains(g, ino(&sibling)), "a sibling is not");
    let conn = |id: u64| Conn {
        local: "198.18.0.1".parse().expect("addr"),
        local_port: 1,
        remote: "198.18.0.2".parse().expect("addr"),
        remote_port: 2,
        cgroup_id: Some(id),
        netns_cookie: None,
    };
    let via = |g: &CgroupRef, id: u64| trees.contains(g, id);
    assert!(r.matches(&conn(ino(&grandchild)), &via));
    assert!(!r.matches(&conn(ino(&sibling)), &via));
    // The rule's id no longer at its path: nothing below it.
    let stale = rule(&parent, ino(&sibling));
    let trees = CgroupSubtrees::of(std::slice::from_ref(&stale));
    let g = stale.cgroup.as_ref().expect("cgroup");
    assert!(!trees.contains(g, ino(&child)));
    assert!(
        trees.contains(g, ino(&sibling)),
        "its own id still is its own"
    );
}

#[test]
fn migration_moves_what_the_rule_gives_and_keeps_the_applications_choice() {
    use Migration::*;
    // On the namespace default (cubic): moved to what the rule gives.
    assert_eq!(
        migration(true, Some("cubic"), Some("bpf_bbr"), "cubic", false, false),
        Moves
    );
    // Already on it: set again, no change.
    assert_eq!(
        migration(true, Some("reno"), Some("reno"), "cubic", true, false),
        Stays
    );
    // Outside the canary, no control: left as it is.
    assert_eq!(
        migration(true, Some("cubic"), None, "cubic", false, false),
        Left
    );
    // Not the default and not the policy's: presumed the application's own,
    // kept unless the rule enforces.
    assert_eq!(
        migration(true, Some("reno"), Some("dstar"), "cubic", false, false),
        AppKept
    );
    assert_eq!(
        migration(true, Some("reno"), Some("dstar"), "cubic", false, true),
        Moves
    );
    // Set by the policy in force: not the application's, moved.
    assert_eq!(
        migration(
            true,
            Some("modest_bbr_p1"),
            Some("reno"),
            "cubic",
            true,
            false
        ),
        Moves
    );
    // Closing connections are not migrated.
    assert_eq!(
        migration(false, Some("cubic"), Some("reno"), "cubic", false, true),
        NotEstablished
    );
    // Unknown algorithm (no INET_DIAG_CONG): treated as the default's.
    assert_eq!(
        migration(true, None, Some("reno"), "cubic", false, false),
        Moves
    );
}

#[test]
fn a_migration_report_counts_the_change_of_the_counters() {
    let before = kernel::RuleMigration {
        rule: "web".into(),
        canary: 3,
        control: 5,
        left: 1,
        app_kept: 0,
        failed: 0,
    };
    let after = kernel::RuleMigration {
        canary: 10,
        control: 12,
        app_kept: 2,
        ..before.clone()
    };
    let d = after.since(&before);
    assert_eq!(
        (d.canary, d.control, d.left, d.app_kept, d.failed),
        (7, 7, 0, 2, 0)
    );
    let r = kernel::MigrationReport {
        namespaces: vec!["/proc/self/ns/net".into()],
        seen: 20,
        moved: 14,
        rules: vec![d],
        error: None,
    };
    let v = serde_json::to_value(&r).expect("json");
    assert_eq!(v["rules"][0]["rule"], "web");
    assert_eq!(v["rules"][0]["canary"], 7);
    assert!(v.get("error").is_none(), "no error field when none: {v}");
}
