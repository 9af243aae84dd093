//! The typed text-delta read: whenever it accepts a frame, the `Value` read accepts it too and
//! answers every question the adapter asks the same way; no panic. An input with a NUL byte
//! (never in a JSON frame) is two parts, `prev` and `next`: `next` read against the template
//! `prev` leaves is read as it is on its own, and so is `prev` with its text's bytes replaced
//! by `next` (any bytes there: the frames the template's shortcut must judge). Without a
//! `prev` that makes a template, a captured kernel frame stands in for it, so every input
//! tests the shortcut.
#![no_main]
use iac_agui::a2a::frame::{delta_agrees, template_agrees, template_splice};
use libfuzzer_sys::fuzz_target;

/// A text delta as the kernel sends it (tests/fixtures/a2a).
const CAPTURED: &[u8] = br#"{"result":{"statusUpdate":{"taskId":"43c9c8be-c5e8-4424-aefd-05274abe6147","contextId":"agui-c0a9fb9985cf2342c581ba8ef09a5b5da48a2d6f","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"43c9c8be-c5e8-4424-aefd-05274abe6147-message","contextId":"agui-c0a9fb9985cf2342c581ba8ef09a5b5da48a2d6f","taskId":"43c9c8be-c5e8-4424-aefd-05274abe6147","role":"ROLE_AGENT","parts":[{"text":"tick 0. "}]}},"metadata":{"iac_code":{"iacCodeSessionId":"e0eadb3d-1741-4f16-bf92-ccc94702fd9b"}}}},"id":"211eef9d-3423-41c5-8d51-c5a20c80602c","jsonrpc":"2.0"}"#;

fuzz_target!(|data: &[u8]| {
    let (prev, next) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    if let Err(e) = delta_agrees(next) {
        panic!("{e}");
    }
    if !prev.is_empty() {
        if let Err(e) = template_agrees(prev, next) {
            panic!("{e}");
        }
    }
    let (template, spliced) = match template_splice(prev, next) {
        Some(s) => (prev, s),
        None => (CAPTURED, template_splice(CAPTURED, next).expect("a template")),
    };
    if let Err(e) = template_agrees(template, &spliced) {
        panic!("{e}");
    }
});
