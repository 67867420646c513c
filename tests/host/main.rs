//! Integration tests on the host kernel (6.18: struct_ops links, the
//! 4-argument cong_control). Run serially: they share the kernel's
//! congestion-control list. `cargo xtask test` runs them.
#[path = "../common/mod.rs"]
mod common;

use common::lifecycle;

#[test]
fn load_registers_and_unload_removes() {
    lifecycle::load_registers_and_unload_removes(true);
}

#[test]
fn load_twice_is_ok() {
    lifecycle::load_twice_is_ok();
}

#[test]
fn default_is_set_and_restored() {
    lifecycle::default_is_set_and_restored();
}

#[test]
fn errors_are_clear_and_change_nothing() {
    lifecycle::errors_are_clear_and_change_nothing();
}
