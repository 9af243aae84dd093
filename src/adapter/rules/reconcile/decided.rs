//! What one answer of a resume decided, as the audit record says it (feature `audit`): read
//! through the run's own validation (`check`), so the log never holds a decision the kernel
//! is not sent.

use serde_json::Value;

use super::check;
use crate::adapter::rules::interrupts;
use crate::adapter::rules::interrupts::confirmation::DEPLOYMENT_CONFIRMATION;
use crate::agui::input::{ResumeEntry, ResumeStatus};
use crate::audit::{Decided, Refused};
use crate::errors::Code;
use crate::store::document::PendingInput;

/// What one answer decided, as the audit record says it, read from the stored interrupt
/// (`None`: nothing pending under its id) after `check`: an answer that fails it did not
/// reach the kernel and is `Refused` with none of its values. Otherwise each kind's answer
/// as its schema shapes it: a permission's word and a confirmation's action are words of the
/// schema's enum, an option one of its ids.
pub(crate) fn decided(e: &ResumeEntry, stored: Option<&PendingInput>, now_ms: u64) -> Decided {
    let Some(p) = stored else {
        return Decided::Refused(Refused::NotPending);
    };
    let payload = match check(e, p, now_ms) {
        Ok(payload) => payload,
        Err((Code::ExecutionExpired, _)) => return Decided::Refused(Refused::Expired),
        Err(_) => return Decided::Refused(Refused::Invalid),
    };
    if e.status == ResumeStatus::Cancelled {
        return Decided::Cancelled;
    }
    let answer = payload.unwrap_or(Value::Null);
    let text = |k: &str| answer.get(k).and_then(Value::as_str).map(str::to_string);
    let kind = p.value.get("kind").and_then(Value::as_str);
    let read = if kind == Some("permission") {
        text("decision").map(Decided::Word)
    } else if kind == Some(DEPLOYMENT_CONFIRMATION) {
        text("action")
            .map(|action| {
                let overrides = answer
                    .get("parameterOverrides")
                    .and_then(Value::as_object)
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                Decided::Action { action, overrides }
            })
            .or_else(|| text("freeText").map(|_| Decided::FreeText))
    } else if interrupts::is_resource_selection(&p.value) {
        match text("status").as_deref() {
            Some("selected") => text("value").map(Decided::Resource),
            _ => Some(Decided::Cancelled),
        }
    } else {
        text("selectedId")
            .map(Decided::Option)
            .or_else(|| text("freeText").map(|_| Decided::FreeText))
    };
    // Every schema the adapter builds is one of the shapes above.
    read.unwrap_or(Decided::Answered)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{allow, entry, pick};
    use super::super::validate;
    use super::*;

    fn cancelled(id: &str) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: id.into(),
            status: ResumeStatus::Cancelled,
            payload: None,
        }
    }

    fn stored(v: Value) -> PendingInput {
        PendingInput {
            value: v.as_object().unwrap().clone(),
            sideband: false,
        }
    }

    fn confirmation() -> PendingInput {
        stored(
            json!({"kind": "deployment_confirmation", "inputId": "c1", "options": [
            {"action": "confirm", "name": "Confirm"}, {"action": "cancel", "name": "Cancel"}]}),
        )
    }

    #[test]
    fn a_deployment_confirmations_decision_is_its_action_and_its_override_names() {
        let c = confirmation();
        let go = entry(
            "c1",
            json!({"action": "confirm", "parameterOverrides": {"InstanceType": "ecs.g7", "Zone": "b"}}),
        );
        assert_eq!(
            decided(&go, Some(&c), 0),
            Decided::Action {
                action: "confirm".into(),
                overrides: vec!["InstanceType".into(), "Zone".into()],
            }
        );
        let stop = entry("c1", json!({"action": "cancel"}));
        assert_eq!(
            decided(&stop, Some(&c), 0),
            Decided::Action {
                action: "cancel".into(),
                overrides: vec![],
            }
        );
        assert_eq!(
            decided(&entry("c1", json!({"freeText": "go"})), Some(&c), 0),
            Decided::FreeText
        );
        // An action the step did not offer never reached the kernel.
        assert_eq!(
            decided(&entry("c1", json!({"action": "reselect"})), Some(&c), 0),
            Decided::Refused(Refused::Invalid)
        );
        assert_eq!(decided(&cancelled("c1"), Some(&c), 0), Decided::Cancelled);
    }

    #[test]
    fn only_an_answer_valid_against_its_stored_interrupt_is_recorded_as_a_decision() {
        let perm = stored(json!({"kind": "permission", "inputId": "p1"}));
        let question = stored(json!({"kind": "ask_user_question", "inputId": "q1",
            "options": [{"id": "a", "label": "Alpha"}], "allowFreeText": true}));
        let closed = stored(json!({"kind": "ask_user_question", "inputId": "q2",
            "options": [{"id": "a", "label": "Alpha"}]}));
        let resource = stored(json!({"kind": "cloud_resource_selection", "inputId": "s1"}));
        let mut late = perm.clone();
        late.value
            .insert("expiresAt".into(), "2020-01-01T00:00:00Z".into());
        let now = 1_700_000_000_000;
        let refused = Decided::Refused(Refused::Invalid);
        let no_payload = ResumeEntry {
            interrupt_id: "p1".into(),
            status: ResumeStatus::Resolved,
            payload: None,
        };
        let cases: Vec<(ResumeEntry, Option<&PendingInput>, Decided)> = vec![
            (allow("p1"), Some(&perm), Decided::Word("allow_once".into())),
            (
                entry("p1", json!({"decision": "deny"})),
                Some(&perm),
                Decided::Word("deny".into()),
            ),
            (cancelled("p1"), Some(&perm), Decided::Cancelled),
            // Not a word of the schema's enum, an extra key, no payload.
            (
                entry("p1", json!({"decision": "allow_always"})),
                Some(&perm),
                refused.clone(),
            ),
            (
                entry("p1", json!({"decision": "deny", "note": "x"})),
                Some(&perm),
                refused.clone(),
            ),
            (no_payload, Some(&perm), refused.clone()),
            (allow("p1"), Some(&late), Decided::Refused(Refused::Expired)),
            (pick("q1"), Some(&question), Decided::Option("a".into())),
            (
                entry("q1", json!({"freeText": "my password is hunter2"})),
                Some(&question),
                Decided::FreeText,
            ),
            // No such option; free text where the question takes none.
            (
                entry("q1", json!({"selectedId": "delete-all-prod"})),
                Some(&question),
                refused.clone(),
            ),
            (
                entry("q2", json!({"freeText": "x"})),
                Some(&closed),
                refused.clone(),
            ),
            (cancelled("q1"), Some(&question), Decided::Cancelled),
            (
                entry(
                    "s1",
                    json!({"status": "selected", "value": "vsw-1", "label": "L"}),
                ),
                Some(&resource),
                Decided::Resource("vsw-1".into()),
            ),
            (
                entry("s1", json!({"status": "canceled"})),
                Some(&resource),
                Decided::Cancelled,
            ),
            (cancelled("s1"), Some(&resource), Decided::Cancelled),
            (
                entry("s1", json!({"status": "selected"})),
                Some(&resource),
                refused.clone(),
            ),
            // Nothing pending under the id: never raised, or already answered.
            (allow("p9"), None, Decided::Refused(Refused::NotPending)),
            (cancelled("p9"), None, Decided::Refused(Refused::NotPending)),
        ];
        for (i, (e, p, want)) in cases.into_iter().enumerate() {
            assert_eq!(decided(&e, p, now - 1), want, "case {i}: {e:?}");
            // The run's own validation agrees: a recorded decision is one it delivers.
            if let Some(p) = p {
                let pend = vec![(e.interrupt_id.clone(), p.clone())];
                let delivered = validate(std::slice::from_ref(&e), &pend, now - 1).is_ok();
                assert_eq!(delivered, !matches!(want, Decided::Refused(_)), "case {i}");
            }
        }
    }
}
