//! Chunked bodies fed in arbitrary pieces decode the same as when fed whole, never exceed the
//! limit and never panic.
#![no_main]
use iac_agui::server::http::ChunkedDecoder;
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 4096;

fn decode(data: &[u8], piece: usize) -> (Result<(), ()>, Vec<u8>, usize) {
    let mut d = ChunkedDecoder::default();
    let mut out = Vec::new();
    let mut used = 0;
    for p in data.chunks(piece.max(1)) {
        match d.decode(p, &mut out, LIMIT) {
            Ok(n) => {
                used += n;
                if d.is_done() {
                    return (Ok(()), out, used);
                }
            }
            Err(_) => return (Err(()), out, used),
        }
    }
    (Ok(()), out, used)
}

fuzz_target!(|data: &[u8]| {
    let piece = data.first().copied().unwrap_or(1) as usize % 17 + 1;
    let whole = decode(data, data.len().max(1));
    let split = decode(data, piece);
    assert!(whole.1.len() <= LIMIT);
    assert_eq!(whole.0.is_ok(), split.0.is_ok());
    if whole.0.is_ok() {
        assert_eq!(whole.1, split.1);
        assert_eq!(whole.2, split.2);
    }
});
