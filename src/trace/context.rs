//! W3C Trace Context (Level 1) headers, parsed and written: pure, no I/O, fuzzed
//! (`fuzz/fuzz_targets/traceparent.rs`). A header that does not parse is ignored and the
//! request starts a trace of its own, as the specification asks (§3.2.2.1, §4.3): a broken
//! upstream tracer never fails a request.

/// What a valid `traceparent` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub version: u8,
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub flags: u8,
}

/// The `sampled` bit of `trace-flags`.
pub const SAMPLED: u8 = 0x01;

/// The longest `tracestate` passed on: the specification's 32 members of at most 256
/// characters could reach 8 KiB, and it lets a vendor cut the list; 512 is what it asks
/// every vendor to keep, and more would only be a client's bytes riding to the kernel.
pub const TRACESTATE_MAX: usize = 512;

/// `value` as a `traceparent` (surrounding spaces and tabs allowed, as in any HTTP field):
/// version `00` exactly `00-<32 hex>-<16 hex>-<2 hex>`; a later version the same prefix,
/// then nothing or `-` and anything (§4.3: parse what version 00 defines). Lowercase hex
/// only, version `ff` invalid, an all-zero trace id or parent id invalid.
pub fn parse(value: &str) -> Option<TraceParent> {
    let v = value.trim_matches([' ', '\t']).as_bytes();
    if v.len() < 55 {
        return None;
    }
    let version = hex_u8(&v[0..2])?;
    if version == 0xff || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    if version == 0 && v.len() != 55 {
        return None;
    }
    if v.len() > 55 && v[55] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    hex_into(&v[3..35], &mut trace_id)?;
    let mut parent_id = [0u8; 8];
    hex_into(&v[36..52], &mut parent_id)?;
    let flags = hex_u8(&v[53..55])?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(TraceParent {
        version,
        trace_id,
        parent_id,
        flags,
    })
}

/// `tracestate` worth passing on: printable ASCII (its grammar's characters and the list's
/// commas and spaces), within [`TRACESTATE_MAX`], not blank. Anything else is dropped whole:
/// a list cut at a byte count could end inside a member, and a forwarded control character
/// could split the kernel call's head.
pub fn tracestate(value: &str) -> Option<String> {
    let v = value.trim_matches([' ', '\t']);
    let printable = v.bytes().all(|b| (0x20..0x7f).contains(&b));
    (printable && !v.is_empty() && v.len() <= TRACESTATE_MAX).then(|| v.to_string())
}

/// The `traceparent` this server sends: always version 00 (the one it speaks).
pub fn format(trace_id: &[u8; 16], span_id: &[u8; 8], flags: u8) -> String {
    format!(
        "00-{}-{}-{flags:02x}",
        crate::ids::hex(trace_id),
        crate::ids::hex(span_id)
    )
}

fn lower_hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

fn hex_u8(pair: &[u8]) -> Option<u8> {
    Some(lower_hex(pair[0])? << 4 | lower_hex(pair[1])?)
}

fn hex_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *o = hex_u8(pair)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_specification_example_parses_and_writes_back_the_same() {
        let t = parse(GOOD).unwrap();
        assert_eq!(t.version, 0);
        assert_eq!(
            crate::ids::hex(&t.trace_id),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(crate::ids::hex(&t.parent_id), "b7ad6b7169203331");
        assert_eq!(t.flags, SAMPLED);
        assert_eq!(format(&t.trace_id, &t.parent_id, t.flags), GOOD);
        assert_eq!(parse(&format!(" \t{GOOD} ")), Some(t));
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        let bad = [
            "",
            "00",
            // Uppercase hex is not the specification's HEXDIGLC.
            "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "0g-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0x",
            // Version 00 has exactly four fields.
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333é-01",
        ];
        for b in bad {
            assert_eq!(parse(b), None, "{b:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_far_as_version_00_goes() {
        let later = "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09-what-the-future-holds";
        let t = parse(later).unwrap();
        assert_eq!((t.version, t.flags), (0xcc, 0x09));
        assert!(parse("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09").is_some());
    }

    #[test]
    fn tracestate_passes_only_printable_bounded_lists() {
        assert_eq!(
            tracestate(" rojo=00f067aa0ba902b7,congo=t61rcWkgMzE "),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into())
        );
        assert_eq!(tracestate("a=1\r\nx-evil: 1"), None);
        assert_eq!(tracestate("a=ü"), None);
        assert_eq!(tracestate("  "), None);
        assert_eq!(tracestate(&"a".repeat(TRACESTATE_MAX + 1)), None);
        assert!(tracestate(&"a".repeat(TRACESTATE_MAX)).is_some());
    }
}
