//! Request bodies: JSON parsing, the RunAgentInput envelope, forwardedProps and message content
//! never panic, whatever the bytes.
#![no_main]
use iac_agui::agui::{content, digest, input};
use iac_agui::agui::dialect::Dialect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(body) = iac_agui::app::parse_json(data) else { return };
    let _ = iac_agui::i18n::payload_language(&body, iac_agui::i18n::Lang::En);
    let _ = digest::digest(&body);
    if let Ok(inp) = input::parse_envelope(&body) {
        let _ = input::parse_iac_props(&inp.forwarded_props);
        let _ = content::user_message(&inp.messages);
    }
    // AG-UI 1.0 mode's rules: skipping, not refusing, what it does not know.
    if let Ok(inp) = input::parse_envelope_as(&body, &Dialect::V1_0) {
        let mut skipped = inp.skipped.clone();
        let _ = content::user_message_as(&inp.messages, &Dialect::V1_0, &mut skipped);
    }
});
