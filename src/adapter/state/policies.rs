//! The policies a run or a Stop answers to beside the reference's rules: admission's gates
//! (in one list) and the decisions' record. Each is an extra that plugs in here through its
//! own `with_*` builder (per-caller quotas a gate, `quota/gate.rs`; the audit log the record,
//! `adapter/audited/records.rs`), so admission (`adapter/routes/run/`), the cancel route and
//! the thread routes name none of the extras' types; in a build without them the list is
//! empty and nothing is recorded.
// What a gate or a record reads of what it is shown is unread in a build without them.
#![cfg_attr(
    not(all(feature = "quotas", feature = "audit")),
    allow(dead_code, reason = "read by the extras that plug in here")
)]

use std::any::Any;
use std::sync::Arc;

use crate::adapter::rules::admission::{RunKind, Thread};
use crate::adapter::rules::env::Env;
use crate::agui::events::RunUsage;
use crate::agui::input::ResumeEntry;
use crate::app::RequestOrigin;
use crate::errors::ApiError;
use crate::i18n::Lang;
use crate::principal::{Caller, ThreadKey};
use crate::server::http::Response;

/// A run refused before its stream: the answer to send instead (a JSON error, with the
/// facts a client needs to act on it: the busy run's ids, the interrupts it waits for, when
/// to retry).
pub(crate) struct Refusal(Box<Response>);

impl From<Response> for Refusal {
    fn from(r: Response) -> Refusal {
        Refusal(Box::new(r))
    }
}

impl Refusal {
    /// `e` in `lang`.
    pub(crate) fn of(e: ApiError, lang: Lang) -> Refusal {
        e.response(lang).into()
    }

    pub(crate) fn into_response(self) -> Response {
        *self.0
    }
}

/// What a gate sees of a run asking in: who, whether it joins a run already counted
/// (guidance), when, and the language of a refusal.
pub(crate) struct Entry<'a> {
    pub(crate) caller: &'a Caller,
    pub(crate) guidance: bool,
    pub(crate) now_ms: u64,
    pub(crate) lang: Lang,
}

/// One admission gate: lets a well-formed run in, or refuses it before its thread is touched
/// (nothing is written); what it lets in it may hold for the run's life. `Any`: the extra
/// that set it up finds it again (`Policies::gate`).
pub(crate) trait Gate: Any + Send + Sync {
    fn enter(&self, entry: &Entry<'_>) -> Result<Option<Box<dyn Hold>>, Refusal>;
}

/// What a gate holds for an admitted run (a quota's place): told when the run starts and
/// what it used when it ends; dropped with the run (a run that never started gives it back).
pub(crate) trait Hold: Send {
    fn started(&mut self);
    fn ended(&mut self, now_ms: u64, used: RunUsage);
}

/// A decision about to be acted on, for its record: whose thread, which run and execution,
/// where the request came from, and what.
pub(crate) struct Decision<'a> {
    pub(crate) origin: &'a RequestOrigin,
    pub(crate) key: &'a ThreadKey,
    pub(crate) run_id: Option<&'a str>,
    pub(crate) execution_id: Option<&'a str>,
    pub(crate) act: Act<'a>,
}

/// What was decided.
pub(crate) enum Act<'a> {
    /// A run admitted, before its admission is saved; `current` is the thread as it was (its
    /// pending interrupts say what each of a resume's answers was for).
    Admitted {
        kind: RunKind,
        current: Option<&'a Thread>,
        resume: Option<&'a [ResumeEntry]>,
    },
    /// A cancel the route is about to carry out.
    Cancel,
    /// A thread about to be deleted by its caller.
    Delete,
    /// A thread about to be deleted by `--thread-retention` (no request).
    Expire,
    /// A run's end, before its terminal event leaves: it has happened whatever the record
    /// says, so a failure to record it is the record's to log, never a refusal.
    RunEnd {
        outcome: &'static str,
        usage: RunUsage,
    },
}

/// The decisions' record: each decision is written before it is acknowledged.
pub(crate) trait Record: Send + Sync {
    /// `Err`: the decision could not be recorded, and is refused with this error (nothing
    /// is done).
    fn record(&self, env: &dyn Env, d: &Decision<'_>) -> Result<(), ApiError>;
}

/// The extras' policies, each set up by the extra's `with_*` builder (`crate::extras::shared`).
#[derive(Default)]
pub struct Policies {
    /// Admission's gates, in the order they are asked.
    gates: Vec<Arc<dyn Gate>>,
    /// Each decision's record (`--audit-log`); none: decisions are not recorded.
    record: Option<Box<dyn Record>>,
}

impl Policies {
    /// The gates, in order.
    pub(crate) fn gates(&self) -> &[Arc<dyn Gate>] {
        &self.gates
    }

    /// Ask `gate` after the gates set up before it (once, at start-up).
    pub(crate) fn add_gate(&mut self, gate: Arc<dyn Gate>) {
        self.gates.push(gate);
    }

    /// The gate of type `G` (an extra's own, to serve what it keeps).
    pub(crate) fn gate<G: Gate>(&self) -> Option<Arc<G>> {
        self.gates.iter().find_map(|g| {
            let any: Arc<dyn Any + Send + Sync> = g.clone();
            any.downcast::<G>().ok()
        })
    }

    /// Record each decision in `record` (once, at start-up).
    pub(crate) fn set_record(&mut self, record: Box<dyn Record>) {
        self.record = Some(record);
    }

    /// Record `d` before it is acted on; without a record, `Ok` at once.
    pub(crate) fn record(&self, env: &dyn Env, d: &Decision<'_>) -> Result<(), ApiError> {
        match &self.record {
            Some(r) => r.record(env, d),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quota;
    struct Other;

    impl Gate for Quota {
        fn enter(&self, _: &Entry<'_>) -> Result<Option<Box<dyn Hold>>, Refusal> {
            Ok(None)
        }
    }

    impl Gate for Other {
        fn enter(&self, _: &Entry<'_>) -> Result<Option<Box<dyn Hold>>, Refusal> {
            Ok(None)
        }
    }

    /// An extra serves what its gate keeps (`GET /usage`, the usage flush) by finding its
    /// own gate in the list, whatever else is in it.
    #[test]
    fn an_extra_finds_its_own_gate_among_the_others() {
        let mut p = Policies::default();
        assert!(p.gate::<Quota>().is_none());
        let quota = Arc::new(Quota);
        p.add_gate(Arc::new(Other));
        p.add_gate(quota.clone());
        assert!(Arc::ptr_eq(&p.gate::<Quota>().unwrap(), &quota));
        assert_eq!(p.gates().len(), 2);
    }
}
