//! One admitted run, from `RUN_STARTED` to its single terminal event (reference §5.2, §3.3,
//! §3.5, §8.2). Runs on a worker thread; talks to the kernel through its own `Upstream`
//! session, which the loop aborts when the client goes away.
//!
//! - this module: the run's state, persistence, the session event and the endings;
//! - `turn`: new turns and guidance, the event pump, interrupts found in a stream;
//! - `resume`: the resume stages around the pure `reconcile` and answer delivery.
//!
//! Fail-closed rules: a task id, session id or interrupt is persisted before any event
//! reveals it; when such a write fails the task is cancelled, pending interrupts cleared and
//! the execution marked terminal (`STATE_PERSISTENCE_FAILED`).
//!
//! Frames of their own: the driver's deep, rare stages and endings are `#[inline(never)]`
//! (15 of them) and the run is built on the heap in one more (`Run::boxed`), so that only the
//! stage being run sits under the event pump. A worker's resident stack is the deepest it
//! has ever been and lives as long as its stream: measured (issue 37, shipped build, K = 1 000)
//! 12 KiB per worker and 23.5 KiB per open stream with them, 16 KiB and 27.3 without
//! (docs/performance.md). Guarded by the shipped build's `make bench` (it fails when a worker's
//! stack is above 12 KiB; the only build that inlines) and by `tests/it/tuning.rs` (a flood and a
//! resume on workers of the stack they must fit in: a frame grown on the path overflows). One
//! more in the worker's entry (`app::Job::other`); 8 elsewhere were removed (no measurable gain).

mod resume;
#[cfg(test)]
mod tests;
mod turn;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::a2a::A2aError;
use crate::a2a::types::{A2aEvent, RpcError};
use crate::adapter::rules::admission::RunKind;
use crate::adapter::rules::projection::Mapper;
use crate::adapter::run::tee::RunTee;
use crate::adapter::state::shared::Shared;
use crate::adapter::state::threads::{Slot, Thread};
use crate::adapter::state::upstream::{self, Upstream};
use crate::agui::content::UserMessage;
use crate::agui::events::{Event, Outcome, Stamped};
use crate::agui::input::{IacProps, ResumeEntry};
use crate::app::RunStream;
use crate::catalog::Msg;
use crate::errors::Code;
use crate::i18n::Lang;
use crate::life::{Cell, Cut, Effect, Effects, Event as LifeEvent};
use crate::sync::lock;

/// AG-UI 1.0 mode: the request's messages and parts the run goes on without, each
/// `{"messageId","part","type","reason"}` (docs/protocol.md, deviation 70).
pub(crate) const SKIPPED_EVENT: &str = "iac-code.input.skipped.v1";

/// JSON-RPC "invalid params": how the kernel refuses an answer it will not take.
const INVALID_PARAMS: i64 = -32602;

/// The kernel's own English text for a backup that is still synchronising; the reference
/// translates exactly this sentence and passes any other through.
const BACKUP_NOT_READY_EN: &str = "Session backup is still synchronizing. Retry after 3 seconds.";

/// Why a durable change of the thread did not happen (the run then fails closed).
#[derive(Debug)]
enum NotSaved {
    /// The thread is not loaded any more.
    Gone,
    /// The state store refused the write (logged where it happened).
    Store(#[allow(dead_code, reason = "kept for Debug output")] crate::store::files::StoreError),
}

// How the run ends (the terminal event is written by [`Run::finish`]).
pub(in crate::adapter) use crate::adapter::run::ending::Ending;

/// What to do with the A2A task when a run fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cleanup {
    /// Nothing (pending interrupts stay answerable).
    Keep,
    /// If no interrupt is pending: cancel the task (best effort) and mark the execution terminal.
    CancelIfIdle,
    /// A persistence failure: cancel, clear pending, mark terminal, whatever is pending.
    FailClosed,
    /// The kernel no longer has the execution: clear pending and mark it terminal (nothing
    /// to cancel), so it ends once and the thread's next turn starts afresh.
    Lost,
}

