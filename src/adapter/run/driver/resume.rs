//! The resume stages (reference §3.3): restore, snapshot, reconcile (pure, in
//! `adapter::reconcile`), validate, then deliver every answer and follow the kernel.

use serde_json::{Value, json};

use super::{BACKUP_NOT_READY_EN, Cleanup, Ending, Run, Stage, Stop};
use crate::a2a::client::{EventStream, Restore};
use crate::a2a::types::{Payload, TaskState};
use crate::adapter::rules::interrupts;
use crate::adapter::rules::reconcile::{self, Answer, Next, Snapshot};
use crate::adapter::state::upstream::permission_part;
use crate::agui::input::ResumeStatus;
use crate::catalog::Msg;
use crate::errors::Code;

/// JSON-RPC "task not found", also "Task … is not active" for a task that expects no
/// more input.
const TASK_NOT_ACTIVE: i64 = -32001;

impl Run<'_, '_> {
    #[inline(never)]
    pub(super) fn resume(&mut self) -> Stage<Ending> {
        self.run_started()?;
        self.mapper.reopen_pipeline_steps();
        self.flush()?;
        let entries = self.take_opening(|o| std::mem::take(&mut o.resume));
        let exec = self.execution_id.clone();
        let (task, pending_empty, session_id, cwd) = self
            .with_thread(|t| {
                (
                    t.doc.execution.task_id.clone(),
                    t.doc.execution.pending.is_empty(),
                    t.doc.session_id.clone(),
                    t.doc.cwd.clone(),
                )
            })
            .unwrap_or((None, true, None, String::new()));
        // 1. Nothing to resume.
        let Some(task) = task.filter(|_| !pending_empty) else {
            let all_applied = !entries.is_empty()
                && self
                    .with_thread(|t| {
                        entries.iter().all(|e| {
                            t.doc.applied.get(&(exec.clone(), e.interrupt_id.clone()))
                                == Some(&reconcile::entry_digest(e))
                        })
                    })
                    .unwrap_or(false);
            return Err(if all_applied {
                self.fail(
                    Code::ResumeAlreadyApplied,
                    Msg::ResumeAlreadyApplied,
                    Cleanup::Keep,
                )
            } else {
                self.fail(
                    Code::ExecutionLost,
                    Msg::ResumeTaskUnavailable,
                    Cleanup::Keep,
                )
            });
        };
        self.wait_for_previous_task()?;
        // 2. Restore a cold session.
        if let Some(sid) = &session_id {
            match self
                .session
                .ensure_restored(Some(&cwd), Some(sid), Some(&task))
            {
                Ok(Restore::Current | Restore::Restored) => {}
                // The reference keeps the interrupt pending here (a session backup may still
                // appear); only a task the kernel says it does not know ends the execution.
                Ok(Restore::NotFound) => {
                    return Err(self.fail(
                        Code::ExecutionLost,
                        Msg::ResumeSessionUnavailable,
                        Cleanup::Keep,
                    ));
                }
                // Bad ids, or a task the kernel does not know any more: GetTask tells which.
                Ok(Restore::Invalid) => {
                    return Err(match self.session.get_task(&task) {
                        Ok(Payload::Error(e)) if e.code == Some(TASK_NOT_ACTIVE) => self.fail(
                            Code::ExecutionLost,
                            Msg::ResumeSessionUnavailable,
                            Cleanup::Lost,
                        ),
                        Err(e) => self.a2a_err(&e, Cleanup::Keep),
                        Ok(_) => {
                            self.fail(Code::A2aUnavailable, Msg::A2aUnavailable, Cleanup::Keep)
                        }
                    });
                }
                Ok(Restore::NotReady(m)) => {
                    let text = match m {
                        Some(m) if m != BACKUP_NOT_READY_EN => m,
                        _ => Msg::SessionBackupNotReady.text(self.lang()).to_string(),
                    };
                    return Err(Stop::Fail(Code::SessionBackupNotReady, text, Cleanup::Keep));
                }
                Err(e) => return Err(self.a2a_err(&e, Cleanup::Keep)),
            }
        }
        // 3. The task snapshot must be this execution's task.
        let snap = match self.session.get_task(&task) {
            Ok(Payload::Event(e)) => e,
            Ok(Payload::Error(e)) if e.code == Some(-32001) => {
                return Err(self.fail(
                    Code::ExecutionLost,
                    Msg::ResumeTaskUnavailable,
                    Cleanup::Lost,
                ));
            }
            Ok(Payload::Error(_)) => {
                return Err(self.fail(Code::A2aUnavailable, Msg::A2aUnavailable, Cleanup::Keep));
            }
            Err(e) => return Err(self.a2a_err(&e, Cleanup::Keep)),
        };
        if snap.task_id().is_none() {
            return Err(self.identity_mismatch());
        }
        self.check_identity(&snap, &task)?;
        if let Some(sid) = snap.session_id().map(str::to_string) {
            match session_id.as_deref() {
                Some(k) if k != sid => {
                    return Err(self.fail(
                        Code::A2aProtocolError,
                        Msg::SessionIdentityChanged,
                        Cleanup::Keep,
                    ));
                }
                Some(_) => {}
                None => self.record_session(&sid)?,
            }
        }
        // 4. Project the snapshot without pipeline envelopes or status text.
        self.mapper.map(&snap, false, false);
        self.flush()?;
        // 5. Pipeline catch-up.
        let seq = self
            .with_thread(|t| t.doc.execution.pipeline_sequence)
            .unwrap_or(0);
        self.recover_pipeline(seq)?;
        // 6–11. Reconcile pending with the snapshot (pure), persisting the result first.
        let found = interrupts::inputs(&snap).map_err(|_| {
            self.fail(
                Code::A2aProtocolError,
                Msg::InterruptWithoutId,
                Cleanup::Keep,
            )
        })?;
        self.check_input_identity(&found).map_err(|s| match s {
            Stop::Fail(c, m, _) => Stop::Fail(c, m, Cleanup::Keep),
            other => other,
        })?;
        let view = Snapshot {
            inputs: &found,
            terminal: snap.state().as_ref().is_some_and(TaskState::is_terminal),
            has_input_keys: snap.iac().is_some_and(interrupts::has_input_keys),
        };
        let (pending, applied) = self
            .with_thread(|t| (t.doc.execution.pending.clone(), t.doc.applied.clone()))
            .unwrap_or_default();
        let r = reconcile::reconcile(&exec, &pending, &applied, &entries, view)
            .map_err(|(c, m)| self.fail(c, m, Cleanup::Keep))?;
        let persisted = self.persist(|t| t.doc.execution.pending = r.pending.clone());
        if r.conflict {
            return Err(self.fail(
                Code::ResumeAlreadyApplied,
                Msg::ResumeAlreadyApplied,
                Cleanup::Keep,
            ));
        }
        if persisted.is_err() {
            return Err(self.fail(
                Code::StatePersistenceFailed,
                Msg::PersistInterrupt,
                Cleanup::FailClosed,
            ));
        }
        match r.next.map_err(|(c, m)| self.fail(c, m, Cleanup::Keep))? {
            Next::Interrupt => return self.interrupt_end(),
            Next::Deliver => {}
        }
        // 12. Validate every answer before any side effect.
        let answers =
            reconcile::validate(&entries, &r.pending, self.sh.env.now_ms()).map_err(|(c, m)| {
                let cleanup = if c == Code::ExecutionExpired {
                    Cleanup::FailClosed
                } else {
                    Cleanup::Keep
                };
                self.fail(c, m, cleanup)
            })?;
        self.apply(answers)
    }

