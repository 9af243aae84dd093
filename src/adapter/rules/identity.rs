//! Identity rules for what the kernel sends (reference §5.2, A2A notes §7): the task, session
//! and context of an event or an input must be the ones on record. One place for every check.

use serde_json::Value;

use crate::a2a::types::A2aEvent;
use crate::adapter::rules::interrupts::FoundInput;
use crate::catalog::Msg;

/// How an id from the wire compares with the one on record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    Same,
    Other,
    Unset,
}

impl Known {
    pub(crate) fn of(recorded: Option<&str>, wire: &str) -> Known {
        match recorded {
            Some(k) if k == wire => Known::Same,
            Some(_) => Known::Other,
            None => Known::Unset,
        }
    }
}

/// An event that names another task or context than the run's (absent ids are allowed).
pub(crate) fn foreign_event(ev: &A2aEvent, task: &str, context: &str) -> bool {
    ev.task_id().is_some_and(|t| t != task) || ev.context_id().is_some_and(|c| c != context)
}

/// Every input must name the run's task and context when it names any.
pub(crate) fn check_inputs(
    inputs: &[FoundInput],
    task: Option<&str>,
    context: &str,
) -> Result<(), Msg> {
    let named = |f: &FoundInput, k: &str| {
        f.value
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    for f in inputs {
        if named(f, "requestTaskId").is_some_and(|r| Some(r.as_str()) != task) {
            return Err(Msg::InterruptOtherTask);
        }
        if named(f, "contextId").is_some_and(|c| c != context) {
            return Err(Msg::InterruptOtherContext);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: Value) -> FoundInput {
        FoundInput {
            id: "i".into(),
            value: v.as_object().unwrap().clone(),
            sideband: false,
        }
    }

    #[test]
    fn known_ids() {
        assert_eq!(Known::of(Some("a"), "a"), Known::Same);
        assert_eq!(Known::of(Some("a"), "b"), Known::Other);
        assert_eq!(Known::of(None, "b"), Known::Unset);
    }

    #[test]
    fn input_identity_table() {
        let cases = [
            (json!({}), Some("t"), Ok(())),
            (
                json!({"requestTaskId": "t", "contextId": "c"}),
                Some("t"),
                Ok(()),
            ),
            (json!({"requestTaskId": "", "contextId": ""}), None, Ok(())),
            (
                json!({"requestTaskId": "x"}),
                Some("t"),
                Err(Msg::InterruptOtherTask),
            ),
            (
                json!({"requestTaskId": "t"}),
                None,
                Err(Msg::InterruptOtherTask),
            ),
            (
                json!({"contextId": "other"}),
                Some("t"),
                Err(Msg::InterruptOtherContext),
            ),
        ];
        for (v, task, want) in cases {
            assert_eq!(check_inputs(&[input(v.clone())], task, "c"), want, "{v}");
        }
    }

    #[test]
    fn foreign_events() {
        let ev = |v: Value| match crate::a2a::types::Payload::from_value(json!({"result": v})) {
            crate::a2a::types::Payload::Event(e) => e,
            other => panic!("{other:?}"),
        };
        let own = ev(
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}),
        );
        assert!(!foreign_event(&own, "t", "c"));
        assert!(foreign_event(&own, "u", "c"));
        assert!(foreign_event(&own, "t", "d"));
        let anonymous =
            ev(json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}}));
        assert!(!foreign_event(&anonymous, "t", "c"));
    }
}
