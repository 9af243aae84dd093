//! The one JSON writer, byte-identical to Python's `json.dumps`: the canonical form of request
//! digests (`ensure_ascii=False, sort_keys=True, separators=(",", ":")`, reference §2.6), the
//! state-file form (`indent=2, sort_keys=True, ensure_ascii=False`, §7.3), and the string and
//! float spellings the AG-UI events share. Used by `agui::digest`, `agui::events`,
//! `store::document` and the projection.

use serde_json::Value;

/// Canonical bytes of `v`.
pub fn canonical(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(v, None, &mut out);
    out
}

/// Python `json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False)` (the state-file format).
pub(crate) fn pretty(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    write(v, Some(0), &mut out);
    out
}

/// Before an item of a container: the separator, then (pretty) a newline and indentation.
fn separate(out: &mut Vec<u8>, first: bool, level: Option<usize>) {
    if !first {
        out.push(b',');
    }
    if let Some(l) = level {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', l * 2));
    }
}

/// `level` is `None` for the compact canonical form, `Some(depth)` for the indented file form.
fn write(v: &Value, level: Option<usize>, out: &mut Vec<u8>) {
    let inner = level.map(|l| l + 1);
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            let text = n.to_string();
            // Python would write the non-JSON token `Infinity` for a float that overflows;
            // the state file must stay readable JSON, so there such a number keeps its text.
            if level.is_some() && text.parse::<f64>().is_ok_and(f64::is_infinite) {
                out.extend_from_slice(text.as_bytes());
            } else {
                write_number(&text, out);
            }
        }
        Value::String(s) => write_str(s, out),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                separate(out, i == 0, inner);
                write(x, inner, out);
            }
            if !a.is_empty() {
                separate(out, true, level);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                separate(out, i == 0, inner);
                write_str(k, out);
                out.extend_from_slice(if level.is_some() { b": " } else { b":" });
                if let Some(x) = m.get(*k) {
                    write(x, inner, out);
                }
            }
            if !m.is_empty() {
                separate(out, true, level);
            }
            out.push(b'}');
        }
    }
}

/// The decimal digits of `n`, as `n.to_string()` writes them, without its allocation (every
/// event has a timestamp and an id).
pub(crate) fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `n.to_string()` for a signed number, without the allocation.
pub(crate) fn write_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(out, n.unsigned_abs());
}

/// Python's `json` string escaping with `ensure_ascii=False`.
pub(crate) fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let mut rest = s.as_bytes();
    loop {
        let (plain, tail) = rest.split_at(crate::scan::json_plain_prefix(rest).min(rest.len()));
        out.extend_from_slice(plain);
        let Some((&b, after)) = tail.split_first() else {
            break;
        };
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
        rest = after;
    }
    out.push(b'"');
}

/// A JSON number as Python's `json.loads` then `json.dumps` render it: integers keep every
/// digit; anything with `.`/`e` is a float rendered with `repr`.
fn write_number(text: &str, out: &mut Vec<u8>) {
    let is_float = text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
    if !is_float {
        let digits = text.strip_prefix('-').unwrap_or(text);
        if digits.bytes().all(|b| b == b'0') {
            out.push(b'0'); // Python ints have no negative zero
        } else {
            out.extend_from_slice(text.as_bytes());
        }
        return;
    }
    let f: f64 = text.parse().unwrap_or(f64::NAN);
    out.extend_from_slice(python_float_repr(f).as_bytes());
}

