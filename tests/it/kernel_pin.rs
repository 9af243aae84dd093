//! `KERNEL_PROFILE_HASH` is written by hand for the pinned kernel. These tests tie it to that
//! pin: the kernel's own algorithm (`PROFILE_HASH` in `iac_code/resource_selector/profiles.py`:
//! `"sha256:" + sha256(json.dumps(_hash_payload(), ensure_ascii=True, sort_keys=True,
//! separators=(",", ":")))`) applied to the payload captured from that kernel
//! (`tests/fixtures/kernel/resource_profiles.json`) must give the constant, and the fixture
//! must be for the kernel the interop suite installs. Bumping the pin without recapturing the
//! fixture fails here; recapturing it without updating the constant fails too. The interop
//! suite checks the fixture against the installed kernel's `_hash_payload()` itself.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture() -> Value {
    let raw = std::fs::read_to_string(root().join("tests/fixtures/kernel/resource_profiles.json"))
        .expect("the captured profile payload");
    serde_json::from_str(&raw).expect("JSON")
}

/// Python's `json.dumps(v, ensure_ascii=True, sort_keys=True, separators=(",", ":"))`.
fn py_dumps(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => py_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                py_dumps(x, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            // Python sorts by code point; UTF-8 byte order is the same order.
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                py_string(k, out);
                out.push(':');
                py_dumps(&o[k], out);
            }
            out.push('}');
        }
    }
}

fn py_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[test]
fn the_profile_hash_constant_is_the_pinned_kernels() {
    let f = fixture();
    let mut canonical = String::new();
    py_dumps(&f["payload"], &mut canonical);
    let hash = format!("sha256:{:x}", Sha256::digest(canonical.as_bytes()));
    assert_eq!(
        hash,
        iac_agui::a2a::KERNEL_PROFILE_HASH,
        "KERNEL_PROFILE_HASH is not the hash of the captured kernel's profiles"
    );
}

#[test]
fn the_captured_profiles_are_for_the_kernel_the_interop_suite_pins() {
    let f = fixture();
    let run_sh = std::fs::read_to_string(root().join("tests/interop/run.sh")).expect("run.sh");
    let pin = run_sh
        .split_whitespace()
        .find_map(|w| w.trim_matches('"').strip_prefix("iac-code[a2a]=="))
        .expect("an iac-code pin in tests/interop/run.sh");
    assert_eq!(
        f["kernel"].as_str(),
        Some(format!("iac-code=={pin}").as_str()),
        "the kernel pin moved: recapture tests/fixtures/kernel/resource_profiles.json and update KERNEL_PROFILE_HASH"
    );
}

#[test]
fn python_dumps_escapes_as_ensure_ascii_does() {
    let mut out = String::new();
    py_dumps(
        &serde_json::json!({"b": "é\u{1F600}\u{7f}\"", "a": [1, true, null]}),
        &mut out,
    );
    assert_eq!(
        out,
        r#"{"a":[1,true,null],"b":"\u00e9\ud83d\ude00\u007f\""}"#
    );
}
