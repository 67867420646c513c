//! `link_bpf OUT IN`: links the BPF object IN (clang's output) into OUT
//! with libbpf's BPF linker, the step libbpf-cargo takes after clang when
//! ccctl's build compiles bpf/ (it drops DWARF, so the skeleton does not
//! depend on the build's paths). `cargo xtask mutants` compiles with
//! clang alone (xtask builds before `setup` installs libbpf's build
//! dependencies) and links here, so that an unmutated object is the one
//! ccctl embeds, byte for byte.

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, input] = args.as_slice() else {
        bail!("usage: link_bpf OUT IN");
    };
    let mut linker = libbpf_rs::Linker::new(out)
        .with_context(|| format!("starting libbpf's linker for {out}"))?;
    linker
        .add_file(input)
        .with_context(|| format!("adding {input} to the link"))?;
    linker.link().with_context(|| format!("linking {out}"))?;
    Ok(())
}
