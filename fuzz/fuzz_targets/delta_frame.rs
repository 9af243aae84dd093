//! The typed text-delta read: whenever it accepts a frame, the `Value` read accepts it too and
//! answers every question the adapter asks the same way; no panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = iac_agui::a2a::types::delta_agrees(data) {
        panic!("{e}");
    }
});
