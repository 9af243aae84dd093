//! New turns and guidance, the event pump shared with resumes, and interrupts found in a
//! stream (reference §5.2, §3.5).

use std::collections::HashSet;

use serde_json::Value;

use super::{Cleanup, Ending, Run, Stage};
use crate::a2a::client::EventStream;
use crate::a2a::types::{A2aEvent, Payload, TaskState};
use crate::adapter::audited;
use crate::adapter::rules::admission::RunKind;
use crate::adapter::rules::identity::{self, Known};
use crate::adapter::rules::interrupts::{self, FoundInput};
use crate::adapter::rules::reconcile::merge_inputs;
use crate::catalog::Msg;
use crate::errors::Code;
use crate::life::{Effect, Event as LifeEvent};

impl Run<'_, '_> {
    #[inline(never)]
    pub(super) fn new_turn(&mut self) -> Stage<Ending> {
        let st = self.open_turn()?;
        self.consume(st)
    }

    /// Everything of a new turn before its stream is read, in a frame that is gone by then.
    #[inline(never)]
    fn open_turn(&mut self) -> Stage<EventStream> {
        self.run_started()?;
        self.mapper.reopen_pipeline_steps();
        self.flush()?;
        let Some(user) = self.take_opening(|o| o.user.take()) else {
            return Err(self.fail(Code::InvalidInput, Msg::UserMessageRequired, Cleanup::Keep));
        };
        self.wait_for_previous_task()?;
        let params = self.message(&user.message_id, user.parts, None);
        self.session
            .send_streaming_message(params)
            .map_err(|e| self.a2a_err(&e, Cleanup::CancelIfIdle))
    }

    /// Identity rules for every event (§5.2, §10 of the A2A notes); new ids are persisted
    /// before anything reveals them.
    #[inline(never)]
    pub(super) fn observe(&mut self, ev: &A2aEvent) -> Stage<()> {
        if let Some(c) = ev.context_id()
            && c != self.context_id
        {
            return Err(self.fail(
                Code::A2aProtocolError,
                Msg::ContextIdentityChanged,
                Cleanup::CancelIfIdle,
            ));
        }
        if let Some(tid) = ev.task_id() {
            // The run's task as it knows it: noted, or named in its cell (saved, or the
            // execution's own for a resume) — not the state file's, which the cancel route
            // may have retired meanwhile.
            let known = self.unsaved_task.as_deref().or(self.a.cell.task_id());
            match Known::of(known, tid) {
                Known::Same => {}
                Known::Other => {
                    return Err(self.fail(
                        Code::A2aProtocolError,
                        Msg::TaskIdentityChanged,
                        Cleanup::CancelIfIdle,
                    ));
                }
                Known::Unset => self.note_task(tid),
            }
        }
        if let Some(sid) = ev.session_id() {
            let known = self.with_thread(|t| Known::of(t.doc.session_id.as_deref(), sid));
            match known.unwrap_or(Known::Unset) {
                Known::Same => {}
                // A new turn on a context whose session the kernel lost (it restarted without
                // it): the kernel made a new session. The thread goes on with it, and the
                // client is told. A resume cannot: its paused task belonged to the old one.
                Known::Other if self.a.kind != RunKind::Resume => {
                    let old = self.with_thread(|t| t.doc.session_id.clone()).flatten();
                    self.record_session(sid)?;
                    self.session_reset(old.as_deref(), sid)?;
                }
                Known::Other => {
                    return Err(self.fail(
                        Code::A2aProtocolError,
                        Msg::SessionIdentityChanged,
                        Cleanup::CancelIfIdle,
                    ));
                }
                Known::Unset => self.record_session(sid)?,
            }
        }
        Ok(())
    }

    /// A task id seen for the first time: saved with the next save or before anything could
    /// reveal it (`save_task`). The kernel names the session in the frame after the task's,
    /// so the two usually take one save (two fsyncs fewer on a thread's first turn).
    fn note_task(&mut self, tid: &str) {
        self.wire_task = Some(tid.to_string());
        self.unsaved_task = Some(tid.to_string());
        self.sh.point("run.task_noted");
    }

