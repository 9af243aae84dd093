//! One admitted run, from `RUN_STARTED` to its single terminal event (reference §5.2, §3.3,
//! §3.5, §8.2). Runs on a worker thread; talks to the kernel through its own A2A session,
//! which the loop aborts when the client goes away.
//!
//! Fail-closed rules: a task id, session id or interrupt is persisted before any event
//! reveals it; when such a write fails the task is cancelled, pending interrupts cleared and
//! the execution marked terminal (`STATE_PERSISTENCE_FAILED`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use super::Shared;
use super::admission::RunKind;
use super::interrupts::{self, FoundInput};
use super::projection::Mapper;
use super::threads::{Slot, Thread, lock};
use crate::a2a::client::{A2aError, EventStream, Restore, Session};
use crate::a2a::types::{A2aEvent, Payload, TaskState};
use crate::agui::content::UserMessage;
use crate::agui::digest;
use crate::agui::events::{Event, Outcome, Stamped};
use crate::agui::input::{IacProps, ResumeEntry, ResumeStatus};
use crate::app::RunStream;
use crate::catalog::Msg;
use crate::config::AguiProtocol;
use crate::errors::Code;
use crate::i18n::Lang;
use crate::server::job::StopReason;
use crate::store::document::{PendingInput, filter_input};

/// The kernel's own English text for a backup that is still synchronising; the reference
/// translates exactly this sentence and passes any other through.
const BACKUP_NOT_READY_EN: &str = "Session backup is still synchronizing. Retry after 3 seconds.";

/// Shared between a run and the cancel route.
#[derive(Debug, Default)]
pub struct RunControl {
    pub cancel_requested: AtomicBool,
}

/// How the run ends (the terminal event is written by [`Run::finish`]).
#[derive(Debug)]
enum End {
    Success,
    Interrupt(Vec<Value>),
    Error(Code, String),
}

/// What to do with the A2A task when a run fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cleanup {
    /// Nothing (pending interrupts stay answerable).
    Keep,
    /// If no interrupt is pending: cancel the task (best effort) and mark the execution terminal.
    CancelIfIdle,
    /// A persistence failure: cancel, clear pending, mark terminal, whatever is pending.
    FailClosed,
}

#[derive(Debug)]
enum Stop {
    /// The client went away.
    Client,
    Fail(Code, String, Cleanup),
}

type Step<T> = Result<T, Stop>;

pub struct RunArgs {
    pub kind: RunKind,
    pub slot: Slot,
    pub thread_id: String,
    pub run_id: String,
    pub parent_run_id: Option<String>,
    pub props: IacProps,
    pub lang: Lang,
    pub user: Option<UserMessage>,
    pub resume: Vec<ResumeEntry>,
    pub control: Arc<RunControl>,
}

pub struct Run<'a, 's> {
    sh: &'a Shared,
    stream: &'a mut RunStream<'s>,
    a: RunArgs,
    session: Session,
    mapper: Mapper<'a>,
    context_id: String,
    execution_id: String,
    /// A task id seen on the wire (even if its persistence failed), for cancellation.
    wire_task: Option<String>,
    session_emitted: bool,
    resume_accepted: bool,
    /// Set once an interrupt is committed or the terminal outcome is known: a disconnect
    /// after that point cancels nothing.
    settled: bool,
    queued_results: Vec<(String, String)>,
    /// Permission catch-up: pipeline sequence to recover from after permission answers.
    catch_up: Option<i64>,
    usage_seen: bool,
}

fn fail(code: Code, msg: Msg, lang: Lang, cleanup: Cleanup) -> Stop {
    Stop::Fail(code, msg.text(lang).to_string(), cleanup)
}

impl<'a, 's> Run<'a, 's> {
    pub fn new(sh: &'a Shared, stream: &'a mut RunStream<'s>, a: RunArgs) -> Run<'a, 's> {
        let (context_id, execution_id, steps, digests) = {
            let g = lock(&a.slot);
            let t = g.as_ref().map(|t| &t.doc);
            (
                t.map(|d| d.context_id.clone()).unwrap_or_default(),
                t.map(|d| d.execution.execution_id.clone())
                    .unwrap_or_default(),
                t.map(|d| d.execution.open_steps.clone())
                    .unwrap_or_default(),
                t.map(|d| d.execution.text_digests.clone())
                    .unwrap_or_default(),
            )
        };
        let session = sh.client.session();
        let mapper = Mapper::new(&*sh.env, &a.thread_id, &a.run_id, steps, digests);
        Run {
            sh,
            stream,
            a,
            session,
            mapper,
            context_id,
            execution_id,
            wire_task: None,
            session_emitted: false,
            resume_accepted: false,
            settled: false,
            queued_results: Vec::new(),
            catch_up: None,
            usage_seen: false,
        }
    }

