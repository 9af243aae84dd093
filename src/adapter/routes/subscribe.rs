//! Re-attach: `POST /extensions/iac-code/v1/executions/{executionId}/subscribe`.
//!
//! A subscriber only observes: it never owns, resumes or cancels the run, and its disconnect
//! changes nothing. Two modes:
//! - **replay** — the run's replay log still holds event `afterSequence + 1`: the events after
//!   it byte for byte (same ids), then the live tail, then the run's one terminal event;
//! - **snapshot** — otherwise: a fresh observation (ids from 0) of the execution through the
//!   kernel's `GetTask`/`SubscribeToTask`, ending like a run (one terminal event).
//!
//! Dialect (issue 57): a replay is the run's own events, so it is framed as its run was; a
//! snapshot is built for this subscriber, in the dialect it declares, else its run's (the
//! log's, or the thread's latest run's while the server remembers it), else
//! `--agui-protocol`'s.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::a2a::A2aError;
use crate::a2a::types::{A2aEvent, Payload, TaskState};
use crate::adapter::rules::interrupts;
use crate::adapter::rules::projection::Mapper;
use crate::adapter::run::ending::{Ending, SessionFacts};
use crate::adapter::state::replay::{Read, RunLog};
use crate::adapter::state::shared::Shared;
use crate::agui::dialect::Dialect;
use crate::agui::events::{Event, Stamped};
use crate::app::{RunStream, SubscribeRequest};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::limits;
use crate::server::job::Stopped;
use crate::sync::lock;

/// JSON-RPC "task not found" (also "Task … is not active" on `SubscribeToTask`).
const TASK_NOT_FOUND: i64 = -32001;

/// What the thread file says about the execution.
struct Facts {
    context_id: String,
    session_id: Option<String>,
    task_id: Option<String>,
    ros: String,
    pending: Vec<Value>,
    current: bool,
    /// The dialect a snapshot is built in.
    dialect: Dialect,
}

pub(crate) fn subscribe(sh: &Shared, req: SubscribeRequest, stream: &mut RunStream<'_>) {
    let lang = req.lang;
    stream.set_dialect(req.declared.dialect_or(sh.default_dialect));
    let err = |code, msg: Msg| ApiError::new(code, msg).response(lang);
    let key = crate::principal::ThreadKey::new(&req.caller, &req.thread_id);
    let log = sh.retention.replay.get(&key, &req.run_id);
    let facts = match facts(sh, &key, &req, log.as_deref()) {
        Ok(f) => f,
        Err((code, msg)) => return stream.reject(err(code, msg)),
    };
    // The first id to send: `afterSequence` ≥ −1 was checked, so this never wraps.
    let from = req
        .after_sequence
        .map(|a| u64::try_from(a.saturating_add(1)).unwrap_or(0));
    let held = match (from, &log) {
        (Some(f), Some(l)) if l.holds(f) => Some((l.clone(), f)),
        _ => None,
    };
    if let Some((log, from)) = held {
        crate::metrics::M.subscriptions.inc("replay");
        return replay(sh, &log, from, stream, lang);
    }
    let reason = match (req.after_sequence, &log) {
        (None, _) => "no-sequence",
        (Some(_), Some(_)) => "sequence-not-held",
        (Some(_), None) => "run-not-in-log",
    };
    // A finished turn (no task, nothing pending, or no longer the thread's execution) has
    // nothing for the kernel to observe, but its log says how it went: without a position,
    // every event it still holds (the whole run unless it overflowed); with a position it
    // does not hold (past the end, or overflowed), the terminal event.
    let finished = facts
        .as_ref()
        .is_none_or(|f| !f.current || (f.pending.is_empty() && f.task_id.is_none()));
    if finished && let Some(l) = log.filter(|l| l.ended()) {
        let (first, next) = l.span();
        crate::metrics::M.subscriptions.inc("replay");
        let start = if req.after_sequence.is_none() {
            first
        } else {
            next
        };
        return replay(sh, &l, start, stream, lang);
    }
    let Some(facts) = facts.filter(|f| f.current) else {
        return stream.reject(err(Code::ExecutionNotFound, Msg::ExecutionNotFound));
    };
    stream.set_dialect(facts.dialect);
    crate::metrics::M.subscriptions.inc("snapshot");
    Snapshot {
        sh,
        req: &req,
        facts,
        reason,
    }
    .run(stream);
}

