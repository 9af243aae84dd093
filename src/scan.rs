//! Byte scans eight bytes a step (SWAR): the SSE reader's line ends and the JSON writer's
//! plain runs. Most of a frame is one long line of ids and text with nothing to escape, so a
//! byte-at-a-time loop was a visible share of the per-event cost (docs/performance.md).

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each zero byte of `x`. A borrow only runs upwards, so the lowest flagged
/// byte is always a real zero (a higher one may be a false positive, and is never used).
const fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGH
}

/// The high bit of each byte of `x` equal to `b` (lowest exact, as above).
const fn bytes_eq(x: u64, b: u8) -> u64 {
    zero_bytes(x ^ (ONES * b as u64))
}

/// The high bit of each byte of `x` below 0x20 (lowest exact, as above).
const fn control_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES * 0x20) & !x & HIGH
}

/// The index of the first byte that `word` flags (eight bytes a step) or `byte` accepts (the
/// tail); `b.len()` when there is none. `word` and `byte` must agree.
#[inline]
fn first(b: &[u8], word: impl Fn(u64) -> u64, byte: impl Fn(u8) -> bool) -> usize {
    let mut i = 0;
    while let Some(Ok(step)) = b.get(i..i + 8).map(<[u8; 8]>::try_from) {
        let hit = word(u64::from_le_bytes(step));
        if hit != 0 {
            return i + (hit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    let rest = b.get(i..).unwrap_or_default();
    i + rest.iter().position(|&c| byte(c)).unwrap_or(rest.len())
}

/// The first CR or LF.
pub(crate) fn eol(b: &[u8]) -> Option<usize> {
    let at = first(
        b,
        |x| bytes_eq(x, b'\n') | bytes_eq(x, b'\r'),
        |c| c == b'\n' || c == b'\r',
    );
    (at < b.len()).then_some(at)
}

/// How many leading bytes of `b` a JSON string holds as they are: none is `"`, `\` or a
/// control byte (what a reader must look at and a writer must escape).
pub(crate) fn json_plain_prefix(b: &[u8]) -> usize {
    first(
        b,
        |x| bytes_eq(x, b'"') | bytes_eq(x, b'\\') | control_bytes(x),
        |c| c == b'"' || c == b'\\' || c < 0x20,
    )
}

/// Whether the JSON text `b` nests no deeper than `limit` arrays and objects (brackets inside
/// strings do not count). A linear scan, far cheaper than the recursive read it decides on.
pub(crate) fn json_depth_at_most(b: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                // Skip the string: plain runs eight bytes a step, escapes two bytes.
                i += 1;
                loop {
                    i += json_plain_prefix(b.get(i..).unwrap_or_default());
                    match b.get(i) {
                        Some(b'\\') => i += 2,
                        Some(b'"') | None => break,
                        // A control byte: invalid JSON, the read will say so.
                        Some(_) => i += 1,
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every position and length around the eight-byte steps, against the plain loop.
    #[test]
    fn scans_agree_with_a_byte_loop() {
        let specials = [
            b'\n', b'\r', b'"', b'\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xff, b'a',
        ];
        for len in 0..40 {
            for at in 0..len {
                for &s in &specials {
                    for fill in [b'a', 0x8a, 0xff, 0x21] {
                        let mut v = vec![fill; len];
                        v[at] = s;
                        let want_eol = v.iter().position(|&c| c == b'\n' || c == b'\r');
                        assert_eq!(eol(&v), want_eol, "{v:?}");
                        let want_plain = v
                            .iter()
                            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                            .unwrap_or(len);
                        assert_eq!(json_plain_prefix(&v), want_plain, "{v:?}");
                    }
                }
            }
        }
    }

    /// The eight-at-a-time scan stops where a byte-at-a-time one does: each byte value it
    /// must stop at (or pass) at every position of a step and of the tail, after plain
    /// ASCII, UTF-8 or bytes just above each stop value.
    #[test]
    fn the_word_scan_stops_where_the_byte_scan_does() {
        let naive = |b: &[u8]| {
            b.iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .unwrap_or(b.len())
        };
        let fills: [&[u8]; 4] = [b"a", "\u{e9}".as_bytes(), b"#", b"]"];
        for fill in fills {
            for len in 0..20 {
                let mut base: Vec<u8> = fill.iter().copied().cycle().take(len).collect();
                assert_eq!(
                    json_plain_prefix(&base),
                    naive(&base),
                    "no stop in {base:?}"
                );
                for at in 0..len {
                    for stop in (0u8..=0x20).chain([b'"', b'\\', 0x7f, 0x80, 0xff]) {
                        let keep = base[at];
                        base[at] = stop;
                        assert_eq!(json_plain_prefix(&base), naive(&base), "{base:?}");
                        base[at] = keep;
                    }
                }
            }
        }
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        for (text, depth) in [
            (r#"{}"#, 1),
            (r#"{"a":[1,{"b":2}]}"#, 3),
            (r#"{"a":"[[[[{{{{"}"#, 1),
            (r#"{"a":"\"[[[[\\"}"#, 1),
            (r#"{"a":"\\","b":[[]]}"#, 3),
            (r#"[[[[[[[[]]]]]]]]"#, 8),
            ("", 0),
        ] {
            assert!(json_depth_at_most(text.as_bytes(), depth), "{text}");
            if depth > 0 {
                assert!(!json_depth_at_most(text.as_bytes(), depth - 1), "{text}");
            }
        }
    }
}
