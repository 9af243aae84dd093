//! Request and resume digests, byte-identical to the reference (§2.6): SHA-256 of the
//! canonical JSON. State files written by either implementation therefore agree on
//! `runDigests` and `appliedResumeDigests`.

use serde_json::Value;

use crate::json::canonical;

/// SHA-256 (lowercase hex) of the canonical form.
pub fn digest(v: &Value) -> String {
    crate::ids::sha256_hex(&canonical(v))
}

/// The resume-entry digest: `{"status": …, "payload": payload or null}`.
pub(crate) fn resume_digest(status: &str, payload: Option<&Value>) -> String {
    let mut m = serde_json::Map::new();
    m.insert("payload".into(), payload.cloned().unwrap_or(Value::Null));
    m.insert("status".into(), Value::String(status.into()));
    digest(&Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_digest() {
        let v: Value =
            serde_json::from_str(r#"{"status":"resolved","payload":{"decision":"allow_once"}}"#)
                .unwrap();
        assert_eq!(
            String::from_utf8(canonical(&v)).unwrap(),
            r#"{"payload":{"decision":"allow_once"},"status":"resolved"}"#
        );
        assert_eq!(
            digest(&v),
            "289281c743b2a91d60f25b59680f04683bd82766f7a9b2eb405975140373868e"
        );
        assert_eq!(
            resume_digest(
                "resolved",
                Some(&serde_json::json!({"decision":"allow_once"}))
            ),
            "289281c743b2a91d60f25b59680f04683bd82766f7a9b2eb405975140373868e"
        );
    }

    #[test]
    fn example_request_digests_match_the_reference_state_files() {
        for (req, digest_want) in [
            (
                include_str!("../../tests/fixtures/agui/01_interrupt_run.request.json"),
                "fdccc52aa41f88e513fa246cb0bbdf71af0c32f5181fe2efe7efba3f09240536",
            ),
            (
                include_str!("../../tests/fixtures/agui/02_resume_run.request.json"),
                "5352cabf0c1456bd14c40cbb1e6e7d587c98ae4263604528a07e103d09c16063",
            ),
        ] {
            let v: Value = serde_json::from_str(req).unwrap();
            assert_eq!(digest(&v), digest_want);
        }
    }
}
