//! Canonical JSON is stable: canonicalising its own output changes nothing.
#![no_main]
use iac_agui::json::canonical;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let once = canonical(&v);
    if let Ok(again) = serde_json::from_slice::<serde_json::Value>(&once) {
        assert_eq!(canonical(&again), once);
    }
});