#[derive(Debug)]
enum Stop {
    /// The client went away.
    Client,
    Fail(Code, String, Cleanup),
}

type Stage<T> = Result<T, Stop>;

/// An admitted run, handed from admission (on a call thread) to its worker.
pub(crate) struct Admitted {
    pub(crate) args: RunArgs,
    pub(crate) tap: Arc<RunTee>,
    /// Made here, on the call thread: building an agent is deeper than anything the worker
    /// does later.
    pub(crate) session: Box<dyn Upstream>,
}

pub(crate) struct RunArgs {
    pub(crate) kind: RunKind,
    pub(crate) slot: Slot,
    /// The thread and its owner (`thread.id` is the AG-UI threadId).
    pub(crate) thread: crate::principal::ThreadKey,
    pub(crate) run_id: String,
    pub(crate) parent_run_id: Option<String>,
    pub(crate) props: IacProps,
    pub(crate) lang: Lang,
    /// What only the run's start reads; `None` once all of it was taken.
    pub(crate) opening: Option<Box<Opening>>,
    /// The run's life (its job's cell, registered by admission).
    pub(crate) cell: Arc<Cell>,
    /// What admission's gates hold for the run's life (a caller's quota place), told what
    /// it used when it ends (`adapter::policies`).
    pub(crate) holds: Vec<Box<dyn crate::adapter::state::policies::Hold>>,
    /// Where the run came from: its end's audit record says so too.
    pub(crate) origin: crate::app::RequestOrigin,
    /// The dialect its request declared (or `--agui-protocol`'s): every event of the run,
    /// its terminal one included, is framed in it.
    pub(crate) dialect: crate::agui::dialect::Dialect,
}

/// What a run reads only as it starts, each part taken once. Boxed and dropped when spent:
/// the run that then streams for hours does not carry its room (docs/performance.md).
#[derive(Default)]
pub(crate) struct Opening {
    pub(crate) user: Option<UserMessage>,
    pub(crate) resume: Vec<ResumeEntry>,
    /// AG-UI 1.0: the conversation to restate after `RUN_STARTED` (the stored one and the
    /// request's new messages), when the request held less than the server keeps.
    pub(crate) snapshot: Option<Vec<serde_json::Value>>,
    /// AG-UI 1.0: what of the request the run goes on without, told after `RUN_STARTED`.
    pub(crate) skipped: Vec<crate::agui::content::Skipped>,
}

impl Opening {
    fn spent(&self) -> bool {
        self.user.is_none()
            && self.resume.is_empty()
            && self.snapshot.is_none()
            && self.skipped.is_empty()
    }
}

pub(crate) struct Run<'a, 's> {
    sh: &'a Shared,
    stream: &'a mut RunStream<'s>,
    a: RunArgs,
    session: Box<dyn Upstream>,
    mapper: Mapper<'a>,
    context_id: String,
    execution_id: String,
    /// A task id seen on the wire (even if its persistence failed), for cancellation.
    wire_task: Option<String>,
    /// A new task id not saved yet: saved with the next save (the kernel names the session
    /// in its next frame, so one save holds both), and before any event is sent (an event
    /// may reveal it: the 0.1 message ids are `<taskId>-message`).
    unsaved_task: Option<String>,
    resume_accepted: bool,
    queued_results: Vec<(String, String)>,
    /// Permission catch-up: pipeline sequence to recover from after permission answers.
    catch_up: Option<i64>,
    /// The thread's previous task was still stopping when this run's bound ran out.
    previous_stopping: bool,
    /// The run's tap: its replay log and its part of the thread's stored conversation,
    /// written at its end (taken once: a client gone after the end writes nothing more).
    tee: Arc<RunTee>,
}

fn fail(code: Code, msg: Msg, lang: Lang, cleanup: Cleanup) -> Stop {
    Stop::Fail(code, msg.text(lang).to_string(), cleanup)
}