    /// Whether this same answer was sent before without its acceptance being seen.
    fn in_doubt(&self, a: &Answer) -> bool {
        let key = (self.execution_id.clone(), a.id.clone());
        self.with_thread(|t| t.doc.in_doubt.get(&key) == Some(&a.digest))
            .unwrap_or(false)
    }

    /// Durably note (before sending) or clear (after a refusal) an answer in flight: a stop
    /// in between leaves it in doubt for the retry to reconcile.
    fn mark_in_doubt(&mut self, a: &Answer, sending: bool) -> Stage<()> {
        let key = (self.execution_id.clone(), a.id.clone());
        self.persist(|t| {
            if sending {
                t.doc.in_doubt.insert(key.clone(), a.digest.clone());
            } else {
                t.doc.in_doubt.remove(&key);
            }
        })
        .map_err(|_| {
            self.fail(
                Code::StatePersistenceFailed,
                Msg::PersistAcceptedResponse,
                Cleanup::Keep,
            )
        })
    }

    /// Record one delivered answer (applied digest, no longer pending, not in doubt), durably.
    fn commit_answer(&mut self, a: &Answer) -> Stage<()> {
        let exec = self.execution_id.clone();
        self.persist(|t| {
            t.doc.in_doubt.remove(&(exec.clone(), a.id.clone()));
            t.doc.applied.insert((exec, a.id.clone()), a.digest.clone());
            t.doc.execution.pending_remove(&a.id);
        })
        .map_err(|_| {
            self.fail(
                Code::StatePersistenceFailed,
                Msg::PersistAcceptedResponse,
                Cleanup::FailClosed,
            )
        })
    }