    /// Save the task id noted by `note_task` unless a save took it already (never into an
    /// execution the cancel route retired meanwhile), then tell the run's cell the task is
    /// named: if a Stop was saved first, the table says to cancel it now (and the cell cuts
    /// the upstream); a Stop that comes later finds it named and cancels it itself.
    #[inline(never)]
    pub(super) fn save_task(&mut self) -> Stage<()> {
        let Some(tid) = self.unsaved_task.as_deref() else {
            return Ok(());
        };
        let saved = self
            .with_thread(|t| t.doc.execution.task_id.as_deref() == Some(tid))
            .unwrap_or(false);
        if !saved {
            // `persist` writes the noted id (into this execution only, while it is live).
            self.persist(|_| {}).map_err(|_| {
                self.fail(
                    Code::StatePersistenceFailed,
                    Msg::PersistExecution,
                    Cleanup::FailClosed,
                )
            })?;
        }
        let Some(tid) = self.unsaved_task.take() else {
            return Ok(());
        };
        if self.a.cell.name_task(&tid).has(Effect::CancelTask) {
            // The Stop came first: its promise is carried out here. The next turn waits
            // until the kernel confirmed (`winddown`).
            let _stopping = self.sh.wind_downs.begin(&self.context_id);
            if let Err(e) = self.sh.kernel.session().cancel_task(&tid) {
                log::warn!("run {}: cancelling the task failed: {e}", self.a.run_id);
            }
        }
        self.sh.point("run.task_saved");
        Ok(())
    }

    /// Inputs of an event that are not yet answered in this execution.
    #[inline(never)]
    pub(super) fn new_inputs(&self, ev: &A2aEvent) -> Stage<Vec<FoundInput>> {
        if !ev.iac().is_some_and(|i| {
            interrupts::has_input_keys(i)
                || i.contains_key("pipeline")
                || i.contains_key("pipelineBatch")
        }) {
            return Ok(Vec::new());
        }
        let found = interrupts::inputs_in(ev, &self.a.dialect).map_err(|_| {
            self.fail(
                Code::A2aProtocolError,
                Msg::InterruptWithoutId,
                Cleanup::CancelIfIdle,
            )
        })?;
        let applied: HashSet<String> = self
            .with_thread(|t| {
                t.doc
                    .applied
                    .keys()
                    .filter(|(e, _)| *e == self.execution_id)
                    .map(|(_, i)| i.clone())
                    .collect()
            })
            .unwrap_or_default();
        Ok(found
            .into_iter()
            .filter(|f| !applied.contains(&f.id))
            .collect())
    }

    pub(super) fn check_input_identity(&self, inputs: &[FoundInput]) -> Stage<()> {
        identity::check_inputs(inputs, self.task_id().as_deref(), &self.context_id)
            .map_err(|m| self.fail(Code::A2aProtocolError, m, Cleanup::CancelIfIdle))
    }

    /// Merge new inputs into pending (existing entries kept; sideband only upgraded) and
    /// persist them before anything is revealed.
    #[inline(never)]
    pub(super) fn commit_inputs(&mut self, inputs: Vec<FoundInput>) -> Stage<()> {
        self.check_input_identity(&inputs)?;
        self.mapper.finalize_text_snapshots();
        self.persist(|t| merge_inputs(&mut t.doc.execution.pending, inputs))
            .map_err(|_| {
                self.fail(
                    Code::StatePersistenceFailed,
                    Msg::PersistInterrupt,
                    Cleanup::FailClosed,
                )
            })
    }

    pub(super) fn pending_interrupts(&self) -> Vec<Value> {
        self.with_thread(|t| interrupts::pending(&t.doc.execution, &self.a.dialect))
            .unwrap_or_default()
    }

    #[inline(never)]
    pub(super) fn recover_pipeline(&mut self, after: i64) -> Stage<()> {
        let Some(task) = self.task_id() else {
            return Ok(());
        };
        match self.session.pipeline_state(&task, after) {
            Ok(Some(state)) => {
                self.mapper.pipeline_recovery(&state);
                self.flush()
            }
            Ok(None) => Ok(()),
            Err(e) => Err(self.a2a_err(&e, Cleanup::Keep)),
        }
    }

    /// Read a new turn's stream to its end, projecting it: the first committed interrupt
    /// ends the run, otherwise the last task state decides (`end_for_state`).
    pub(super) fn consume(&mut self, mut st: EventStream) -> Stage<Ending> {
        let (state, interrupted) = self.pump(&mut st, true)?;
        drop(st);
        if interrupted {
            return self.interrupt_end();
        }
        self.end_for_state(state)
    }

