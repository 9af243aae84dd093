//! Validation of a resume payload against its interrupt's `responseSchema`.
//!
//! The schemas are the adapter's own (`interrupts::interrupt` builds every one of them), and
//! they use these JSON Schema 2020-12 keywords: `type` (object, string), `properties`,
//! `required`, `additionalProperties: false`, `propertyNames`, `enum`, `const`, `minLength`, `maxLength`, `pattern` (only
//! `\S`), `oneOf`, plus the `title` annotation. This checks exactly those with the 2020-12
//! meaning (white space for `\S` is Unicode's, as the kernel's Python sees it; ECMA-262's set
//! differs on U+0085 and U+FEFF only); a schema with any other keyword validates nothing (fail
//! closed). A general validator cost 1.5 MB of a 6 MB binary for this; the unit tests below
//! check every schema the adapter builds against the `jsonschema` crate (a dev-dependency) on
//! a table of payloads.

use serde_json::{Map, Value};

/// The `pattern` of a free-text answer: the kernel refuses one that is only white space.
pub(crate) const NON_SPACE: &str = "\\S";

/// Whether `instance` is valid against `schema`.
pub(crate) fn is_valid(schema: &Value, instance: &Value) -> bool {
    valid(schema, instance, 0).unwrap_or(false)
}

/// The adapter's schemas are three levels deep; anything deeper is not one of them.
const MAX_DEPTH: usize = 8;

/// `None`: the schema is not one this module understands.
fn valid(schema: &Value, instance: &Value, depth: usize) -> Option<bool> {
    if depth > MAX_DEPTH {
        return None;
    }
    let s = match schema {
        Value::Bool(b) => return Some(*b),
        Value::Object(s) => s,
        _ => return None,
    };
    let mut ok = true;
    for (key, want) in s {
        let this = match key.as_str() {
            "title" => true,
            "type" => match want.as_str()? {
                "object" => instance.is_object(),
                "string" => instance.is_string(),
                _ => return None,
            },
            "enum" => want.as_array()?.iter().any(|v| v == instance),
            "const" => want == instance,
            "minLength" => {
                let n = want.as_u64()?;
                instance
                    .as_str()
                    .is_none_or(|t| t.chars().count() as u64 >= n)
            }
            "maxLength" => {
                let n = want.as_u64()?;
                instance
                    .as_str()
                    .is_none_or(|t| t.chars().count() as u64 <= n)
            }
            // The one pattern the adapter advertises: a character that is not white space
            // somewhere (an unanchored `\S`, as JSON Schema's ECMA-262 patterns search).
            // Unicode's white space, not ECMA-262's: the kernel's refusal is what this guards.
            "pattern" => {
                if want.as_str()? != NON_SPACE {
                    return None;
                }
                instance
                    .as_str()
                    .is_none_or(|t| t.chars().any(|c| !c.is_whitespace()))
            }
            "required" => {
                let names = want.as_array()?;
                match instance.as_object() {
                    Some(o) => names
                        .iter()
                        .map(|n| n.as_str().map(|n| o.contains_key(n)))
                        .collect::<Option<Vec<bool>>>()?
                        .into_iter()
                        .all(|b| b),
                    None => true,
                }
            }
            "properties" => properties(want.as_object()?, instance, depth)?,
            "propertyNames" => match instance.as_object() {
                Some(o) => {
                    let mut all = true;
                    for k in o.keys() {
                        all &= valid(want, &Value::String(k.clone()), depth + 1)?;
                    }
                    all
                }
                None => true,
            },
            "additionalProperties" => {
                if want != &Value::Bool(false) {
                    return None;
                }
                let declared = s.get("properties").and_then(Value::as_object);
                instance.as_object().is_none_or(|o| {
                    o.keys()
                        .all(|k| declared.is_some_and(|d| d.contains_key(k)))
                })
            }
            "oneOf" => {
                let mut matched = 0;
                for sub in want.as_array()? {
                    if valid(sub, instance, depth + 1)? {
                        matched += 1;
                    }
                }
                matched == 1
            }
            _ => return None,
        };
        // Every keyword is still read: an unknown one later in the schema fails closed.
        ok &= this;
    }
    Some(ok)
}

