//! The congestion controls built into this binary.
use crate::{
    error::{Error, Result},
    loader::{self, Attached, LoadPlan},
};

/// One algorithm: its names and how to register its embedded BPF object.
pub struct Algorithm {
    /// Name on the command line (`ccctl load modest-bbr`).
    pub name: &'static str,
    /// Name the kernel registers it under (`iperf3 -C modest_bbr`).
    pub kernel_name: &'static str,
    pub summary: &'static str,
    pub(crate) register: fn(&LoadPlan<'_>) -> Result<Attached>,
}

/// Open a skeleton, fill in its load-time configuration, and hand it to the
/// generic registration path. One line per algorithm below.
macro_rules! skeleton_register {
    ($skel:ident :: $builder:ident) => {{
        fn register(plan: &LoadPlan<'_>) -> Result<Attached> {
            use libbpf_rs::skel::SkelBuilder as _;
            let mut storage = std::mem::MaybeUninit::uninit();
            let mut builder = crate::bpf::$skel::$builder::default();
            builder
                .obj_builder
                .btf_custom_path(&plan.kernel.btf_path)
                .map_err(crate::error::bpf("setting the kernel BTF path"))?
                // Trace maps are pinned by name here and shared by every algorithm.
                .pin_root_path(crate::loader::shared_dir())
                .map_err(crate::error::bpf("setting the shared pin path"))?;
            let mut open = builder
                .open(&mut storage)
                .map_err(crate::error::bpf(format!(
                    "opening the embedded BPF object of {}",
                    plan.algo.name
                )))?;
            let rodata = open
                .maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| Error::Bpf {
                    what: "the BPF object has no .rodata".into(),
                    source: libbpf_rs::Error::from_raw_os_error(libc::ENOENT),
                })?;
            rodata.ccctl_cfg.kernel_features = plan.kernel.features();
            rodata.ccctl_cfg.fault_inject = plan.fault_inject;
            loader::register_skeleton(open, plan)
        }
        register
    }};
}

pub static ALGORITHMS: &[Algorithm] = &[Algorithm {
    name: "bbr",
    kernel_name: "bpf_bbr",
    summary: "BBR v1 in BPF, our baseline (startup, drain, probe_bw, probe_rtt)",
    register: skeleton_register!(bbr::BbrSkelBuilder),
}, Algorithm {
    name: "modest-bbr",
    kernel_name: "modest_bbr",
    summary: "Modest BBR: BBR v1 plus a retransmission-driven window search in probe_bw (W_min, W_max, S_min)",
    register: skeleton_register!(modest_bbr::ModestBbrSkelBuilder),
}, Algorithm {
    name: "dstar",
    kernel_name: "dstar",
    summary: "TCP D*: window first, no pacing; DRAIN/GAIN 1/GAIN 2 cycle sets cwnd = BDP + gain_cwnd from the BDP estimate's deviation",
    register: skeleton_register!(dstar::DstarSkelBuilder),
}, Algorithm {
    name: "patched-bbr",
    kernel_name: "patched_bbr",
    summary: "patched BBR: BBR v1 corrected in probe_bw for a descheduled sender's on-percentage Θ (bandwidth D/Θ, probe pacing /Θ, cwnd + alpha)",
    register: skeleton_register!(patched_bbr::PatchedBbrSkelBuilder),
}];

/// Find an algorithm by its user or kernel name.
pub fn find(name: &str) -> Result<&'static Algorithm> {
    ALGORITHMS
        .iter()
        .find(|a| a.name == name || a.kernel_name == name)
        .ok_or_else(|| Error::UnknownAlgorithm {
            name: name.to_string(),
            known: ALGORITHMS
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}
