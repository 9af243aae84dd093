//! How a run's stream reports its execution, in one place for the producer (`driver`) and the
//! subscribe route: the session event, how an execution ended, and the terminal event that
//! says so in each dialect.

use serde_json::{Value, json};

use crate::a2a::types::TaskState;
use crate::agui::dialect::Dialect;
use crate::agui::events::{Event, Outcome, Usage};
use crate::catalog::Msg;
use crate::errors::Code;
use crate::i18n::Lang;

/// What a stream may reveal about its execution (only what is durably written).
pub(crate) struct SessionFacts<'a> {
    pub(crate) thread_id: &'a str,
    pub(crate) run_id: &'a str,
    pub(crate) execution_id: &'a str,
    pub(crate) context_id: &'a str,
    pub(crate) task_id: Option<&'a str>,
    pub(crate) ros_invocation_id: &'a str,
    pub(crate) session_id: Option<&'a str>,
    /// The W3C trace id of the request that started the stream (1.0 only: the reference's
    /// event has no such key; omitted, never null, when there is none).
    pub(crate) trace_id: Option<&'a str>,
}

impl SessionFacts<'_> {
    /// `CUSTOM iac-code.session.v1`.
    pub(crate) fn event(&self) -> Event {
        let mut value = json!({
                "schemaVersion": 1,
                "threadId": self.thread_id,
                "aguiRunId": self.run_id,
                "executionId": self.execution_id,
                "contextId": self.context_id,
                "taskId": self.task_id,
                "rosInvocationId": self.ros_invocation_id,
                "sessionId": self.session_id,
        });
        if let Some(t) = self.trace_id {
            value["traceId"] = t.into();
        }
        Event::Custom {
            name: "iac-code.session.v1",
            value,
        }
    }
}

/// The trace id a session event names in `dialect`: the request's in force on this thread.
pub(crate) fn trace_id(dialect: &Dialect) -> Option<String> {
    dialect
        .session_trace_id
        .then(crate::trace::current_trace_id)
        .flatten()
}

/// How an execution ended, as its stream reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ending {
    Success,
    /// Paused on these interrupts (AG-UI objects).
    Interrupt(Vec<Value>),
    /// `RUN_ERROR` with this code and message (`CANCELLED` is a `cancelled` outcome in 1.0).
    Error(Code, String),
}

impl Ending {
    pub(crate) fn error(code: Code, msg: Msg, lang: Lang) -> Ending {
        Ending::Error(code, msg.text(lang).into())
    }

    /// A kernel task that stopped in `state`.
    pub(crate) fn of_task(state: TaskState, lang: Lang) -> Ending {
        match state {
            TaskState::Completed | TaskState::InputRequired => Ending::Success,
            TaskState::Canceled => Ending::error(Code::Cancelled, Msg::Cancelled, lang),
            _ => Ending::error(Code::A2aExecutionFailed, Msg::ExecutionFailed, lang),
        }
    }

    /// The kernel could not be followed to the end: unavailable, or (the end of a drain cut
    /// the call short) shutting down.
    pub(crate) fn unavailable(shutting_down: bool, lang: Lang) -> Ending {
        if shutting_down {
            Ending::error(Code::ServerShuttingDown, Msg::RunServerShuttingDown, lang)
        } else {
            Ending::error(Code::A2aUnavailable, Msg::A2aUnavailable, lang)
        }
    }

    /// The terminal event: `RUN_FINISHED` (success, interrupt; cancelled in 1.0) or
    /// `RUN_ERROR` (threadId/runId only in 0.1).
    pub(crate) fn terminal(
        self,
        thread_id: &str,
        run_id: &str,
        usage: Vec<Usage>,
        dialect: &Dialect,
    ) -> Event {
        let outcome = match self {
            Ending::Success => Outcome::Success,
            Ending::Interrupt(list) => Outcome::Interrupt(list),
            Ending::Error(Code::Cancelled, _) if dialect.cancel_as_outcome => Outcome::Cancelled,
            Ending::Error(code, message) => {
                return Event::run_error(
                    code,
                    message,
                    thread_id,
                    run_id,
                    usage,
                    dialect.error_ids,
                );
            }
        };
        Event::RunFinished {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            outcome,
            usage,
        }
    }
}

/// The outcome a terminal event reports, for logs and metrics.
pub(crate) fn outcome_label(terminal: &Event) -> &'static str {
    match terminal {
        Event::RunFinished { outcome, .. } => match outcome {
            Outcome::Success => "success",
            Outcome::Interrupt(_) => "interrupt",
            Outcome::Cancelled => "cancelled",
        },
        Event::RunError { code, .. } => code.as_str(),
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ending_has_one_terminal_event_per_dialect() {
        let t = |e: Ending, p| outcome_label(&e.terminal("t", "r", Vec::new(), p));
        for p in [&Dialect::V0_1, &Dialect::V1_0] {
            assert_eq!(t(Ending::Success, p), "success");
            assert_eq!(t(Ending::Interrupt(vec![json!({})]), p), "interrupt");
            assert_eq!(
                t(Ending::unavailable(false, Lang::En), p),
                "A2A_UNAVAILABLE"
            );
            assert_eq!(
                t(Ending::unavailable(true, Lang::En), p),
                "SERVER_SHUTTING_DOWN"
            );
            assert_eq!(
                t(Ending::of_task(TaskState::Failed, Lang::En), p),
                "A2A_EXECUTION_FAILED"
            );
            assert_eq!(
                t(Ending::of_task(TaskState::InputRequired, Lang::En), p),
                "success"
            );
        }
        let cancelled = || Ending::of_task(TaskState::Canceled, Lang::En);
        assert_eq!(t(cancelled(), &Dialect::V0_1), "CANCELLED");
        assert_eq!(t(cancelled(), &Dialect::V1_0), "cancelled");
        let Event::RunError { ids, .. } =
            Ending::unavailable(false, Lang::En).terminal("t", "r", Vec::new(), &Dialect::V1_0)
        else {
            panic!("a RUN_ERROR");
        };
        assert!(!ids, "no threadId/runId on a 1.0 RUN_ERROR");
    }
}
