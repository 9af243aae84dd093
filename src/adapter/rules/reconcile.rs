//! Resume answers against pending interrupts (reference §3.3 steps 6–12), as pure functions:
//! the driver supplies the thread's pending inputs, applied digests and the task snapshot's
//! inputs, persists what `reconcile` returns and delivers what `validate` returns.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value, json};

use crate::adapter::rules::interrupts::{self, FoundInput};
use crate::agui::digest;
use crate::agui::input::{ResumeEntry, ResumeStatus};
use crate::catalog::Msg;
use crate::errors::Code;
use crate::store::document::{PendingInput, filter_input};

// What an answer decided, for the audit record.
#[cfg(feature = "audit")]
pub(crate) mod decided;

/// Why a resume is refused.
pub(crate) type Refusal = (Code, Msg);

/// What follows a successful reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Every pending interrupt is answered: validate and deliver.
    Deliver,
    /// The snapshot showed interrupts the client has not seen: end with all of them.
    Interrupt,
}

/// The reconciled pending set (to persist before anything else) and the verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reconciled {
    pub(crate) pending: Vec<(String, PendingInput)>,
    /// An entry answers an interrupt already applied with a different answer.
    pub(crate) conflict: bool,
    /// Decided on the reconciled pending set (after `conflict`).
    pub(crate) next: Result<Next, Refusal>,
}

/// The snapshot as far as reconciliation is concerned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot<'a> {
    pub(crate) inputs: &'a [FoundInput],
    pub(crate) terminal: bool,
    /// The snapshot carries `input` or `pendingPermissions` at all.
    pub(crate) has_input_keys: bool,
}

/// The digest recorded when an answer is applied.
pub(crate) fn entry_digest(e: &ResumeEntry) -> String {
    digest::resume_digest(e.status.as_str(), e.payload.as_ref())
}

/// Steps 6–11. `Err` is a refusal before anything is written (duplicate ids).
pub(crate) fn reconcile(
    execution_id: &str,
    pending: &[(String, PendingInput)],
    applied: &BTreeMap<(String, String), String>,
    entries: &[ResumeEntry],
    snap: Snapshot<'_>,
) -> Result<Reconciled, Refusal> {
    let known: Vec<&str> = pending.iter().map(|(k, _)| k.as_str()).collect();
    let resume_ids: Vec<&str> = entries.iter().map(|e| e.interrupt_id.as_str()).collect();
    let answering = known.iter().any(|k| resume_ids.contains(k));
    // 6. A terminal task, or one showing other inputs than those being answered, replaces
    // the pending set.
    let replace = snap.terminal || (!answering && snap.has_input_keys);
    // 7. Duplicate ids in the resume.
    let mut uniq = HashSet::new();
    if !resume_ids.iter().all(|i| uniq.insert(*i)) {
        return Err((Code::IncompleteResume, Msg::ResumeDuplicateIds));
    }
    // 8. Merge the snapshot's inputs; inputs already applied in this execution leave pending
    // (a conflicting answer is refused).
    let mut next: Vec<(String, PendingInput)> = if replace {
        Vec::new()
    } else {
        pending.to_vec()
    };
    merge_inputs(&mut next, snap.inputs.iter().cloned());
    let mut conflict = false;
    next.retain(|(id, _)| {
        let Some(d) = applied.get(&(execution_id.to_string(), id.clone())) else {
            return true;
        };
        if let Some(e) = entries.iter().find(|e| e.interrupt_id == *id)
            && entry_digest(e) != *d
        {
            conflict = true;
        }
        false
    });
    let verdict = decide(execution_id, &next, &known, applied, entries);
    Ok(Reconciled {
        pending: next,
        conflict,
        next: verdict,
    })
}

/// Steps 10–11 on the reconciled pending set.
fn decide(
    execution_id: &str,
    pending: &[(String, PendingInput)],
    known: &[&str],
    applied: &BTreeMap<(String, String), String>,
    entries: &[ResumeEntry],
) -> Result<Next, Refusal> {
    let pending_ids: Vec<&str> = pending.iter().map(|(k, _)| k.as_str()).collect();
    // 10. Entries that are not pending: applied with the same answer, or refused.
    for e in entries {
        if pending_ids.contains(&e.interrupt_id.as_str()) {
            continue;
        }
        match applied.get(&(execution_id.to_string(), e.interrupt_id.clone())) {
            Some(d) if *d == entry_digest(e) => {}
            Some(_) => return Err((Code::ResumeAlreadyApplied, Msg::ResumeAlreadyApplied)),
            None => return Err((Code::UnknownInterrupt, Msg::ResumeUnknownInterrupt)),
        }
    }
    // 11. Every known interrupt answered; newly discovered ones end the run listing all.
    let missing: Vec<&str> = pending_ids
        .iter()
        .copied()
        .filter(|p| !entries.iter().any(|e| e.interrupt_id == *p))
        .collect();
    if missing.iter().any(|m| known.contains(m)) {
        return Err((Code::IncompleteResume, Msg::ResumeIncomplete));
    }
    Ok(if missing.is_empty() {
        Next::Deliver
    } else {
        Next::Interrupt
    })
}

