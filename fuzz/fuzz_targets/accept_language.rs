//! Accept-Language values: never panic, always a supported language.
#![no_main]
use iac_agui::i18n::{Lang, header_language};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let l = header_language(Some(s), Lang::En);
        assert!(Lang::ALL.contains(&l));
    }
});