impl<'a, 's> Run<'a, 's> {
    pub(crate) fn new(
        sh: &'a Shared,
        stream: &'a mut RunStream<'s>,
        a: RunArgs,
        mut session: Box<dyn Upstream>,
        tee: Arc<RunTee>,
    ) -> Run<'a, 's> {
        session.gate_reads(stream.budget());
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
        let mut mapper = Mapper::new(&*sh.env, &a.thread.id, &a.run_id, steps, digests);
        if a.dialect.run_scoped_messages {
            mapper = mapper.with_run_scoped_messages(&a.run_id);
        }
        Run {
            sh,
            stream,
            a,
            session,
            mapper,
            context_id,
            execution_id,
            wire_task: None,
            unsaved_task: None,
            resume_accepted: false,
            queued_results: Vec::new(),
            catch_up: None,
            previous_stopping: false,
            tee,
        }
    }

    /// The run on the heap, built in a frame of its own (gone before the run starts): the
    /// worker's frames under the stream's reads hold a pointer, not the run or its arguments
    /// (docs/performance.md, issue 26).
    #[inline(never)]
    pub(crate) fn boxed(
        sh: &'a Shared,
        stream: &'a mut RunStream<'s>,
        admitted: Box<crate::adapter::run::driver::Admitted>,
    ) -> Box<Self> {
        let crate::adapter::run::driver::Admitted { args, tap, session } = *admitted;
        stream.set_tap(tap.clone());
        Box::new(Run::new(sh, stream, args, session, tap))
    }

    /// Drive the run to its end. The stages and endings are frames of their own (never
    /// inlined here), so only the stage being run sits on the stack under the pump.
    #[inline(never)]
    pub(crate) fn run(&mut self) {
        struct Active;
        impl Drop for Active {
            fn drop(&mut self) {
                crate::metrics::M.runs_active.add(-1);
            }
        }
        crate::metrics::M.runs_active.add(1);
        let _active = Active;
        // The run's cell cuts this session's sockets when its table says so: the client gone
        // past any grace, the drain's end, a saved Stop with the task named.
        self.stream.arm_abort(self.session.aborter());
        // A panic ends the exchange with `RUN_ERROR INTERNAL_ERROR` (the app's `catch_unwind`),
        // but the thread must not stay held by a run that no longer exists: every later turn
        // would be `THREAD_BUSY` until a restart.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.stages()));
        if let Err(panic) = ran {
            self.after_panic();
            std::panic::resume_unwind(panic);
        }
    }