/// Merge inputs into a pending set: existing entries are kept (sideband only upgraded).
pub(crate) fn merge_inputs(
    pending: &mut Vec<(String, PendingInput)>,
    inputs: impl IntoIterator<Item = FoundInput>,
) {
    for f in inputs {
        match pending.iter_mut().find(|(k, _)| *k == f.id) {
            Some((_, p)) => p.sideband |= f.sideband,
            None => pending.push((
                f.id,
                PendingInput {
                    value: filter_input(&f.value),
                    sideband: f.sideband,
                },
            )),
        }
    }
}

/// One validated resume answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) id: String,
    pub(crate) status: ResumeStatus,
    pub(crate) digest: String,
    pub(crate) payload: Option<Value>,
    pub(crate) value: Map<String, Value>,
    pub(crate) sideband: bool,
    pub(crate) permission: bool,
    /// A cloud resource selection: answered with `iac_code.inputResponse`, never text.
    pub(crate) resource: bool,
}

/// One answer against its stored interrupt: the payload the kernel is sent (a cancelled
/// permission is a denial, a cancelled resource selection the kernel's `canceled`), or why it
/// is refused. `validate` and the audit record (`decided.rs`) read every answer through it.
pub(crate) fn check(
    e: &ResumeEntry,
    p: &PendingInput,
    now_ms: u64,
) -> Result<Option<Value>, Refusal> {
    if let Some(exp) = p.value.get("expiresAt").and_then(Value::as_str)
        && crate::rfc3339::parse_millis(exp).is_some_and(|ms| ms < now_ms as i64)
    {
        return Err((Code::ExecutionExpired, Msg::ExecutionExpired));
    }
    let permission = is_permission(&p.value);
    let resource = interrupts::is_resource_selection(&p.value);
    let mut payload = e.payload.clone();
    if e.status == ResumeStatus::Cancelled && permission {
        payload = Some(json!({"decision": "deny"}));
    }
    // A cancelled resource selection is the kernel's own `canceled` answer: the tool
    // hears it and the turn goes on.
    if e.status == ResumeStatus::Cancelled && resource {
        payload = Some(json!({"status": "canceled"}));
    }
    if e.status == ResumeStatus::Resolved && payload.is_none() {
        return Err((Code::ResumePayloadInvalid, Msg::ResumePayloadRequired));
    }
    if e.status != ResumeStatus::Cancelled || permission || resource {
        let schema = interrupts::interrupt(&e.interrupt_id, &p.value)["responseSchema"].clone();
        let ok = crate::adapter::rules::schema::is_valid(
            &schema,
            payload.as_ref().unwrap_or(&Value::Null),
        );
        if !ok {
            return Err((Code::ResumePayloadInvalid, Msg::ResumePayloadInvalid));
        }
    }
    Ok(payload)
}

fn is_permission(value: &Map<String, Value>) -> bool {
    value.get("kind").and_then(Value::as_str) == Some("permission")
}

/// Step 12: every answer checked against its interrupt before any side effect, in resume
/// order. Entries no longer pending are skipped; `now_ms` decides expiry.
pub(crate) fn validate(
    entries: &[ResumeEntry],
    pending: &[(String, PendingInput)],
    now_ms: u64,
) -> Result<Vec<Answer>, Refusal> {
    let mut out = Vec::new();
    for e in entries {
        let Some((_, p)) = pending.iter().find(|(k, _)| *k == e.interrupt_id) else {
            continue;
        };
        let payload = check(e, p, now_ms)?;
        out.push(Answer {
            id: e.interrupt_id.clone(),
            status: e.status,
            digest: entry_digest(e),
            payload,
            value: p.value.clone(),
            sideband: p.sideband,
            permission: is_permission(&p.value),
            resource: interrupts::is_resource_selection(&p.value),
        });
    }
    if out.is_empty() {
        return Err((Code::ResumeAlreadyApplied, Msg::ResumeAlreadyApplied));
    }
    Ok(out)
}

