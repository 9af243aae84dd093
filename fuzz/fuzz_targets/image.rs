//! Inline images: any bytes are refused or normalised without a panic, and what is sent is
//! a decodable image of the announced type within the size and side limits.
#![no_main]
use iac_agui::agui::image::{MAX_FORWARD_BYTES, MAX_IMAGE_SIDE, normalize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(n) = normalize(data) else { return };
    assert!(n.width <= MAX_IMAGE_SIDE && n.height <= MAX_IMAGE_SIDE || n.bytes.is_none());
    if let Some(b) = &n.bytes {
        assert!(b.len() <= MAX_FORWARD_BYTES);
        assert!(normalize(b).is_ok(), "re-encoded output must decode");
    } else {
        assert!(data.len() <= MAX_FORWARD_BYTES);
    }
});