    fn apply(&mut self, answers: Vec<Answer>) -> Stage<Ending> {
        let task = self.task_id().unwrap_or_default();
        // A cancelled question cancels the whole execution.
        if answers
            .iter()
            .any(|a| a.status == ResumeStatus::Cancelled && !a.permission && !a.resource)
        {
            let _ = self.session.cancel_task(&task);
            self.mark_terminal(true);
            self.decide(crate::life::Event::OwnEnd);
            return Ok(Ending::Error(
                Code::Cancelled,
                Msg::CancelledByResponse.text(self.lang()).into(),
            ));
        }
        // Every question needs its text before anything is sent.
        let mut prompts = Vec::with_capacity(answers.len());
        for a in &answers {
            let prompt = if a.permission {
                String::new()
            } else if a.resource {
                resource_text(a)
            } else {
                reconcile::question_prompt(a).ok_or_else(|| {
                    self.fail(
                        Code::ResumePayloadInvalid,
                        Msg::ResumeNoAnswer,
                        Cleanup::Keep,
                    )
                })?
            };
            prompts.push(prompt);
        }
        let seq = self
            .with_thread(|t| t.doc.execution.pipeline_sequence)
            .unwrap_or(0);
        if answers.iter().any(|a| a.permission) && seq > 0 {
            self.catch_up = Some(seq);
        }
        if answers.iter().all(|a| a.permission && a.sideband) {
            return self.apply_sideband(answers, &task);
        }
        let questions = answers
            .iter()
            .filter(|a| !a.permission && !a.resource)
            .count();
        let n = answers.len();
        let mut last_state: Option<TaskState> = None;
        let mut interrupted = false;
        let mut delivered_before = false;
        for (i, (a, prompt)) in answers.into_iter().zip(prompts).enumerate() {
            let (message_id, parts) = if a.permission || a.resource {
                let part = if a.permission {
                    answer_part(&task, &a)
                } else {
                    json!({"text": prompt.clone()})
                };
                (
                    format!("agui-resume-{}-{}", self.a.run_id, a.id),
                    vec![part],
                )
            } else {
                let id = if questions == 1 {
                    format!("agui-resume-{}", self.a.run_id)
                } else {
                    format!("agui-resume-{}-{}", self.a.run_id, a.id)
                };
                (id, vec![json!({"text": prompt.clone()})])
            };
            let mut params = self.message(&message_id, parts, Some(&task));
            if a.resource {
                let payload = a.payload.clone().unwrap_or(Value::Null);
                let response = interrupts::resource_response(&a.id, &a.value, &task, &payload);
                if let Some(iac) = params
                    .pointer_mut("/message/metadata/iac_code")
                    .and_then(Value::as_object_mut)
                {
                    iac.insert("inputResponse".into(), response);
                }
            }
            // Sent before: a stop (SIGTERM, a crash) came while the kernel's answer was awaited.
            let retried = self.in_doubt(&a);
            self.mark_in_doubt(&a, true)?;
            let mut st = self
                .session
                .send_streaming_message(params)
                .map_err(|e| self.a2a_err(&e, Cleanup::Keep))?;
            let first = match st.next_payload() {
                Ok(Some(Payload::Event(e))) => e,
                // The kernel no longer expects this answer, and the same answer went out before
                // without its acceptance being seen: that first delivery was accepted. Record
                // it and show where the task went, instead of failing (or sending it again).
                Ok(Some(Payload::Error(e))) if retried && e.code == Some(TASK_NOT_ACTIVE) => {
                    log::info!(
                        "run {}: the kernel had the answer to {} already",
                        self.a.run_id,
                        a.id
                    );
                    drop(st);
                    self.commit_answer(&a)?;
                    self.resume_accepted = true;
                    delivered_before = true;
                    continue;
                }
                Ok(Some(Payload::Error(e))) => {
                    self.mark_in_doubt(&a, false)?;
                    return Err(self.rejected_answer(&a, &e));
                }
                Ok(None) => {
                    self.mark_in_doubt(&a, false)?;
                    let m = if a.permission {
                        Msg::PermissionResponseNotAccepted
                    } else {
                        Msg::InterruptResponseNotAccepted
                    };
                    return Err(self.fail(Code::A2aUnavailable, m, Cleanup::Keep));
                }
                Err(e) => return Err(self.a2a_err(&e, Cleanup::Keep)),
            };
            self.check_identity(&first, &task)?;
            self.commit_answer(&a)?;
            self.resume_accepted = true;
            if !a.permission
                && !a.resource
                && let Some(tool) = a
                    .value
                    .get("toolUseId")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            {
                self.queued_results.push((tool.to_string(), prompt));
            }
            let last = i + 1 == n;
            // The first event is part of the turn: project it, then the rest of the stream.
            let pre = EventStream::from_payloads(vec![Payload::Event(first)]);
            let mut chained = Chain {
                first: Some(pre),
                rest: st,
            };
            let (state, committed) = self.pump_chain(&mut chained, last)?;
            interrupted |= committed;
            if let Some(s) = state {
                let terminal = s.is_terminal();
                last_state = Some(s);
                if terminal {
                    break;
                }
            }
            if committed && last {
                return self.interrupt_end();
            }
        }
        // An input seen while answering may be one this same resume answered later (the
        // kernel repeats a waiting permission until it gets it): only what is still pending
        // makes an interrupt; with nothing pending the run follows the kernel.
        if interrupted && !self.pending_empty() {
            return self.interrupt_end();
        }
        if delivered_before {
            self.session_event()?;
        }
        match last_state {
            Some(s) if s.is_stop() => self.end_for_state(Some(s)),
            _ => self.follow(&task),
        }
    }