/// Identity checks (404 / 409) against the thread file and the run's log. `Ok(None)`: the
/// execution is known only from the log.
fn facts(
    sh: &Shared,
    key: &crate::principal::ThreadKey,
    req: &SubscribeRequest,
    log: Option<&RunLog>,
) -> Result<Option<Facts>, (Code, Msg)> {
    let mismatch = (
        Code::ExecutionIdentityMismatch,
        Msg::ExecutionIdentityMismatch,
    );
    let not_found = (Code::ExecutionNotFound, Msg::ExecutionNotFound);
    let slot = sh.registry.slot(key).map_err(|e| {
        log::error!("thread {}: {e}", req.thread_id);
        (Code::StateUnavailable, Msg::StateUnavailable)
    })?;
    let g = lock(&slot);
    let Some(t) = g.as_ref() else {
        drop(g);
        sh.registry.forget_if_absent(key);
        return Err(not_found);
    };
    let doc = &t.doc;
    let current = doc.execution.execution_id == req.execution_id;
    let logged = log.is_some_and(|l| l.execution_id == req.execution_id);
    if !current && !logged && !doc.terminal.contains(&req.execution_id) {
        // Another principal's execution is as unknown as one that does not exist.
        return Err(match sh.registry.live_thread(&req.execution_id) {
            Some(k) if k.caller == key.caller => mismatch,
            _ => not_found,
        });
    }
    if !doc.run_digests.contains_key(&req.run_id) && log.is_none() {
        return Err(mismatch);
    }
    if let Some(l) = log
        && (l.execution_id != req.execution_id || l.ros_invocation_id != req.ros_invocation_id)
    {
        return Err(mismatch);
    }
    if current && doc.execution.ros_invocation_id != req.ros_invocation_id {
        return Err(mismatch);
    }
    if !current {
        return Ok(None);
    }
    let dialect = req
        .declared
        .dialect()
        .or(log.map(|l| l.dialect))
        .or(t.dialect)
        .unwrap_or(sh.default_dialect);
    let pending = interrupts::pending(&doc.execution, &dialect);
    Ok(Some(Facts {
        context_id: doc.context_id.clone(),
        session_id: doc.session_id.clone(),
        task_id: doc.execution.task_id.clone(),
        ros: doc.execution.ros_invocation_id.clone(),
        pending,
        current,
        dialect,
    }))
}

fn replay(sh: &Shared, log: &Arc<RunLog>, from: u64, stream: &mut RunStream<'_>, lang: Lang) {
    // The run's events as they were sent; an ending written here speaks their dialect.
    stream.set_dialect(log.dialect);
    if !log.attach() {
        return stream.reject(ApiError::new(Code::ServerBusy, Msg::ServerBusy).response(lang));
    }
    // A run detached from its client is adopted: it outlives its grace; one whose client is
    // still there is adopted when it leaves (the cell's table, in either order).
    if let Some(cell) = sh.run_cell(&log.execution_id) {
        cell.send(crate::life::Event::Subscribed);
    }
    struct Detach<'l>(&'l RunLog);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            self.0.detach();
        }
    }
    let _attached = Detach(log);
    if stream.start().is_err() {
        return;
    }
    let mut next = from;
    let mut shutdown_deadline = None;
    loop {
        if stream.client_gone() {
            return;
        }
        // The drain's grace ended: the producer is ending the run with SERVER_SHUTTING_DOWN,
        // which reaches the log in a moment. Pass it on, so a subscriber ends as the run did;
        // only if it does not come, end with the same code here.
        if stream.shutting_down() {
            let deadline = *shutdown_deadline
                .get_or_insert_with(|| log.now() + limits::SUBSCRIBER_SHUTDOWN_TAIL);
            if log.now() >= deadline {
                let _ = stream.error_terminal(Code::ServerShuttingDown, Msg::RunServerShuttingDown);
                return;
            }
        }
        match log.read_from(next, limits::SUBSCRIBER_POLL) {
            Read::Events(batch) => {
                for ev in batch {
                    next += 1;
                    if stream.raw_event(ev).is_err() {
                        return;
                    }
                }
            }
            // Nothing after the client's position: it saw the terminal event already, and
            // gets it once more (same id) so that this stream, too, ends with one.
            Read::End if next == from => {
                if let Some(t) = log.terminal()
                    && stream.raw_event(t).is_err()
                {
                    return;
                }
                return stream.end_raw();
            }
            Read::End => return stream.end_raw(),
            // Fell behind what the log holds: closed without a terminal event, so the client
            // re-subscribes (snapshot mode) instead of taking this for the run's end.
            Read::Gap => return stream.abandon(),
        }
    }
}

