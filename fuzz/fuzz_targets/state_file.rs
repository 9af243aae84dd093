//! Thread state files: the strict loader never panics, and what it accepts survives a
//! save → load round trip unchanged.
#![no_main]
use iac_agui::store::document::ThreadDoc;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = ThreadDoc::from_bytes(data, "t") {
        let again = ThreadDoc::from_bytes(&doc.to_bytes(), "t").expect("a saved document loads");
        assert_eq!(again, doc);
    }
});