    fn pump_chain(&mut self, c: &mut Chain, last: bool) -> Stage<(Option<TaskState>, bool)> {
        if let Some(mut first) = c.first.take() {
            let (s1, i1) = self.pump(&mut first, last)?;
            if i1 && last {
                return Ok((s1, true));
            }
            if s1.as_ref().is_some_and(TaskState::is_stop) {
                return Ok((s1, i1));
            }
            let (s2, i2) = self.pump(&mut c.rest, last)?;
            return Ok((s2.or(s1), i1 || i2));
        }
        self.pump(&mut c.rest, last)
    }

    /// The kernel's refusal of one answer. A resource selection is refused from inside the
    /// kernel's executor, and a2a-sdk then fails the task (seen with iac-code 0.16.0: the
    /// next answer gets "Task … is in terminal state"): the execution ends with the
    /// kernel's reason instead of an interrupt that can no longer be answered.
    fn rejected_answer(&self, a: &Answer, e: &crate::a2a::types::RpcError) -> Stop {
        if a.resource && e.code == Some(super::INVALID_PARAMS) {
            let text = Msg::SelectionRejectedTaskEnded
                .text(self.lang())
                .replace("{reason}", e.message.trim());
            return Stop::Fail(Code::ResumeRejected, text, Cleanup::Lost);
        }
        self.rejected(e)
    }