    /// Drive the run to its end.
    pub fn run(mut self) {
        // The loop aborts this session's sockets when the client leaves or on shutdown.
        self.stream.on_stop(self.session.aborter());
        if self.stream.start().is_err() {
            return self.on_disconnect();
        }
        let body = match self.a.kind {
            RunKind::Guidance => self.guidance(),
            RunKind::Resume => self.resume(),
            RunKind::New | RunKind::NextTurn => self.new_turn(),
        };
        let end = match body {
            Ok(end) => end,
            Err(Stop::Client) => return self.on_disconnect(),
            Err(Stop::Fail(code, msg, cleanup)) => {
                if self.stream.stop_flag().stop_reason() == Some(StopReason::ClientGone) {
                    return self.on_disconnect();
                }
                self.cleanup(cleanup);
                End::Error(code, msg)
            }
        };
        self.finish(end);
    }

    fn lang(&self) -> Lang {
        self.a.lang
    }

    fn fail(&self, code: Code, msg: Msg, cleanup: Cleanup) -> Stop {
        fail(code, msg, self.lang(), cleanup)
    }

    /// A kernel failure: a disconnect if the client left, else `A2A_UNAVAILABLE`.
    fn a2a_err(&self, e: &A2aError, cleanup: Cleanup) -> Stop {
        match self.stream.stop_flag().stop_reason() {
            Some(StopReason::ClientGone) => Stop::Client,
            Some(StopReason::Shutdown) => self.fail(
                Code::A2aUnavailable,
                Msg::A2aUnavailable,
                Cleanup::CancelIfIdle,
            ),
            None => {
                log::warn!("run {}: {e}", self.a.run_id);
                self.fail(Code::A2aUnavailable, Msg::A2aUnavailable, cleanup)
            }
        }
    }

    fn stamp(&self, event: Event) -> Stamped {
        Stamped {
            ts: self.sh.env.now_ms(),
            event,
        }
    }

    fn send(&mut self, ev: &Stamped) -> Step<()> {
        self.stream
            .framed_event(ev.to_sse())
            .map_err(|_| Stop::Client)
    }

    /// Send everything the mapper produced.
    fn flush(&mut self) -> Step<()> {
        for ev in self.mapper.take() {
            self.send(&ev)?;
        }
        Ok(())
    }

    fn with_thread<R>(&self, f: impl FnOnce(&mut Thread) -> R) -> Option<R> {
        lock(&self.a.slot).as_mut().map(f)
    }

    /// Apply `f` to a copy of the thread, persist it, and keep it only if the write worked.
    fn persist(&self, f: impl FnOnce(&mut Thread)) -> Result<(), ()> {
        self.persist_with(true, f)
    }

    /// `sync`: also record the mapper's durable progress. The terminal save does not, like
    /// the reference (digests finalised by the closing spans serve no later resume).
    fn persist_with(&self, sync: bool, f: impl FnOnce(&mut Thread)) -> Result<(), ()> {
        let mut g = lock(&self.a.slot);
        let Some(t) = g.as_mut() else { return Err(()) };
        let mut next = t.clone();
        f(&mut next);
        if sync {
            self.sync_mapper(&mut next);
        }
        match self.sh.registry.save(&next.doc) {
            Ok(()) => {
                *t = next;
                Ok(())
            }
            Err(e) => {
                log::error!("thread {}: {e}", self.a.thread_id);
                Err(())
            }
        }
    }

    /// The mapper's durable progress belongs to the current execution only.
    fn sync_mapper(&self, t: &mut Thread) {
        if t.doc.execution.execution_id == self.execution_id {
            let ex = &mut t.doc.execution;
            ex.pipeline_sequence = ex.pipeline_sequence.max(self.mapper.last_sequence);
            ex.open_steps = self.mapper.open_steps.clone();
            ex.text_digests = self.mapper.text_digests.clone();
        }
    }

    fn task_id(&self) -> Option<String> {
        self.with_thread(|t| t.doc.execution.task_id.clone())
            .flatten()
            .or_else(|| self.wire_task.clone())
    }

    fn run_started(&mut self) -> Step<()> {
        let protocol_version = (self.sh.protocol == AguiProtocol::V1_0).then_some("1.0");
        let ev = self.stamp(Event::RunStarted {
            thread_id: self.a.thread_id.clone(),
            run_id: self.a.run_id.clone(),
            parent_run_id: self.a.parent_run_id.clone(),
            protocol_version,
        });
        self.send(&ev)
    }

    fn session_event(&mut self) -> Step<()> {
        if self.session_emitted {
            return Ok(());
        }
        self.session_emitted = true;
        // Only what is durably written is revealed.
        let (task, sess, ros) = self
            .with_thread(|t| {
                let live = t.doc.execution.execution_id == self.execution_id;
                (
                    if live {
                        t.doc.execution.task_id.clone()
                    } else {
                        None
                    },
                    t.doc.session_id.clone(),
                    t.doc.execution.ros_invocation_id.clone(),
                )
            })
            .unwrap_or((None, None, self.a.props.ros_invocation_id.clone()));
        let value = json!({
            "schemaVersion": 1,
            "threadId": self.a.thread_id,
            "aguiRunId": self.a.run_id,
            "executionId": self.execution_id,
            "contextId": self.context_id,
            "taskId": task,
            "rosInvocationId": ros,
            "sessionId": sess,
        });
        let ev = self.stamp(Event::Custom {
            name: "iac-code.session.v1",
            value,
        });
        self.send(&ev)
    }

