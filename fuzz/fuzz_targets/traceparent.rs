//! A `traceparent` that parses writes back as itself (version 00), and what `tracestate`
//! passes on can never split a header.
#![no_main]
use iac_agui::trace::context::{format, parse, tracestate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(t) = parse(s) {
        assert!(t.trace_id != [0; 16] && t.parent_id != [0; 8]);
        let again = format(&t.trace_id, &t.parent_id, t.flags);
        assert_eq!(
            parse(&again).map(|p| (p.trace_id, p.parent_id, p.flags)),
            Some((t.trace_id, t.parent_id, t.flags))
        );
        if t.version == 0 {
            assert_eq!(again, s.trim_matches([' ', '\t']));
        }
    }
    if let Some(v) = tracestate(s) {
        assert!(v.bytes().all(|b| (0x20..0x7f).contains(&b)));
    }
});