/// The text a question answer sends: the free text, else the chosen option's label.
pub(crate) fn question_prompt(a: &Answer) -> Option<String> {
    let p = a.payload.as_ref().unwrap_or(&Value::Null);
    // Only a deployment confirmation's schema takes `action`.
    if p.get("action").is_some() {
        return super::interrupts::confirmation::answer_text(p);
    }
    p.get("freeText")
        .or_else(|| p.get("free_text"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .or_else(|| {
            p.get("selectedId")
                .or_else(|| p.get("selected_id"))
                .map(interrupts::py_str)
                .map(|sel| interrupts::option_label(&a.value, &sel))
        })
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXEC: &str = "exec-1";

    fn input(id: &str, kind: &str, sideband: bool) -> FoundInput {
        let mut v = json!({"inputId": id, "kind": kind, "required": true, "prompt": "?"});
        if kind == "ask_user_question" {
            v["options"] = json!([{"id": "a", "label": "Alpha"}]);
            v["allowFreeText"] = json!(true);
        }
        FoundInput {
            id: id.into(),
            value: v.as_object().unwrap().clone(),
            sideband,
        }
    }

    fn pending(inputs: &[FoundInput]) -> Vec<(String, PendingInput)> {
        let mut p = Vec::new();
        merge_inputs(&mut p, inputs.iter().cloned());
        p
    }

    pub(super) fn entry(id: &str, payload: Value) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: id.into(),
            status: ResumeStatus::Resolved,
            payload: Some(payload),
        }
    }

    pub(super) fn allow(id: &str) -> ResumeEntry {
        entry(id, json!({"decision": "allow_once"}))
    }

    pub(super) fn pick(id: &str) -> ResumeEntry {
        entry(id, json!({"selectedId": "a"}))
    }

    fn snap(inputs: &[FoundInput]) -> Snapshot<'_> {
        Snapshot {
            inputs,
            terminal: false,
            has_input_keys: !inputs.is_empty(),
        }
    }

    fn ids(p: &[(String, PendingInput)]) -> Vec<&str> {
        p.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn verdicts_table() {
        let q = input("q1", "ask_user_question", false);
        let p = input("p1", "permission", false);
        let sp = input("p1", "permission", true);
        let none = BTreeMap::new();
        // (pending before, snapshot inputs, answers) → (pending after, verdict)
        type Case<'a> = (
            Vec<FoundInput>,
            Vec<FoundInput>,
            Vec<ResumeEntry>,
            Vec<&'a str>,
            Result<Next, Refusal>,
        );
        let cases: Vec<Case> = vec![
            (
                vec![p.clone()],
                vec![p.clone()],
                vec![allow("p1")],
                vec!["p1"],
                Ok(Next::Deliver),
            ),
            // The snapshot no longer shows the input: still pending (answering keeps the set).
            (
                vec![p.clone()],
                vec![],
                vec![allow("p1")],
                vec!["p1"],
                Ok(Next::Deliver),
            ),
            // Mixed question + permission, both answered.
            (
                vec![q.clone(), p.clone()],
                vec![q.clone(), sp.clone()],
                vec![pick("q1"), allow("p1")],
                vec!["q1", "p1"],
                Ok(Next::Deliver),
            ),
            // A permission appears beside the question being answered: interrupt with both.
            (
                vec![q.clone()],
                vec![p.clone()],
                vec![pick("q1")],
                vec!["q1", "p1"],
                Ok(Next::Interrupt),
            ),
            // A known interrupt left unanswered.
            (
                vec![q.clone(), p.clone()],
                vec![],
                vec![pick("q1")],
                vec!["q1", "p1"],
                Err((Code::IncompleteResume, Msg::ResumeIncomplete)),
            ),
            // An id that was never pending.
            (
                vec![p.clone()],
                vec![],
                vec![allow("p1"), allow("zz")],
                vec!["p1"],
                Err((Code::UnknownInterrupt, Msg::ResumeUnknownInterrupt)),
            ),
            // Not answering anything known, and the snapshot shows other inputs: replaced.
            (
                vec![p.clone()],
                vec![q.clone()],
                vec![allow("zz")],
                vec!["q1"],
                Err((Code::UnknownInterrupt, Msg::ResumeUnknownInterrupt)),
            ),
        ];
        for (i, (before, shown, answers, after, verdict)) in cases.into_iter().enumerate() {
            let r = reconcile(EXEC, &pending(&before), &none, &answers, snap(&shown)).unwrap();
            assert_eq!(ids(&r.pending), after, "case {i}");
            assert_eq!(r.next, verdict, "case {i}");
            assert!(!r.conflict, "case {i}");
        }
    }

    #[test]
    fn sideband_is_only_upgraded() {
        let p = input("p1", "permission", false);
        let sp = input("p1", "permission", true);
        let r = reconcile(
            EXEC,
            &pending(&[p]),
            &BTreeMap::new(),
            &[allow("p1")],
            snap(&[sp]),
        )
        .unwrap();
        assert!(r.pending[0].1.sideband);
    }

    #[test]
    fn applied_answers_leave_pending_and_conflicts_are_flagged() {
        let p = input("p1", "permission", false);
        let q = input("q1", "ask_user_question", false);
        let mut applied = BTreeMap::new();
        applied.insert(
            (EXEC.to_string(), "p1".to_string()),
            entry_digest(&allow("p1")),
        );
        // The same answer again: nothing left to deliver, but not an error here.
        let r = reconcile(
            EXEC,
            &pending(&[p.clone(), q.clone()]),
            &applied,
            &[allow("p1"), pick("q1")],
            snap(&[]),
        )
        .unwrap();
        assert_eq!(
            (ids(&r.pending), r.conflict, r.next),
            (vec!["q1"], false, Ok(Next::Deliver))
        );
        // A different answer to an applied interrupt.
        let deny = entry("p1", json!({"decision": "deny"}));
        let r = reconcile(
            EXEC,
            &pending(std::slice::from_ref(&p)),
            &applied,
            std::slice::from_ref(&deny),
            snap(&[]),
        )
        .unwrap();
        assert!(r.conflict);
        assert_eq!(
            r.next,
            Err((Code::ResumeAlreadyApplied, Msg::ResumeAlreadyApplied))
        );
        // Another execution's digest does not count.
        let r = reconcile("exec-2", &pending(&[p]), &applied, &[deny], snap(&[])).unwrap();
        assert_eq!((r.conflict, r.next), (false, Ok(Next::Deliver)));
    }

    #[test]
    fn duplicates_and_terminal_snapshots() {
        let p = input("p1", "permission", false);
        assert_eq!(
            reconcile(
                EXEC,
                &pending(std::slice::from_ref(&p)),
                &BTreeMap::new(),
                &[allow("p1"), allow("p1")],
                snap(&[])
            ),
            Err((Code::IncompleteResume, Msg::ResumeDuplicateIds))
        );
        let terminal = Snapshot {
            inputs: &[],
            terminal: true,
            has_input_keys: false,
        };
        let r = reconcile(
            EXEC,
            &pending(&[p]),
            &BTreeMap::new(),
            &[allow("p1")],
            terminal,
        )
        .unwrap();
        assert!(r.pending.is_empty());
        assert_eq!(
            r.next,
            Err((Code::UnknownInterrupt, Msg::ResumeUnknownInterrupt))
        );
    }

    #[test]
    fn validation_table() {
        let q = input("q1", "ask_user_question", false);
        let p = input("p1", "permission", true);
        let pend = pending(&[q, p]);
        let cancelled = |id: &str| ResumeEntry {
            interrupt_id: id.into(),
            status: ResumeStatus::Cancelled,
            payload: None,
        };
        let a = validate(&[pick("q1"), cancelled("p1")], &pend, 0).unwrap();
        assert_eq!(
            a.iter()
                .map(|a| (a.id.as_str(), a.permission, a.sideband))
                .collect::<Vec<_>>(),
            [("q1", false, false), ("p1", true, true)]
        );
        assert_eq!(
            a[1].payload,
            Some(json!({"decision": "deny"})),
            "a cancelled permission is a denial"
        );
        assert_eq!(question_prompt(&a[0]).as_deref(), Some("Alpha"));
        let free = validate(&[entry("q1", json!({"freeText": "Beta"}))], &pend, 0).unwrap();
        assert_eq!(question_prompt(&free[0]).as_deref(), Some("Beta"));
        let missing = ResumeEntry {
            interrupt_id: "p1".into(),
            status: ResumeStatus::Resolved,
            payload: None,
        };
        assert_eq!(
            validate(&[missing], &pend, 0),
            Err((Code::ResumePayloadInvalid, Msg::ResumePayloadRequired))
        );
        assert_eq!(
            validate(&[entry("p1", json!({"decision": "maybe"}))], &pend, 0),
            Err((Code::ResumePayloadInvalid, Msg::ResumePayloadInvalid))
        );
        assert_eq!(
            validate(&[allow("gone")], &pend, 0),
            Err((Code::ResumeAlreadyApplied, Msg::ResumeAlreadyApplied))
        );
        let mut expiring = input("p2", "permission", false);
        expiring
            .value
            .insert("expiresAt".into(), "2020-01-01T00:00:00Z".into());
        let pend = pending(&[expiring]);
        assert_eq!(
            validate(&[allow("p2")], &pend, 1_700_000_000_000),
            Err((Code::ExecutionExpired, Msg::ExecutionExpired))
        );
        assert!(validate(&[allow("p2")], &pend, 1_500_000_000_000).is_ok());
    }
}