fn properties(props: &Map<String, Value>, instance: &Value, depth: usize) -> Option<bool> {
    let Some(o) = instance.as_object() else {
        return Some(true);
    };
    let mut ok = true;
    for (name, sub) in props {
        if let Some(v) = o.get(name) {
            ok &= valid(sub, v, depth + 1)?;
        }
    }
    Some(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every kind of schema the adapter builds, from its own builder.
    fn schemas() -> Vec<Value> {
        let build = |v: Value| {
            crate::adapter::rules::interrupts::interrupt("i", v.as_object().unwrap())["responseSchema"]
                .clone()
        };
        vec![
            build(json!({"kind": "permission"})),
            build(json!({"kind": "ask_user_question", "options": [
                {"id": "a", "label": "A"}, {"id": "b", "label": "B"}]})),
            build(
                json!({"kind": "ask_user_question", "allowFreeText": true, "options": [
                {"id": "a", "label": "A"}, {"id": "a", "label": "again"}]}),
            ),
            build(json!({"kind": "ask_user_question"})),
            build(
                json!({"kind": "ask_user_question", "options": ["x", 3, {"candidate_index": 1}]}),
            ),
            build(json!({"kind": "cloud_resource_selection"})),
            build(json!({"kind": "deployment_confirmation", "options": [
                {"action": "confirm", "name": "C"}, {"action": "cancel", "name": "X"}]})),
            build(json!({"kind": "deployment_confirmation"})),
        ]
    }

    fn payloads() -> Vec<Value> {
        let mut out = vec![
            Value::Null,
            json!(true),
            json!(1),
            json!("allow_once"),
            json!([]),
            json!({}),
            json!({"decision": "allow_once"}),
            json!({"decision": "deny"}),
            json!({"decision": "allow_always"}),
            json!({"decision": 1}),
            json!({"decision": null}),
            json!({"decision": "deny", "extra": 1}),
            json!({"selectedId": "a"}),
            json!({"selectedId": "b"}),
            json!({"selectedId": "a-2"}),
            json!({"selectedId": "c"}),
            json!({"selectedId": "x"}),
            json!({"selectedId": "3"}),
            json!({"selectedId": 3}),
            json!({"selectedId": "1"}),
            json!({"selectedId": "a", "freeText": "t"}),
            json!({"freeText": ""}),
            json!({"freeText": "  "}),
            json!({"freeText": "\t\n\u{3000}"}),
            json!({"freeText": " x "}),
            json!({"freeText": "x"}),
            json!({"freeText": "日本"}),
            json!({"freeText": 5}),
            json!({"freeText": "x", "selectedId": "a"}),
            json!({"freeText": "x", "other": true}),
        ];
        out.push(json!({"selectedId": "a", "decision": "deny"}));
        out.extend([
            json!({"action": "confirm"}),
            json!({"action": "cancel"}),
            json!({"action": "reselect"}),
            json!({"action": "Confirm"}),
            json!({"action": "confirm", "parameterOverrides": {"Zone": "b", "N": 2}}),
            json!({"action": "confirm", "parameterOverrides": {"": 1}}),
            json!({"action": "confirm", "parameterOverrides": {" ": 1}}),
            json!({"action": "confirm", "parameterOverrides": "Zone=b"}),
            json!({"action": "confirm", "freeText": "x"}),
        ]);
        for p in [
            json!({"status": "selected", "value": "vsw-1"}),
            json!({"status": "selected", "value": "vsw-1", "label": "L", "source": {"id": "x"}}),
            json!({"status": "selected", "value": "vsw-1", "label": ""}),
            json!({"status": "selected", "value": ""}),
            json!({"status": "selected", "value": "v".repeat(1024)}),
            json!({"status": "selected", "value": "v".repeat(1025)}),
            json!({"status": "selected", "value": "vsw-1", "source": "x"}),
            json!({"status": "selected", "value": 1}),
            json!({"status": "selected"}),
            json!({"status": "canceled"}),
            json!({"status": "canceled", "value": "vsw-1"}),
            json!({"status": "other"}),
            json!({"status": "selected", "value": "vsw-1", "inputId": "i"}),
        ] {
            out.push(p);
        }
        out
    }

    #[test]
    fn agrees_with_jsonschema_on_every_schema_the_adapter_builds() {
        for schema in schemas() {
            let reference = jsonschema::draft202012::new(&schema).unwrap();
            for p in payloads() {
                assert_eq!(
                    is_valid(&schema, &p),
                    reference.is_valid(&p),
                    "schema {schema} payload {p}"
                );
            }
        }
    }

    #[test]
    fn some_payloads_are_valid_and_some_are_not() {
        // The agreement test above would also pass for a validator that says no to all.
        let s = &schemas();
        assert!(is_valid(&s[0], &json!({"decision": "deny"})));
        assert!(!is_valid(&s[0], &json!({"decision": "maybe"})));
        assert!(is_valid(&s[1], &json!({"selectedId": "b"})));
        assert!(!is_valid(&s[1], &json!({"freeText": "b"})));
        assert!(is_valid(&s[3], &json!({"freeText": "b"})));
        assert!(!is_valid(&s[3], &json!({"freeText": ""})));
        // Regression (second red-team, fault 4): white space only met `minLength: 1`, and the
        // kernel's refusal of it was reported as an outage.
        assert!(!is_valid(&s[3], &json!({"freeText": "   "})));
        assert!(is_valid(&s[3], &json!({"freeText": " b "})));
    }

    #[test]
    fn unknown_keywords_and_odd_schemas_validate_nothing() {
        let v = json!({"decision": "deny"});
        assert!(!is_valid(&json!({"pattern": "x"}), &json!("x")));
        assert!(!is_valid(
            &json!({"type": "object", "properties": {"decision": {"format": "email"}}}),
            &v
        ));
        assert!(!is_valid(&json!({"type": "number"}), &json!(1)));
        assert!(!is_valid(&json!({"additionalProperties": {}}), &v));
        assert!(!is_valid(&json!([]), &v));
        assert!(!is_valid(&Value::Null, &v));
        assert!(is_valid(&json!(true), &v));
        let mut deep = json!({"type": "string"});
        for _ in 0..20 {
            deep = json!({ "oneOf": [deep] });
        }
        assert!(!is_valid(&deep, &json!("x")), "depth is bounded");
    }
}
