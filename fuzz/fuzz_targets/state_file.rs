//! Thread state files: the strict loader never panics, and what it accepts survives a
//! save → load round trip: the saved bytes load again, unchanged from then on (number
//! spellings may be normalised once, as Python does).
#![no_main]
use iac_agui::store::document::ThreadDoc;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = ThreadDoc::from_bytes(data, "t") {
        let saved = doc.to_bytes();
        let again = ThreadDoc::from_bytes(&saved, "t").expect("a saved document loads");
        assert_eq!(again.to_bytes(), saved);
        let third = ThreadDoc::from_bytes(&again.to_bytes(), "t").expect("it loads again");
        assert_eq!(third, again);
    }
});
