//! libbpf skeletons of `bpf/*.bpf.c`, compiled by build.rs and embedded here.
#![allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unused_imports
)]

pub mod bbr {
    include!(concat!(env!("OUT_DIR"), "/bbr.skel.rs"));
}

pub mod modest_bbr {
    include!(concat!(env!("OUT_DIR"), "/modest_bbr.skel.rs"));
}

pub mod dstar {
    include!(concat!(env!("OUT_DIR"), "/dstar.skel.rs"));
}

pub mod policy {
    include!(concat!(env!("OUT_DIR"), "/policy.skel.rs"));
}

pub mod patched_bbr {
    include!(concat!(env!("OUT_DIR"), "/patched_bbr.skel.rs"));
}