    // ------------------------------------------------------------------ the A2A message

    fn metadata(&self) -> Value {
        let p = &self.a.props;
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        if let Some(v) = &p.user_id {
            put("user_id", v.clone().into());
        }
        if let Some(v) = &p.channel {
            put("channel", v.clone().into());
        }
        put("preferredLanguage", self.lang().code().into());
        if let Some(v) = &p.candidate_presentation {
            put("candidatePresentation", v.clone().into());
        }
        if let Some(v) = &p.run_mode {
            put("run_mode", v.clone().into());
        }
        if let Some(v) = &p.pipeline_name {
            put("pipeline_name", v.clone().into());
        }
        put("cleanupOnly", p.cleanup_only.into());
        put("rosInvocationId", p.ros_invocation_id.clone().into());
        if let Some(h) = &p.llm_headers {
            put("llm_headers", Value::Object(h.clone()));
        }
        if let Some(c) = &p.alibaba_cloud {
            for (k, v) in [
                ("alibaba_cloud_access_key_id", &c.access_key_id),
                ("alibaba_cloud_access_key_secret", &c.access_key_secret),
                ("alibaba_cloud_security_token", &c.security_token),
                ("alibaba_cloud_region_id", &c.region_id),
            ] {
                if let Some(v) = v {
                    put(k, v.clone().into());
                }
            }
        }
        let cwd = self.with_thread(|t| t.doc.cwd.clone()).unwrap_or_default();
        put("cwd", cwd.into());
        if let Some(model) = p.model.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            put("iac_code_model", model.into());
        }
        if let Some(key) = p
            .llm_api_key
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            put("iac_code_api_key", key.into());
        }
        if let Some(t) = &p.thinking {
            let mut th = Map::new();
            th.insert("enabled".into(), t.enabled.into());
            if let Some(e) = t.effort.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                th.insert("effort".into(), e.into());
            }
            if let Some(b) = &t.budget {
                th.insert("budget".into(), Value::Number(b.clone()));
            }
            put("thinking", Value::Object(th));
        }
        json!({ "iac_code": m })
    }

    fn message(&self, message_id: &str, parts: Vec<Value>, task_id: Option<&str>) -> Value {
        let mut msg = Map::new();
        msg.insert("messageId".into(), message_id.into());
        msg.insert("role".into(), "ROLE_USER".into());
        msg.insert("parts".into(), Value::Array(parts));
        msg.insert("metadata".into(), self.metadata());
        msg.insert("contextId".into(), self.context_id.clone().into());
        if let Some(t) = task_id {
            msg.insert("taskId".into(), t.into());
        }
        json!({"message": Value::Object(msg), "configuration": {"acceptedOutputModes": ["text/plain"]}})
    }

    // ------------------------------------------------------------------ new turns

    fn new_turn(&mut self) -> Step<End> {
        self.run_started()?;
        self.mapper.reopen_pipeline_steps();
        self.flush()?;
        let Some(user) = self.a.user.take() else {
            return Err(self.fail(Code::InvalidInput, Msg::UserMessageRequired, Cleanup::Keep));
        };
        let params = self.message(&user.message_id, user.parts, None);
        let st = self
            .session
            .send_streaming_message(params)
            .map_err(|e| self.a2a_err(&e, Cleanup::CancelIfIdle))?;
        self.consume(st, true)
    }

    /// Identity rules for every event (§5.2, §10 of the A2A notes); new ids are persisted
    /// before anything reveals them.
    fn observe(&mut self, ev: &A2aEvent) -> Step<()> {
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
            let known = self.with_thread(|t| Known::of(&t.doc.execution.task_id, tid));
            match known.unwrap_or(Known::Unset) {
                Known::Same => {}
                Known::Other => {
                    return Err(self.fail(
                        Code::A2aProtocolError,
                        Msg::TaskIdentityChanged,
                        Cleanup::CancelIfIdle,
                    ));
                }
                Known::Unset => {
                    let tid = tid.to_string();
                    self.wire_task = Some(tid.clone());
                    let exec = self.execution_id.clone();
                    let thread = self.a.thread_id.clone();
                    self.persist(|t| t.doc.execution.task_id = Some(tid.clone()))
                        .map_err(|_| {
                            self.fail(
                                Code::StatePersistenceFailed,
                                Msg::PersistExecution,
                                Cleanup::FailClosed,
                            )
                        })?;
                    self.sh.registry.live_insert(&exec, &thread);
                    if self.a.control.cancel_requested.load(Ordering::SeqCst) {
                        // The cancel route asked before the task id was known: cancel it now.
                        let _ = self.sh.client.session().cancel_task(&tid);
                    }
                }
            }
        }
        if let Some(sid) = ev.session_id() {
            let known = self.with_thread(|t| Known::of(&t.doc.session_id, sid));
            match known.unwrap_or(Known::Unset) {
                Known::Same => {}
                Known::Other => {
                    return Err(self.fail(
                        Code::A2aProtocolError,
                        Msg::SessionIdentityChanged,
                        Cleanup::CancelIfIdle,
                    ));
                }
                Known::Unset => self
                    .persist(|t| t.doc.session_id = Some(sid.to_string()))
                    .map_err(|_| {
                        self.fail(
                            Code::StatePersistenceFailed,
                            Msg::PersistSession,
                            Cleanup::FailClosed,
                        )
                    })?,
            }
        }
        Ok(())
    }

    /// Inputs of an event that are not yet answered in this execution.
    fn new_inputs(&self, ev: &A2aEvent) -> Step<Vec<FoundInput>> {
        if !ev
            .iac()
            .is_some_and(|m| m.contains_key("input") || m.contains_key("pendingPermissions"))
        {
            return Ok(Vec::new());
        }
        let found = interrupts::inputs(ev).map_err(|_| {
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

    fn check_input_identity(&self, inputs: &[FoundInput]) -> Step<()> {
        let task = self.task_id();
        for f in inputs {
            if let Some(r) = f
                .value
                .get("requestTaskId")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                && Some(r) != task.as_deref()
            {
                return Err(self.fail(
                    Code::A2aProtocolError,
                    Msg::InterruptOtherTask,
                    Cleanup::CancelIfIdle,
                ));
            }
            if let Some(c) = f
                .value
                .get("contextId")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                && c != self.context_id
            {
                return Err(self.fail(
                    Code::A2aProtocolError,
                    Msg::InterruptOtherContext,
                    Cleanup::CancelIfIdle,
                ));
            }
        }
        Ok(())
    }

    /// Merge new inputs into pending (existing entries kept; sideband only upgraded) and
    /// persist them before anything is revealed.
    fn commit_inputs(&mut self, inputs: Vec<FoundInput>) -> Step<()> {
        self.check_input_identity(&inputs)?;
        self.mapper.finalize_text_snapshots();
        self.persist(|t| {
            for f in inputs {
                let ex = &mut t.doc.execution;
                match ex.pending.iter_mut().find(|(k, _)| *k == f.id) {
                    Some((_, p)) => p.sideband |= f.sideband,
                    None => ex.pending.push((
                        f.id,
                        PendingInput {
                            value: filter_input(&f.value),
                            sideband: f.sideband,
                        },
                    )),
                }
            }
        })
        .map_err(|_| {
            self.fail(
                Code::StatePersistenceFailed,
                Msg::PersistInterrupt,
                Cleanup::FailClosed,
            )
        })
    }

    fn pending_interrupts(&self) -> Vec<Value> {
        self.with_thread(|t| {
            t.doc
                .execution
                .pending
                .iter()
                .map(|(id, p)| interrupts::interrupt(id, &p.value))
                .collect()
        })
        .unwrap_or_default()
    }

    fn recover_pipeline(&mut self, after: i64) -> Step<()> {
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

    /// Read a stream to its end, projecting it. `last` is false while more resume answers
    /// remain to be delivered after this stream: new inputs are then committed but do not end
    /// the run. Returns the end (`None` when the stream ended without a stop state, or with
    /// input-required and nothing pending, i.e. a plain end of turn... see below).
    fn consume(&mut self, mut st: EventStream, last: bool) -> Step<End> {
        let (state, interrupted) = self.pump(&mut st, last)?;
        drop(st);
        if interrupted {
            return self.interrupt_end();
        }
        self.end_for_state(state)
    }

    /// The core event loop; returns the last state and whether an interrupt was committed.
    fn pump(&mut self, st: &mut EventStream, last: bool) -> Step<(Option<TaskState>, bool)> {
        let mut state: Option<TaskState> = None;
        let mut committed = false;
        loop {
            let p = match st.next_payload() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return Err(self.a2a_err(&e, Cleanup::CancelIfIdle)),
            };
            let ev = match p {
                Payload::Event(e) => e,
                // REC: a JSON-RPC error is never read as a task.
                Payload::Error(e) => {
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

    /// Identity checks, the session event, queued results, projection.
    fn on_event(&mut self, ev: &A2aEvent) -> Step<()> {
        self.observe(ev)?;
        let has_ids = self
            .with_thread(|t| t.doc.execution.task_id.is_some() && t.doc.session_id.is_some())
            == Some(true);
        if !self.session_emitted
            && (self.resume_accepted || (self.a.kind != RunKind::Resume && has_ids))
        {
            self.session_event()?;
        }
        for (id, content) in std::mem::take(&mut self.queued_results) {
            self.mapper.resolved_tool_result(&id, &content);
        }
        self.mapper.map(ev, true, true);
        self.flush()?;
        if self.a.control.cancel_requested.load(Ordering::SeqCst)
            && ev.state() == Some(TaskState::Canceled)
        {
            self.settled = true;
        }
        Ok(())
    }

    fn interrupt_end(&mut self) -> Step<End> {
        self.settled = true;
        Ok(End::Interrupt(self.pending_interrupts()))
    }

    fn end_for_state(&mut self, state: Option<TaskState>) -> Step<End> {
        if let Some(r) = self.catch_up.take() {
            self.recover_pipeline(r)?;
        }
        let cancelled = self.a.control.cancel_requested.load(Ordering::SeqCst);
        Ok(match state {
            Some(TaskState::Completed | TaskState::InputRequired) => End::Success,
            Some(TaskState::Canceled) => {
                End::Error(Code::Cancelled, Msg::Cancelled.text(self.lang()).into())
            }
            _ if cancelled => End::Error(Code::Cancelled, Msg::Cancelled.text(self.lang()).into()),
            Some(s) if s.is_failure() => End::Error(
                Code::A2aExecutionFailed,
                Msg::ExecutionFailed.text(self.lang()).into(),
            ),
            _ => {
                // The stream ended while the task was still running: nobody follows it any
                // more, so cancel it (the reference leaves it running).
                if let Some(t) = self.task_id() {
                    let _ = self.sh.client.session().cancel_task(&t);
                }
                End::Error(
                    Code::A2aExecutionFailed,
                    Msg::ExecutionFailed.text(self.lang()).into(),
                )
            }
        })
    }

    // ------------------------------------------------------------------ resume (§3.3)

    fn entry_digest(e: &ResumeEntry) -> String {
        digest::resume_digest(e.status.as_str(), e.payload.as_ref())
    }

    fn resume(&mut self) -> Step<End> {
        self.run_started()?;
        self.mapper.reopen_pipeline_steps();
        self.flush()?;
        let entries = std::mem::take(&mut self.a.resume);
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
                                == Some(&Self::entry_digest(e))
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
        // 2. Restore a cold session.
        if let Some(sid) = &session_id {
            match self
                .session
                .ensure_restored(Some(&cwd), Some(sid), Some(&task))
            {
                Ok(Restore::Current | Restore::Restored) => {}
                Ok(Restore::NotFound) => {
                    return Err(self.fail(
                        Code::ExecutionLost,
                        Msg::ResumeSessionUnavailable,
                        Cleanup::Keep,
                    ));
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
                    Cleanup::Keep,
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
                None => self
                    .persist(|t| t.doc.session_id = Some(sid.clone()))
                    .map_err(|_| {
                        self.fail(
                            Code::StatePersistenceFailed,
                            Msg::PersistSession,
                            Cleanup::FailClosed,
                        )
                    })?,
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
        // 6. Reconcile pending with the snapshot.
        let known: Vec<String> = self
            .with_thread(|t| {
                t.doc
                    .execution
                    .pending
                    .iter()
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let resume_ids: Vec<&str> = entries.iter().map(|e| e.interrupt_id.as_str()).collect();
        let answering = known.iter().any(|k| resume_ids.contains(&k.as_str()));
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
        let state = snap.state();
        let has_input_keys = snap
            .iac()
            .is_some_and(|m| m.contains_key("input") || m.contains_key("pendingPermissions"));
        let replace =
            state.as_ref().is_some_and(TaskState::is_terminal) || (!answering && has_input_keys);
        // 7. Duplicate ids in the resume.
        let mut uniq = HashSet::new();
        if !resume_ids.iter().all(|i| uniq.insert(*i)) {
            return Err(self.fail(
                Code::IncompleteResume,
                Msg::ResumeDuplicateIds,
                Cleanup::Keep,
            ));
        }
        // 8. Inputs already applied in this execution leave pending (a conflicting answer is
        // refused); 9. persist the reconciled state.
        let mut conflict = false;
        let persisted = self.persist(|t| {
            let ex = &mut t.doc.execution;
            if replace {
                ex.pending.clear();
            }
            for f in &found {
                match ex.pending.iter_mut().find(|(k, _)| *k == f.id) {
                    Some((_, p)) => p.sideband |= f.sideband,
                    None => ex.pending.push((
                        f.id.clone(),
                        PendingInput {
                            value: filter_input(&f.value),
                            sideband: f.sideband,
                        },
                    )),
                }
            }
            let ids: Vec<String> = ex.pending.iter().map(|(k, _)| k.clone()).collect();
            for id in ids {
                if let Some(d) = t.doc.applied.get(&(exec.clone(), id.clone())) {
                    if let Some(e) = entries.iter().find(|e| e.interrupt_id == id)
                        && &Self::entry_digest(e) != d
                    {
                        conflict = true;
                    }
                    t.doc.execution.pending_remove(&id);
                }
            }
        });
        if conflict {
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
        // 10. Entries that are not pending.
        let (pending_ids, applied): (Vec<String>, Vec<(String, String)>) = self
            .with_thread(|t| {
                (
                    t.doc
                        .execution
                        .pending
                        .iter()
                        .map(|(k, _)| k.clone())
                        .collect(),
                    t.doc
                        .applied
                        .iter()
                        .filter(|((e, _), _)| *e == exec)
                        .map(|((_, i), d)| (i.clone(), d.clone()))
                        .collect(),
                )
            })
            .unwrap_or_default();
        for e in &entries {
            if pending_ids.contains(&e.interrupt_id) {
                continue;
            }
            match applied.iter().find(|(i, _)| *i == e.interrupt_id) {
                Some((_, d)) if *d == Self::entry_digest(e) => {}
                Some(_) => {
                    return Err(self.fail(
                        Code::ResumeAlreadyApplied,
                        Msg::ResumeAlreadyApplied,
                        Cleanup::Keep,
                    ));
                }
                None => {
                    return Err(self.fail(
                        Code::UnknownInterrupt,
                        Msg::ResumeUnknownInterrupt,
                        Cleanup::Keep,
                    ));
                }
            }
        }
        // 11. Every pending interrupt answered exactly once; newly discovered ones end the run
        // with an interrupt listing all of them.
        let missing: Vec<&String> = pending_ids
            .iter()
            .filter(|p| !resume_ids.contains(&p.as_str()))
            .collect();
        if missing.iter().any(|m| known.contains(m)) {
            return Err(self.fail(Code::IncompleteResume, Msg::ResumeIncomplete, Cleanup::Keep));
        }
        if !missing.is_empty() {
            return self.interrupt_end();
        }
        // 12. Validate every answer before any side effect.
        let answers = self.validate(&entries)?;
        self.apply(answers)
    }

    /// Validated answers in resume order: (id, status, payload, value, sideband).
    fn validate(&self, entries: &[ResumeEntry]) -> Step<Vec<Answer>> {
        let now = self.sh.env.now_ms() as i64;
        let mut out = Vec::new();
        for e in entries {
            let Some(p) = self
                .with_thread(|t| t.doc.execution.pending_get(&e.interrupt_id).cloned())
                .flatten()
            else {
                continue;
            };
            if let Some(exp) = p.value.get("expiresAt").and_then(Value::as_str)
                && crate::rfc3339::parse_millis(exp).is_some_and(|ms| ms < now)
            {
                return Err(self.fail(
                    Code::ExecutionExpired,
                    Msg::ExecutionExpired,
                    Cleanup::FailClosed,
                ));
            }
            let permission = p.value.get("kind").and_then(Value::as_str) == Some("permission");
            let mut payload = e.payload.clone();
            if e.status == ResumeStatus::Cancelled && permission {
                payload = Some(json!({"decision": "deny"}));
            }
            if e.status == ResumeStatus::Resolved && payload.is_none() {
                return Err(self.fail(
                    Code::ResumePayloadInvalid,
                    Msg::ResumePayloadRequired,
                    Cleanup::Keep,
                ));
            }
            if e.status != ResumeStatus::Cancelled || permission {
                let schema =
                    interrupts::interrupt(&e.interrupt_id, &p.value)["responseSchema"].clone();
                let ok = jsonschema::draft202012::new(&schema)
                    .map(|v| v.is_valid(payload.as_ref().unwrap_or(&Value::Null)))
                    .unwrap_or(false);
                if !ok {
                    return Err(self.fail(
                        Code::ResumePayloadInvalid,
                        Msg::ResumePayloadInvalid,
                        Cleanup::Keep,
                    ));
                }
            }
            out.push(Answer {
                id: e.interrupt_id.clone(),
                status: e.status,
                digest: Self::entry_digest(e),
                payload,
                value: p.value,
                sideband: p.sideband,
                permission,
                prompt: None,
            });
        }
        if out.is_empty() {
            return Err(self.fail(
                Code::ResumeAlreadyApplied,
                Msg::ResumeAlreadyApplied,
                Cleanup::Keep,
            ));
        }
        Ok(out)
    }

    /// Record one delivered answer (applied digest, no longer pending), durably.
    fn commit_answer(&mut self, a: &Answer) -> Step<()> {
        let exec = self.execution_id.clone();
        self.persist(|t| {
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

    /// An event that names another task or context than this run's (absent ids are allowed).
    fn check_identity(&self, ev: &crate::a2a::types::A2aEvent, task: &str) -> Step<()> {
        if ev.task_id().is_some_and(|t| t != task)
            || ev.context_id().is_some_and(|c| c != self.context_id)
        {
            return Err(self.identity_mismatch());
        }
        Ok(())
    }

    fn identity_mismatch(&self) -> Stop {
        self.fail(
            Code::A2aProtocolError,
            Msg::TaskIdentityMismatch,
            Cleanup::Keep,
        )
    }

    fn rejected(&self, e: &crate::a2a::types::RpcError) -> Stop {
        if e.is_backup_not_ready() {
            let text = if e.message.is_empty() || e.message == BACKUP_NOT_READY_EN {
                Msg::SessionBackupNotReady.text(self.lang()).to_string()
            } else {
                e.message.clone()
            };
            Stop::Fail(Code::SessionBackupNotReady, text, Cleanup::Keep)
        } else {
            self.fail(
                Code::A2aUnavailable,
                Msg::A2aRejectedResponse,
                Cleanup::Keep,
            )
        }
    }

    /// Stage B: deliver every answer (REC D12: never a silent drop).
    fn apply(&mut self, mut answers: Vec<Answer>) -> Step<End> {
        let task = self.task_id().unwrap_or_default();
        // A cancelled question cancels the whole execution.
        if answers
            .iter()
            .any(|a| a.status == ResumeStatus::Cancelled && !a.permission)
        {
            let _ = self.session.cancel_task(&task);
            self.mark_terminal(true);
            self.settled = true;
            return Ok(End::Error(
                Code::Cancelled,
                Msg::CancelledByResponse.text(self.lang()).into(),
            ));
        }
        for a in answers.iter_mut().filter(|a| !a.permission) {
            let p = a.payload.as_ref().unwrap_or(&Value::Null);
            let prompt = p
                .get("freeText")
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
                .unwrap_or_default();
            if prompt.is_empty() {
                return Err(self.fail(
                    Code::ResumePayloadInvalid,
                    Msg::ResumeNoAnswer,
                    Cleanup::Keep,
                ));
            }
            a.prompt = Some(prompt);
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
        let questions = answers.iter().filter(|a| !a.permission).count();
        let n = answers.len();
        let mut last_state: Option<TaskState> = None;
        let mut interrupted = false;
        for (i, a) in answers.into_iter().enumerate() {
            let (message_id, parts) = if a.permission {
                (
                    format!("agui-resume-{}-{}", self.a.run_id, a.id),
                    vec![permission_part(&task, &a)],
                )
            } else {
                let id = if questions == 1 {
                    format!("agui-resume-{}", self.a.run_id)
                } else {
                    format!("agui-resume-{}-{}", self.a.run_id, a.id)
                };
                (
                    id,
                    vec![json!({"text": a.prompt.clone().unwrap_or_default()})],
                )
            };
            let params = self.message(&message_id, parts, Some(&task));
            let mut st = self
                .session
                .send_streaming_message(params)
                .map_err(|e| self.a2a_err(&e, Cleanup::Keep))?;
            let first = match st.next_payload() {
                Ok(Some(Payload::Event(e))) => e,
                Ok(Some(Payload::Error(e))) => return Err(self.rejected(&e)),
                Ok(None) => {
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
                && let Some(tool) = a
                    .value
                    .get("toolUseId")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            {
                self.queued_results
                    .push((tool.to_string(), a.prompt.clone().unwrap_or_default()));
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
        match last_state {
            Some(s) if s.is_stop() => self.end_for_state(Some(s)),
            _ => self.follow(&task),
        }
    }

    fn pump_chain(&mut self, c: &mut Chain, last: bool) -> Step<(Option<TaskState>, bool)> {
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

    /// Sideband permissions: non-streaming sends, then the task snapshot and a subscription.
    fn apply_sideband(&mut self, answers: Vec<Answer>, task: &str) -> Step<End> {
        for a in &answers {
            let parts = vec![permission_part(task, a)];
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
    fn follow(&mut self, task: &str) -> Step<End> {
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

    fn guidance(&mut self) -> Step<End> {
        self.run_started()?;
        let Some(user) = self.a.user.take() else {
            return Err(self.fail(Code::InvalidInput, Msg::UserMessageRequired, Cleanup::Keep));
        };
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
        self.settled = true;
        Ok(End::Success)
    }

    // ------------------------------------------------------------------ endings

    /// Mark the execution terminal: task forgotten, listed as terminal, out of the live index.
    fn mark_terminal(&self, clear_pending: bool) {
        let exec = self.execution_id.clone();
        let r = self.persist_with(false, |t| {
            if t.doc.execution.execution_id != exec {
                return;
            }
            if clear_pending {
                t.doc.execution.pending.clear();
            }
            t.doc.execution.task_id = None;
            t.doc.retire(&exec);
        });
        if r.is_err() {
            log::error!(
                "run {}: the terminal state could not be saved",
                self.a.run_id
            );
        }
        self.sh.registry.live_remove(&self.execution_id);
    }

    fn pending_empty(&self) -> bool {
        self.with_thread(|t| t.doc.execution.pending.is_empty())
            .unwrap_or(true)
    }

    fn cancel_task_best_effort(&self) {
        if let Some(t) = self.task_id() {
            // This run's own session may be aborted already: use a fresh one.
            if let Err(e) = self.sh.client.session().cancel_task(&t) {
                log::warn!("run {}: cancelling the task failed: {e}", self.a.run_id);
            }
        }
    }

    fn cleanup(&mut self, c: Cleanup) {
        match c {
            Cleanup::Keep => {}
            Cleanup::CancelIfIdle => {
                if self.pending_empty() && self.a.kind != RunKind::Guidance {
                    self.cancel_task_best_effort();
                }
            }
            Cleanup::FailClosed => {
                self.cancel_task_best_effort();
                self.mark_terminal(true);
            }
        }
    }

    /// Session event (REC: always before the terminal, guidance excepted), spans closed
    /// (REC: also before RUN_ERROR), then exactly one terminal event.
    fn finish(&mut self, end: End) {
        let guidance = self.a.kind == RunKind::Guidance;
        if !guidance && self.session_event().is_err() {
            return self.on_disconnect();
        }
        // The durable progress as of the last event (digests finalised by closing spans stay
        // out, like the reference); persisted by the terminal save.
        let _ = self.with_thread(|t| self.sync_mapper(t));
        self.mapper.close_all();
        if self.flush().is_err() {
            return self.on_disconnect();
        }
        let usage = if guidance {
            Vec::new()
        } else {
            self.mapper.usage()
        };
        self.usage_seen = !usage.is_empty();
        let thread_id = self.a.thread_id.clone();
        let run_id = self.a.run_id.clone();
        let cancelled_v1 = self.sh.protocol == AguiProtocol::V1_0;
        let event = match end {
            End::Success => Event::RunFinished {
                thread_id,
                run_id,
                outcome: Outcome::Success,
                usage,
            },
            End::Interrupt(list) => Event::RunFinished {
                thread_id,
                run_id,
                outcome: Outcome::Interrupt(list),
                usage,
            },
            End::Error(Code::Cancelled, _) if cancelled_v1 => Event::RunFinished {
                thread_id,
                run_id,
                outcome: Outcome::Cancelled,
                usage,
            },
            End::Error(code, message) => Event::RunError {
                message,
                code,
                usage,
                thread_id,
                run_id,
            },
        };
        // Settle before the terminal event leaves: a disconnect right after must not cancel.
        self.settled = true;
        let interrupt = matches!(
            &event,
            Event::RunFinished {
                outcome: Outcome::Interrupt(_),
                ..
            }
        );
        if !guidance && !interrupt && self.pending_empty() {
            self.mark_terminal(false);
        }
        let ev = self.stamp(event);
        // Release first: a client that reacts to the terminal event at once must find the
        // thread free (the reference releases after writing it, a race).
        self.release();
        let _ = self.stream.terminal(&ev.to_json());
    }

    fn release(&self) {
        if self.a.kind != RunKind::Guidance {
            let run = self.a.run_id.clone();
            let _ = self.with_thread(|t| {
                if t.active_run.as_deref() == Some(run.as_str()) {
                    t.active_run = None;
                }
            });
        }
        self.sh.registry.touch();
        self.sh.forget_run(&self.execution_id, &self.a.control);
    }

    /// The client left (reference §8.2).
    fn on_disconnect(&mut self) {
        log::info!("run {}: client disconnected", self.a.run_id);
        let cancel = !self.settled && self.a.kind != RunKind::Guidance && self.pending_empty();
        // Release first (reference §8.2): the kernel may take a while to confirm the cancel,
        // and the thread must not look busy meanwhile.
        self.release();
        if cancel {
            let task = self.task_id();
            self.mark_terminal(false);
            if let Some(t) = task
                && let Err(e) = self.sh.client.session().cancel_task(&t)
            {
                log::warn!("run {}: cancelling the task failed: {e}", self.a.run_id);
            }
        }
    }
}

/// How an id from the wire compares with the one on record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Same,
    Other,
    Unset,
}

impl Known {
    fn of(recorded: &Option<String>, wire: &str) -> Known {
        match recorded {
            Some(k) if k == wire => Known::Same,
            Some(_) => Known::Other,
            None => Known::Unset,
        }
    }
}

/// The six-key permission answer part (A2A notes §3.3).
fn permission_part(task: &str, a: &Answer) -> Value {
    let decision = a
        .payload
        .as_ref()
        .and_then(|p| p.get("decision"))
        .cloned()
        .unwrap_or(Value::Null);
    let tool = a
        .value
        .get("toolUseId")
        .map(interrupts::py_str)
        .unwrap_or_else(|| "None".into());
    json!({"data": {"schemaVersion": 1, "kind": "permission", "requestTaskId": task, "inputId": a.id, "toolUseId": tool, "decision": decision}, "mediaType": "application/json"})
}

/// One validated resume answer.
#[derive(Debug, Clone)]
struct Answer {
    id: String,
    status: ResumeStatus,
    digest: String,
    payload: Option<Value>,
    value: Map<String, Value>,
    sideband: bool,
    permission: bool,
    prompt: Option<String>,
}

/// The already-read first event of an answer stream followed by the rest of it.
struct Chain {
    first: Option<EventStream>,
    rest: EventStream,
}
