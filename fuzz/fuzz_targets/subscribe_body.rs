//! The subscribe and cancel routes' body readers (and `Last-Event-ID`) never panic, and what
//! they accept has the documented shape.
#![no_main]
use iac_agui::app::{CancelRequest, SubscribeRequest};
use iac_agui::i18n::Lang;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (body, header) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[i + 1..], std::str::from_utf8(&data[..i]).ok()),
        None => (data, None),
    };
    if let Ok(r) = SubscribeRequest::parse("e".into(), body, header, Lang::En) {
        assert!(!r.thread_id.is_empty() && !r.run_id.is_empty() && !r.ros_invocation_id.is_empty());
        assert!(r.after_sequence.is_none_or(|a| a >= -1));
    }
    if let Ok(r) = CancelRequest::parse("e".into(), body, Lang::En) {
        assert!(!r.thread_id.is_empty() && !r.ros_invocation_id.is_empty());
    }
});