/// Python `repr(float)`: shortest round-trip digits; fixed notation for decimal exponents in
/// [-4, 16), else `d[.ddd]e±XX`.
pub(crate) fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "1.2345e-7".
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let s = if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{digits}{}.0", "0".repeat((int_len - n) as usize))
            } else {
                format!(
                    "{}.{}",
                    &digits[..int_len as usize],
                    &digits[int_len as usize..]
                )
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_like_to_string() {
        let mut cases: Vec<i64> = vec![0, 1, -1, 9, 10, -10, 99, 100, i64::MAX, i64::MIN];
        cases.extend((0..19).map(|p| 10i64.pow(p) - 1));
        cases.extend((0..19).map(|p| -(10i64.pow(p))));
        for n in cases {
            let mut out = b"x".to_vec();
            write_i64(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
        for n in [0, 7, 10, 1_700_000_000_000, u64::MAX] {
            let mut out = Vec::new();
            write_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    /// The escaping is serde_json's (and Python's with `ensure_ascii=False`) for every
    /// character that needs it, at every position of an eight-byte step and of the tail.
    #[test]
    fn strings_are_escaped_like_serde_json_at_every_position() {
        let specials = [
            '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1f}', '\u{7f}', 'é', '/',
        ];
        for len in 0..20 {
            for at in 0..len {
                for c in specials {
                    let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    let mut out = Vec::new();
                    write_str(&s, &mut out);
                    assert_eq!(
                        String::from_utf8(out).unwrap(),
                        serde_json::to_string(&s).unwrap()
                    );
                }
            }
        }
    }

    fn canon(s: &str) -> String {
        String::from_utf8(canonical(&serde_json::from_str(s).unwrap())).unwrap()
    }

    #[test]
    fn floats_like_python_repr() {
        let cases = [
            ("1.0", "1.0"),
            ("100.0", "100.0"),
            ("1e2", "100.0"),
            ("1E2", "100.0"),
            ("1e16", "1e+16"),
            ("1e15", "1000000000000000.0"),
            ("1e-07", "1e-07"),
            ("0.0001", "0.0001"),
            ("0.00001", "1e-05"),
            ("-0.0", "-0.0"),
            ("0.0", "0.0"),
            ("2.5e300", "2.5e+300"),
            ("1.5", "1.5"),
            ("123456789.125", "123456789.125"),
            ("0.1", "0.1"),
            ("1.2345678901234567e-5", "1.2345678901234568e-05"),
            ("1e400", "Infinity"),
            ("-1e400", "-Infinity"),
            ("12345678901234567890.0", "1.2345678901234567e+19"),
        ];
        for (input, want) in cases {
            assert_eq!(canon(input), want, "{input}");
        }
    }

    #[test]
    fn integers_keep_every_digit() {
        assert_eq!(
            canon("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(canon("-42"), "-42");
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("0"), "0");
    }

    #[test]
    fn strings_keys_and_nesting() {
        assert_eq!(
            canon(r#"{"b":1,"a":{"d":[1,{"z":true,"y":null}],"c":"x"},"é":2,"Z":3}"#),
            r#"{"Z":3,"a":{"c":"x","d":[1,{"y":null,"z":true}]},"b":1,"é":2}"#
        );
        assert_eq!(
            canon(r#""q\"b\\s\/n\n r\r t\t b\b f\f u\u0001 del\u007f ls\u2028 日本 😀""#),
            "\"q\\\"b\\\\s/n\\n r\\r t\\t b\\b f\\f u\\u0001 del\u{7f} ls\u{2028} 日本 😀\""
        );
        // Code-point order: a supplementary character sorts after U+FFFF-range ones.
        assert_eq!(canon(r#"{"😀":1,"\uffff":2}"#), "{\"\u{ffff}\":2,\"😀\":1}");
    }

    #[test]
    fn pretty_matches_the_reference_state_file_bytes() {
        for f in [
            include_str!("../tests/fixtures/agui/01_after_interrupt.state.json"),
            include_str!("../tests/fixtures/agui/02_after_resume.state.json"),
        ] {
            let v: Value = serde_json::from_str(f).unwrap();
            let mut out = pretty(&v);
            out.push(b'\n');
            assert_eq!(String::from_utf8(out).unwrap(), f);
        }
    }

    #[test]
    fn python_generated_vectors() {
        // Made by CPython's json module: random floats over all magnitudes, big integers,
        // escapes and non-ASCII keys (tests/fixtures/digest_vectors.json).
        let vectors: Vec<Value> =
            serde_json::from_str(include_str!("../tests/fixtures/digest_vectors.json")).unwrap();
        assert!(vectors.len() >= 400);
        for v in vectors {
            let input: Value = serde_json::from_str(v["input"].as_str().unwrap()).unwrap();
            let got = String::from_utf8(canonical(&input)).unwrap();
            assert_eq!(got, v["canonical"].as_str().unwrap(), "{}", v["input"]);
            assert_eq!(
                crate::ids::sha256_hex(&canonical(&input)),
                v["sha256"].as_str().unwrap()
            );
        }
    }
}
