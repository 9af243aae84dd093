//! The upstream SSE parser: the same events whether the bytes arrive whole or in pieces, the
//! size bound always holds, no panic.
#![no_main]
use std::collections::VecDeque;

use iac_agui::a2a::sse::SseParser;
use libfuzzer_sys::fuzz_target;

fn parse(data: &[u8], piece: usize) -> Option<Vec<(Option<String>, Vec<u8>)>> {
    let mut p = SseParser::new(4096);
    let mut out = VecDeque::new();
    for chunk in data.chunks(piece.max(1)) {
        p.push(chunk, &mut out).ok()?;
    }
    Some(out.into_iter().map(|e| (e.event, e.data)).collect())
}

fuzz_target!(|data: &[u8]| {
    let piece = data.first().copied().unwrap_or(1) as usize % 13 + 1;
    let whole = parse(data, data.len());
    let split = parse(data, piece);
    if let (Some(w), Some(s)) = (&whole, &split) {
        assert_eq!(w, s);
        assert!(w.iter().all(|(_, d)| d.len() <= 4096));
    }
});