    /// The core event loop; returns the last state and whether an interrupt was committed.
    /// `last` is false while more resume answers remain to be delivered after this stream:
    /// new inputs are then committed but the stream is read on to its stop state.
    pub(super) fn pump(
        &mut self,
        st: &mut EventStream,
        last: bool,
    ) -> Stage<(Option<TaskState>, bool)> {
        self.stream.hold(true);
        let r = self.pump_held(st, last);
        self.stream.hold(false);
        r
    }

    /// `pump` with events held between upstream reads: they reach the loop when the next
    /// payload would need a read (or the queue is full, or the pump ends).
    fn pump_held(&mut self, st: &mut EventStream, last: bool) -> Stage<(Option<TaskState>, bool)> {
        let mut state: Option<TaskState> = None;
        let mut committed = false;
        loop {
            if !st.has_ready() {
                // Nothing more in this burst: the task id is durable before a read that waits,
                // unless the kernel is about to name the thread's first session (its next
                // frame, at once): then one save takes both.
                if self.unsaved_task.is_some()
                    && self
                        .with_thread(|t| t.doc.session_id.is_some())
                        .unwrap_or(true)
                {
                    self.save_task()?;
                }
                self.mapper.release_spare();
                // A large event's memory goes back before a wait for a client behind.
                st.settle_gate();
                self.stream.before_read();
            }
            let p = match st.next_payload() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return Err(self.a2a_err(&e, Cleanup::CancelIfIdle)),
            };
            let ev = match p {
                Payload::Event(e) => e,
                // REC: a JSON-RPC error is never read as a task.
                Payload::Error(e) => {
                    crate::metrics::M.upstream_errors.inc("rpc_error");
                    log::warn!(
                        "run {}: kernel error {:?} {}",
                        self.a.run_id,
                        e.code,
                        e.message
                    );
                    return Err(self.fail(
                        Code::A2aUnavailable,
                        Msg::A2aUnavailable,
                        Cleanup::CancelIfIdle,
                    ));
                }
            };
            self.on_event(&ev)?;
            let new = self.new_inputs(&ev)?;
            if !new.is_empty() {
                if let Some(r) = self.catch_up.take() {
                    self.recover_pipeline(r)?;
                }
                self.commit_inputs(new)?;
                committed = true;
                if last {
                    return Ok((state, true));
                }
            }
            if let Some(s) = ev.state() {
                let stop = s.is_stop();
                state = Some(s);
                if stop {
                    break;
                }
            }
        }
        Ok((state, committed))
    }

    /// Identity checks, the session event, queued results, projection. A frame of its own:
    /// not on the stack while the pump reads.
    #[inline(never)]
    pub(super) fn on_event(&mut self, ev: &A2aEvent) -> Stage<()> {
        self.observe(ev)?;
        let has_ids = self
            .with_thread(|t| t.doc.execution.task_id.is_some() && t.doc.session_id.is_some())
            == Some(true);
        if self.resume_accepted || (self.a.kind != RunKind::Resume && has_ids) {
            self.session_event()?;
        }
        for (id, content) in std::mem::take(&mut self.queued_results) {
            self.mapper.resolved_tool_result(&id, &content);
        }
        self.mapper.map(ev, true, true);
        self.flush()?;
        Ok(())
    }

    /// The interrupt is committed: the run's end is its own from here (a client leaving now
    /// cancels nothing; a Stop answers `already_terminal`).
    pub(super) fn interrupt_end(&mut self) -> Stage<Ending> {
        self.decide(LifeEvent::OwnEnd);
        Ok(Ending::Interrupt(self.pending_interrupts()))
    }

    pub(super) fn end_for_state(&mut self, state: Option<TaskState>) -> Stage<Ending> {
        if let Some(r) = self.catch_up.take() {
            self.recover_pipeline(r)?;
        }
        let cancelled = self.cancelled();
        Ok(match state {
            Some(TaskState::Completed | TaskState::InputRequired) => Ending::Success,
            Some(TaskState::Canceled) => {
                Ending::Error(Code::Cancelled, Msg::Cancelled.text(self.lang()).into())
            }
            _ if cancelled => {
                Ending::Error(Code::Cancelled, Msg::Cancelled.text(self.lang()).into())
            }
            Some(s) if s.is_failure() && self.previous_stopping => Ending::Error(
                Code::PreviousRunStillStopping,
                Msg::PreviousRunStillStopping.text(self.lang()).into(),
            ),
            Some(s) if s.is_failure() => Ending::Error(
                Code::A2aExecutionFailed,
                Msg::ExecutionFailed.text(self.lang()).into(),
            ),
            _ => {
                // The stream ended while the task was still running: nobody follows it any
                // more, so cancel it (the reference leaves it running).
                if let Some(t) = self.task_id() {
                    let _ = self.sh.kernel.session().cancel_task(&t);
                }
                Ending::Error(
                    Code::A2aExecutionFailed,
                    Msg::ExecutionFailed.text(self.lang()).into(),
                )
            }
        })
    }

    // ------------------------------------------------------------------ resume (§3.3)

    #[inline(never)]
    pub(super) fn guidance(&mut self) -> Stage<Ending> {
        self.run_started()?;
        let Some(user) = self.take_opening(|o| o.user.take()) else {
            return Err(self.fail(Code::InvalidInput, Msg::UserMessageRequired, Cleanup::Keep));
        };
        self.wait_for_previous_task()?;
        let task = self.task_id().unwrap_or_default();
        let params = self.message(&user.message_id, user.parts, Some(&task));
        let mut st = self
            .session
            .send_streaming_message(params)
            .map_err(|e| self.a2a_err(&e, Cleanup::Keep))?;
        loop {
            let ev = match st.next_payload() {
                Ok(Some(Payload::Event(e))) => e,
                Ok(Some(Payload::Error(e))) => return Err(self.rejected(&e)),
                Ok(None) => break,
                Err(e) => return Err(self.a2a_err(&e, Cleanup::Keep)),
            };
            self.check_identity(&ev, &task)?;
            match ev.state() {
                Some(s) if s.is_failure() => {
                    return Err(self.fail(
                        Code::A2aExecutionFailed,
                        Msg::ExecutionFailed,
                        Cleanup::Keep,
                    ));
                }
                Some(TaskState::Canceled) => {
                    return Err(self.fail(Code::Cancelled, Msg::Cancelled, Cleanup::Keep));
                }
                _ => {}
            }
        }
        self.decide(LifeEvent::OwnEnd);
        Ok(Ending::Success)
    }
}

