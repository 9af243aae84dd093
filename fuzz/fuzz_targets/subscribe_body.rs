//! The subscribe route's body and `Last-Event-ID` reader never panics, and what it accepts
//! has the documented shape.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (body, header) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[i + 1..], std::str::from_utf8(&data[..i]).ok()),
        None => (data, None),
    };
    if let Ok((thread, run, ros, after)) = iac_agui::app::parse_subscribe_body(body, header) {
        assert!(!thread.is_empty() && !run.is_empty() && !ros.is_empty());
        assert!(after.is_none_or(|a| a >= -1));
    }
});