    /// Sideband permissions: non-streaming sends, then the task snapshot and a subscription.
    fn apply_sideband(&mut self, answers: Vec<Answer>, task: &str) -> Stage<Ending> {
        for a in &answers {
            let parts = vec![answer_part(task, a)];
            let params = self.message(&format!("agui-resume-{}", a.id), parts, Some(task));
            match self.session.send_message(params) {
                Ok(Payload::Error(e)) => return Err(self.rejected(&e)),
                Ok(Payload::Event(_)) => self.commit_answer(a)?,
                Err(e) => return Err(self.a2a_err(&e, Cleanup::Keep)),
            }
        }
        self.resume_accepted = true;
        self.session_event()?;
        self.follow(task)
    }

    /// After the answers: the task snapshot, then a subscription until a stop state.
    fn follow(&mut self, task: &str) -> Stage<Ending> {
        let snap = match self.session.get_task(task) {
            Ok(Payload::Event(e)) => e,
            Ok(Payload::Error(_)) => {
                return Err(self.fail(
                    Code::A2aUnavailable,
                    Msg::A2aUnavailable,
                    Cleanup::CancelIfIdle,
                ));
            }
            Err(e) => return Err(self.a2a_err(&e, Cleanup::CancelIfIdle)),
        };
        let mut one = EventStream::from_payloads(vec![Payload::Event(snap)]);
        let (state, committed) = self.pump(&mut one, true)?;
        if committed {
            return self.interrupt_end();
        }
        if state.as_ref().is_some_and(TaskState::is_stop) {
            return self.end_for_state(state);
        }
        let mut st = self
            .session
            .subscribe(task)
            .map_err(|e| self.a2a_err(&e, Cleanup::CancelIfIdle))?;
        let (state, committed) = match self.pump(&mut st, true) {
            Ok(x) => x,
            // A subscription that fails: the snapshot decides (it must be in a stop state).
            Err(Stop::Fail(..)) => (None, false),
            Err(s) => return Err(s),
        };
        drop(st);
        if committed {
            return self.interrupt_end();
        }
        if state.as_ref().is_some_and(TaskState::is_stop) {
            return self.end_for_state(state);
        }
        match self.session.get_task(task) {
            Ok(Payload::Event(e)) => {
                let mut one = EventStream::from_payloads(vec![Payload::Event(e)]);
                let (state, committed) = self.pump(&mut one, true)?;
                if committed {
                    return self.interrupt_end();
                }
                self.end_for_state(state)
            }
            _ => self.end_for_state(None),
        }
    }

    // ------------------------------------------------------------------ guidance (§3.5)
}

/// The already-read first event of an answer stream followed by the rest of it.
struct Chain {
    first: Option<EventStream>,
    rest: EventStream,
}

/// The text part beside a resource selection's `inputResponse` (the kernel reads only the
/// metadata; a message needs a part): the chosen label or value, or `canceled`.
fn resource_text(a: &Answer) -> String {
    let p = a.payload.as_ref().unwrap_or(&Value::Null);
    ["label", "value"]
        .iter()
        .filter_map(|k| p.get(*k).and_then(Value::as_str))
        .find(|s| !s.is_empty())
        .unwrap_or("canceled")
        .to_string()
}

/// A permission answer as the kernel's data part.
fn answer_part(task: &str, a: &Answer) -> Value {
    let decision = a
        .payload
        .as_ref()
        .and_then(|p| p.get("decision"))
        .cloned()
        .unwrap_or(Value::Null);
    permission_part(task, &a.id, a.value.get("toolUseId"), decision)
}
