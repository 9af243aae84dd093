//! The flat YAML config reader never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = iac_agui::yaml::parse_flat(s);
    }
});