    fn stages(&mut self) {
        if self.stream.start().is_err() {
            return self.on_disconnect();
        }
        let body = match self.a.kind {
            RunKind::Guidance => self.guidance(),
            RunKind::Resume => self.resume(),
            RunKind::New | RunKind::NextTurn => self.new_turn(),
        };
        // A task id noted but not saved yet (a turn that showed nothing) is saved before the
        // run's end, or the run fails closed.
        let end = match body.and_then(|end| self.save_task().map(|()| end)) {
            Ok(end) => end,
            Err(Stop::Client) => return self.on_disconnect(),
            Err(Stop::Fail(code, msg, cleanup)) => {
                // A failed run's task id stays unsaved (and so unrevealed): an interrupt kept
                // for later was saved with it.
                self.unsaved_task = None;
                if self.stream.client_gone() {
                    return self.on_disconnect();
                }
                self.cleanup(cleanup);
                Ending::Error(code, msg)
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

    /// A kernel failure: what cut the upstream, as the run's life says (a saved Stop, the
    /// drain's end, the client gone for good), else `A2A_UNAVAILABLE`.
    fn a2a_err(&self, e: &A2aError, cleanup: Cleanup) -> Stop {
        match self.a.cell.life().cut() {
            Some(Cut::Cancel) => self.fail(Code::Cancelled, Msg::Cancelled, Cleanup::Keep),
            // The drain's grace is over: a clear, retryable error; paused interrupts stay.
            Some(Cut::Shutdown) => self.fail(
                Code::ServerShuttingDown,
                Msg::RunServerShuttingDown,
                Cleanup::CancelIfIdle,
            ),
            Some(Cut::Client) => Stop::Client,
            None => self.unavailable(e, cleanup),
        }
    }

    /// A kernel failure nothing of the run's life explains.
    fn unavailable(&self, e: &A2aError, cleanup: Cleanup) -> Stop {
        log::warn!("run {}: {e}", self.a.run_id);
        let kind = match e {
            A2aError::Unavailable(_) => {
                // Probe the kernel now: `/health` should say so if it is down.
                self.sh.readiness.kick();
                "unavailable"
            }
            A2aError::Protocol(_) => "protocol",
        };
        crate::metrics::M.upstream_errors.inc(kind);
        self.fail(Code::A2aUnavailable, Msg::A2aUnavailable, cleanup)
    }

    fn stamp(&self, event: Event) -> Stamped {
        Stamped {
            ts: self.sh.env.now_ms(),
            event,
        }
    }

    fn send(&mut self, ev: &Stamped) -> Stage<()> {
        self.save_task()?;
        self.stream.stamped_event(ev).map_err(|_| Stop::Client)
    }

    /// Send everything the mapper produced.
    fn flush(&mut self) -> Stage<()> {
        if !self.mapper.has_output() {
            return Ok(());
        }
        self.save_task()?;
        let stream = &mut *self.stream;
        for ev in self.mapper.drain() {
            stream.stamped_event(&ev).map_err(|_| Stop::Client)?;
        }
        Ok(())
    }

    /// Write this run's part of the thread's stored conversation (at its end, an interrupt
    /// included, and when its client left: the client saw what it holds). True when there
    /// is none to write.
    fn record_turn(&mut self) -> bool {
        let Some(ops) = self.tee.take_ops() else {
            return true;
        };
        let r = self.sh.registry.end_turn(
            &self.a.slot,
            &self.a.thread,
            &self.a.run_id,
            self.sh.env.now_ms(),
            ops,
            self.a.kind != RunKind::Guidance,
        );
        if let Err(e) = &r {
            log::error!(
                "run {}: the thread's history could not be written: {e}",
                self.a.run_id
            );
        }
        r.is_ok()
    }

    fn with_thread<R>(&self, f: impl FnOnce(&mut Thread) -> R) -> Option<R> {
        lock(&self.a.slot).as_mut().map(f)
    }

    /// Take a part of the run's opening; the opening goes once all of it was taken.
    fn take_opening<T: Default>(&mut self, part: impl FnOnce(&mut Opening) -> T) -> T {
        let Some(o) = self.a.opening.as_mut() else {
            return T::default();
        };
        let taken = part(o);
        if o.spent() {
            self.a.opening = None;
        }
        taken
    }

    /// Apply `f` to a copy of the thread, persist it, and keep it only if the write worked.
    fn persist(&self, f: impl FnOnce(&mut Thread)) -> Result<(), NotSaved> {
        self.persist_with(true, f)
    }

    /// `sync`: also record the mapper's durable progress. The terminal save does not, like
    /// the reference (digests finalised by the closing spans serve no later resume).
    fn persist_with(&self, sync: bool, f: impl FnOnce(&mut Thread)) -> Result<(), NotSaved> {
        let saved = self.sh.registry.update(&self.a.slot, |current| {
            let mut next = Box::new(current?.clone());
            // Not into an execution that has ended (its end cleared the task id).
            if let Some(tid) = &self.unsaved_task
                && next.doc.execution.execution_id == self.execution_id
                && !next.doc.terminal.contains(&self.execution_id)
            {
                next.doc.execution.task_id = Some(tid.clone());
            }
            f(&mut next);
            if sync {
                self.sync_mapper(&mut next);
            }
            Some((next, ()))
        });
        match saved {
            Ok(Some(())) => Ok(()),
            Ok(None) => Err(NotSaved::Gone),
            Err(e) => {
                log::error!("thread {}: {e}", self.a.thread.id);
                Err(NotSaved::Store(e))
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

    /// Persist a session id seen for the first time (before anything reveals it).
    fn record_session(&self, sid: &str) -> Stage<()> {
        self.persist(|t| t.doc.session_id = Some(sid.to_string()))
            .map_err(|_| {
                self.fail(
                    Code::StatePersistenceFailed,
                    Msg::PersistSession,
                    Cleanup::FailClosed,
                )
            })
    }

    fn cancelled(&self) -> bool {
        self.a.cell.life().cancelled()
    }

    /// Tell the run's cell what happened, under the thread's lock: where the cancel route
    /// claims the end and publishes its outcome, so the run never decides between the two.
    fn decide(&self, event: LifeEvent) -> Effects {
        let _thread = lock(&self.a.slot);
        self.a.cell.send(event)
    }

    /// Before this run's first kernel call: wait (bounded) until the kernel confirmed that
    /// the thread's previous task stopped; a task started meanwhile would fail. Past the
    /// bound the run goes ahead, and a failure is then reported as that.
    fn wait_for_previous_task(&mut self) -> Stage<()> {
        let bound = self.sh.wind_down_bound;
        self.previous_stopping = !self.sh.wind_downs.wait(&self.context_id, bound);
        if self.previous_stopping {
            log::warn!(
                "run {}: the previous task of thread {} is still stopping after {bound:?}",
                self.a.run_id,
                self.a.thread.id
            );
        }
        if self.cancelled() {
            return Err(self.fail(Code::Cancelled, Msg::Cancelled, Cleanup::Keep));
        }
        Ok(())
    }

    /// This run's task: the thread's while it is still this run's execution (a next turn
    /// may have rotated it meanwhile), else the one seen on the wire.
    fn task_id(&self) -> Option<String> {
        self.with_thread(|t| {
            (t.doc.execution.execution_id == self.execution_id)
                .then(|| t.doc.execution.task_id.clone())
                .flatten()
        })
        .flatten()
        .or_else(|| self.wire_task.clone())
    }

    fn run_started(&mut self) -> Stage<()> {
        let protocol_version = self.a.dialect.protocol_version;
        let ev = self.stamp(Event::RunStarted {
            thread_id: self.a.thread.id.clone(),
            run_id: self.a.run_id.clone(),
            parent_run_id: self.a.parent_run_id.clone(),
            protocol_version,
        });
        self.send(&ev)?;
        if let Some(messages) = self.take_opening(|o| o.snapshot.take()) {
            let ev = self.stamp(Event::MessagesSnapshot { messages });
            self.send(&ev)?;
        }
        let skipped = self.take_opening(|o| std::mem::take(&mut o.skipped));
        if !skipped.is_empty() {
            log::warn!(
                "thread {}: run {} goes on without {} message(s) or part(s) it cannot use",
                crate::logging::escape(&self.a.thread.id),
                crate::logging::escape(&self.a.run_id),
                skipped.len()
            );
            let value = serde_json::json!({
                "skipped": skipped.iter().map(crate::agui::content::Skipped::to_json).collect::<Vec<_>>()
            });
            let ev = self.stamp(Event::Custom {
                name: SKIPPED_EVENT,
                value,
            });
            self.send(&ev)?;
        }
        Ok(())
    }

    fn session_event(&mut self) -> Stage<()> {
        // Built from what is saved: a task id noted but not saved yet is saved first.
        self.save_task()?;
        if !self
            .a
            .cell
            .send(LifeEvent::RevealSession)
            .has(Effect::EmitSession)
        {
            return Ok(());
        }
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
        let trace = crate::adapter::run::ending::trace_id(&self.a.dialect);
        let facts = crate::adapter::run::ending::SessionFacts {
            thread_id: &self.a.thread.id,
            run_id: &self.a.run_id,
            execution_id: &self.execution_id,
            context_id: &self.context_id,
            task_id: task.as_deref(),
            ros_invocation_id: &ros,
            session_id: sess.as_deref(),
            trace_id: trace.as_deref(),
        };
        let ev = self.stamp(facts.event());
        self.send(&ev)
    }

    /// `CUSTOM iac-code.session.reset.v1`: the kernel no longer had the thread's session and
    /// this turn runs in a new one (already durably recorded), with a message to show.
    fn session_reset(&mut self, previous: Option<&str>, session: &str) -> Stage<()> {
        log::warn!(
            "run {}: the kernel no longer has thread {}'s session; a new one starts",
            self.a.run_id,
            self.a.thread.id
        );
        let ev = self.stamp(Event::Custom {
            name: "iac-code.session.reset.v1",
            value: json!({
                "schemaVersion": 1,
                "threadId": self.a.thread.id,
                "previousSessionId": previous,
                "sessionId": session,
                "message": Msg::SessionReset.text(self.lang()),
            }),
        });
        self.send(&ev)
    }

    // ------------------------------------------------------------------ the A2A message

    fn message(&self, message_id: &str, parts: Vec<Value>, task_id: Option<&str>) -> Value {
        let cwd = self.with_thread(|t| t.doc.cwd.clone()).unwrap_or_default();
        let meta = upstream::metadata(&self.a.props, self.lang(), &cwd);
        upstream::message(message_id, parts, meta, &self.context_id, task_id)
    }

    /// An event that names another task or context than this run's (absent ids are allowed).
    fn check_identity(&self, ev: &A2aEvent, task: &str) -> Stage<()> {
        if crate::adapter::rules::identity::foreign_event(ev, task, &self.context_id) {
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

    fn rejected(&self, e: &RpcError) -> Stop {
        if e.is_backup_not_ready() {
            let text = if e.message.is_empty() || e.message == BACKUP_NOT_READY_EN {
                Msg::SessionBackupNotReady.text(self.lang()).to_string()
            } else {
                e.message.clone()
            };
            Stop::Fail(Code::SessionBackupNotReady, text, Cleanup::Keep)
        } else if e.code == Some(INVALID_PARAMS) {
            // The answer, not the kernel, is at fault: an input error the client can fix,
            // never "unavailable", which clients retry unchanged.
            // A guidance message is not an answer: no question is left open.
            let (code, msg) = if self.a.kind == RunKind::Guidance {
                (Code::InvalidInput, Msg::GuidanceRejectedByAgent)
            } else {
                (Code::ResumeRejected, Msg::ResumeRejectedByAgent)
            };
            let text = msg.text(self.lang()).replace("{reason}", e.message.trim());
            Stop::Fail(code, text, Cleanup::Keep)
        } else {
            self.fail(
                Code::A2aUnavailable,
                Msg::A2aRejectedResponse,
                Cleanup::Keep,
            )
        }
    }

    // ------------------------------------------------------------------ endings

    /// Mark the execution terminal: task forgotten, listed as terminal, out of the live index.
    /// `false`: the save failed (the thread's file still shows the execution live).
    fn mark_terminal(&self, clear_pending: bool) -> bool {
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
        r.is_ok()
    }

    fn pending_empty(&self) -> bool {
        self.with_thread(|t| t.doc.execution.pending.is_empty())
            .unwrap_or(true)
    }

    fn cancel_task_best_effort(&self) {
        if let Some(t) = self.task_id() {
            // This run's own session may be aborted already: use a fresh one.
            if let Err(e) = self.sh.kernel.session().cancel_task(&t) {
                log::warn!("run {}: cancelling the task failed: {e}", self.a.run_id);
            }
        }
    }

    #[inline(never)]
    fn cleanup(&mut self, c: Cleanup) {
        match c {
            Cleanup::Keep => {}
            Cleanup::CancelIfIdle => {
                if self.pending_empty() && self.a.kind != RunKind::Guidance {
                    self.cancel_task_best_effort();
                }
            }
            // Already an error; a failed save here is logged by `mark_terminal`.
            Cleanup::FailClosed => {
                self.cancel_task_best_effort();
                let _ = self.mark_terminal(true);
            }
            Cleanup::Lost => {
                let _ = self.mark_terminal(true);
            }
        }
    }

    /// Session event (REC: always before the terminal, guidance excepted), spans closed
    /// (REC: also before RUN_ERROR), then exactly one terminal event.
    #[inline(never)]
    fn finish(&mut self, end: Ending) {
        // One decision with the cancel route: when it claimed the end first it has answered
        // `cancelled` and retired the execution, so the run ends cancelled too.
        let end = if self.decide(LifeEvent::OwnEnd).has(Effect::EndOwn) {
            end
        } else {
            Ending::Error(Code::Cancelled, Msg::Cancelled.text(self.lang()).into())
        };
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
        // Fail closed: a run whose conversation could not be kept does not end as a success
        // or an interrupt (its pending inputs stay; a resume can answer them).
        let end = if self.record_turn() {
            end
        } else {
            Ending::error(
                Code::StatePersistenceFailed,
                Msg::PersistHistory,
                self.lang(),
            )
        };
        let usage = if guidance {
            Vec::new()
        } else {
            self.mapper.usage()
        };
        let used = crate::agui::events::RunUsage::of(&usage);
        crate::trace::note_usage(used.input_tokens, used.output_tokens);
        let now = self.sh.env.now_ms();
        for h in &mut self.a.holds {
            h.ended(now, used);
        }
        let mut event = end.terminal(
            &self.a.thread.id,
            &self.a.run_id,
            usage.clone(),
            &self.a.dialect,
        );
        let interrupt = matches!(
            &event,
            Event::RunFinished {
                outcome: Outcome::Interrupt(_),
                ..
            }
        );
        // Fail closed: a run whose end could not be saved is not reported as a success.
        if !guidance && !interrupt && self.pending_empty() && !self.mark_terminal(false) {
            event = Ending::error(
                Code::StatePersistenceFailed,
                Msg::PersistTerminal,
                self.lang(),
            )
            .terminal(&self.a.thread.id, &self.a.run_id, usage, &self.a.dialect);
        }
        let outcome = crate::adapter::run::ending::outcome_label(&event);
        crate::adapter::audited::run_end(
            self.sh,
            (&self.a.origin, &self.a.thread, &self.a.run_id),
            &self.execution_id,
            outcome,
            used,
        );
        self.stream.note_outcome(&self.execution_id, outcome);
        crate::metrics::M.runs.inc(outcome);
        let ev = self.stamp(event);
        // Release first: a client that reacts to the terminal event at once must find the
        // thread free (the reference releases after writing it, a race).
        self.release();
        let _ = self.stream.terminal(&ev.to_json());
    }

    /// After a panic: fail closed (the task is cancelled, the execution retired, nothing left
    /// pending) and the thread released.
    #[inline(never)]
    fn after_panic(&mut self) {
        log::error!(
            "run {} panicked: its task is cancelled and its thread released",
            self.a.run_id
        );
        // The cell says what a panic means here: fail closed, whoever had claimed the end.
        if self
            .a
            .cell
            .send(LifeEvent::Panicked)
            .has(Effect::FailClosed)
            && self.a.kind != RunKind::Guidance
        {
            self.cancel_task_best_effort();
            let _ = self.mark_terminal(true);
        }
        self.release();
    }

    fn release(&self) {
        if self.a.kind != RunKind::Guidance {
            let run = self.a.run_id.clone();
            let pending = self.with_thread(|t| {
                if t.active_run.as_deref() == Some(run.as_str()) {
                    t.active_run = None;
                }
                !t.doc.execution.pending.is_empty()
            });
            // Its end record set the listed status already, unless there was none (a panic).
            self.sh
                .registry
                .settle(&self.a.thread, &run, pending.unwrap_or(false));
        }
        self.sh.registry.touch();
        self.a.cell.send(LifeEvent::Released);
        self.sh.forget_run(&self.execution_id, &self.a.cell);
    }
}