impl Run<'_, '_> {
    /// The client left (reference §8.2).
    #[inline(never)]
    pub(super) fn on_disconnect(&mut self) {
        log::info!("run {}: client disconnected", self.a.run_id);
        // Subscribers of the replay log still learn how the run ended.
        // RUN_ERROR in both dialects: the client, not the user, ended it.
        let left = self.stamp(crate::agui::events::Event::run_error(
            Code::Cancelled,
            Msg::RunClientLeft.text(self.lang()),
            &self.a.thread.id,
            &self.a.run_id,
            Vec::new(),
            self.a.dialect.error_ids,
        ));
        self.stream.log_terminal(&left.to_json());
        self.stream
            .note_outcome(&self.execution_id, "client_disconnected");
        crate::metrics::M.runs.inc("client_disconnected");
        let used = crate::agui::events::RunUsage::of(&self.mapper.usage());
        let outcome = "client_disconnected";
        audited::run_end(
            self.sh,
            (&self.a.origin, &self.a.thread, &self.a.run_id),
            &self.execution_id,
            outcome,
            used,
        );
        // Nothing decided: the run abandons its task (unless an interrupt waits for an
        // answer, or it is guidance). A decided end, its own or a saved Stop's, is kept.
        let abandon = self.decide(LifeEvent::Departed).has(Effect::AbandonTask);
        let cancel = abandon && self.a.kind != RunKind::Guidance && self.pending_empty();
        let task = cancel.then(|| self.task_id()).flatten();
        // The next turn on this thread waits until the kernel confirmed the stop.
        let stopping = task
            .as_ref()
            .map(|_| self.sh.wind_downs.begin(&self.context_id));
        self.record_turn();
        // Release first (reference §8.2): the kernel may take a while to confirm the cancel,
        // and the thread must not look busy meanwhile.
        self.release();
        if cancel {
            self.mark_terminal(false);
            if let Some(t) = task
                && let Err(e) = self.sh.kernel.session().cancel_task(&t)
            {
                log::warn!("run {}: cancelling the task failed: {e}", self.a.run_id);
            }
        }
        drop(stopping);
    }
}