struct Snapshot<'a> {
    sh: &'a Shared,
    req: &'a SubscribeRequest,
    facts: Facts,
    reason: &'static str,
}

impl Snapshot<'_> {
    fn stamp(&self, event: Event) -> Stamped {
        Stamped {
            ts: self.sh.env.now_ms(),
            event,
        }
    }

    fn run(self, stream: &mut RunStream<'_>) {
        let lang = self.req.lang;
        let mut session = self.sh.kernel.session();
        session.gate_reads(stream.budget());
        stream.arm_abort(session.aborter());
        // A paused execution needs no kernel call: its interrupts are in the thread file.
        let first = match (&self.facts.task_id, self.facts.pending.is_empty()) {
            (_, false) => None,
            (None, true) => {
                return stream.reject(
                    ApiError::new(Code::ExecutionNotFound, Msg::ExecutionNotFound).response(lang),
                );
            }
            (Some(task), true) => match session.get_task(task) {
                Ok(Payload::Event(e)) => Some(e),
                Ok(Payload::Error(e)) if e.code == Some(TASK_NOT_FOUND) => {
                    return stream.reject(
                        ApiError::new(Code::ExecutionNotFound, Msg::ExecutionNotFound)
                            .response(lang),
                    );
                }
                Ok(Payload::Error(_)) | Err(_) => {
                    return stream.reject(
                        ApiError::new(Code::A2aUnavailable, Msg::A2aUnavailable).response(lang),
                    );
                }
            },
        };
        if self.open(stream).is_err() {
            return;
        }
        let mut mapper = Mapper::new(
            &*self.sh.env,
            &self.req.thread_id,
            &self.req.run_id,
            Default::default(),
            Default::default(),
        );
        if self.facts.dialect.run_scoped_messages {
            mapper = mapper.with_run_scoped_messages(&self.req.run_id);
        }
        let end = match first {
            None => Ok(Ending::Interrupt(self.facts.pending.clone())),
            Some(snap) => self.follow(&*session, snap, &mut mapper, stream),
        };
        let Ok(end) = end else { return };
        mapper.close_all();
        for ev in mapper.take() {
            if stream.stamped_event(&ev).is_err() {
                return;
            }
        }
        let event = end.terminal(
            &self.req.thread_id,
            &self.req.run_id,
            mapper.usage(),
            &self.facts.dialect,
        );
        let _ = stream.terminal(&self.stamp(event).to_json());
    }

    /// `RUN_STARTED`, the session event, the subscription event.
    fn open(&self, stream: &mut RunStream<'_>) -> Result<(), Stopped> {
        stream.start()?;
        let r = self.req;
        let protocol_version = self.facts.dialect.protocol_version;
        let f = &self.facts;
        let trace = crate::adapter::run::ending::trace_id(&self.facts.dialect);
        let events = [
            Event::RunStarted {
                thread_id: r.thread_id.clone(),
                run_id: r.run_id.clone(),
                parent_run_id: None,
                protocol_version,
            },
            SessionFacts {
                thread_id: &r.thread_id,
                run_id: &r.run_id,
                execution_id: &r.execution_id,
                context_id: &f.context_id,
                task_id: f.task_id.as_deref(),
                ros_invocation_id: &f.ros,
                session_id: f.session_id.as_deref(),
                trace_id: trace.as_deref(),
            }
            .event(),
            Event::Custom {
                name: "iac-code.subscription.v1",
                value: json!({"mode": "snapshot", "reason": self.reason}),
            },
        ];
        for e in events {
            stream.stamped_event(&self.stamp(e))?;
        }
        Ok(())
    }

    /// The task snapshot, then (while it runs) the kernel's subscription to its stop state.
    fn follow(
        &self,
        session: &dyn crate::adapter::state::upstream::Upstream,
        snap: A2aEvent,
        mapper: &mut Mapper<'_>,
        stream: &mut RunStream<'_>,
    ) -> Result<Ending, Stopped> {
        let lang = self.req.lang;
        let task = self.facts.task_id.clone().unwrap_or_default();
        let mut last = snap;
        let mut state = self.project(&last, mapper, stream)?;
        if !state.as_ref().is_some_and(TaskState::is_stop) {
            match session.subscribe(&task) {
                Ok(mut st) => loop {
                    match st.next_payload() {
                        Ok(Some(Payload::Event(e))) => {
                            if let Some(s) = self.project(&e, mapper, stream)? {
                                state = Some(s);
                            }
                            let stop = e.state().as_ref().is_some_and(TaskState::is_stop);
                            last = e;
                            if stop {
                                break;
                            }
                        }
                        // "Task … is not active": it stopped meanwhile; GetTask says how.
                        Ok(Some(Payload::Error(_))) | Ok(None) => break,
                        Err(_) if stream.client_gone() => return Err(Stopped),
                        Err(A2aError::Unavailable(_) | A2aError::Protocol(_)) => {
                            return Ok(Ending::unavailable(stream.shutting_down(), lang));
                        }
                    }
                },
                Err(_) if stream.client_gone() => return Err(Stopped),
                Err(_) => return Ok(Ending::unavailable(stream.shutting_down(), lang)),
            }
            if !state.as_ref().is_some_and(TaskState::is_stop)
                && let Ok(Payload::Event(e)) = session.get_task(&task)
            {
                state = e.state();
                last = e;
            }
        }
        Ok(match state {
            // A turn's normal end is input-required without an input: success.
            Some(TaskState::InputRequired) => match self.interrupts(&last) {
                list if list.is_empty() => Ending::Success,
                list => Ending::Interrupt(list),
            },
            Some(s) if s.is_stop() => Ending::of_task(s, lang),
            _ => Ending::unavailable(stream.shutting_down(), lang),
        })
    }

    fn project(
        &self,
        ev: &A2aEvent,
        mapper: &mut Mapper<'_>,
        stream: &mut RunStream<'_>,
    ) -> Result<Option<TaskState>, Stopped> {
        mapper.map(ev, true, true);
        for e in mapper.take() {
            stream.stamped_event(&e)?;
        }
        Ok(ev.state())
    }

    /// The interrupts of a paused task: the thread file's (the same ids a resume answers),
    /// else the ones the kernel's event names.
    fn interrupts(&self, ev: &A2aEvent) -> Vec<Value> {
        let key = crate::principal::ThreadKey::new(&self.req.caller, &self.req.thread_id);
        let Some(slot) = self.sh.registry.slot(&key).ok() else {
            return Vec::new();
        };
        let pending: Vec<Value> = lock(&slot)
            .as_ref()
            .filter(|t| t.doc.execution.execution_id == self.req.execution_id)
            .map(|t| interrupts::pending(&t.doc.execution, &self.facts.dialect))
            .unwrap_or_default();
        if !pending.is_empty() {
            return pending;
        }
        interrupts::inputs_in(ev, &self.facts.dialect)
            .unwrap_or_default()
            .iter()
            .map(|f| interrupts::interrupt_in(&f.id, &f.value, &self.facts.dialect))
            .collect()
    }
}
