//! Request bodies: JSON parsing, the RunAgentInput envelope, forwardedProps and message content
//! never panic, whatever the bytes.
#![no_main]
use iac_agui::agui::{content, digest, input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(body) = iac_agui::app::parse_json(data) else { return };
    let _ = iac_agui::i18n::payload_language(&body, iac_agui::i18n::Lang::En);
    let _ = digest::digest(&body);
    if let Ok(inp) = input::parse_envelope(&body) {
        let _ = input::parse_iac_props(&inp.forwarded_props);
        let _ = content::user_message(&inp.messages);
    }
});
