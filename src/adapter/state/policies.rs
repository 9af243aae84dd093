//! The policies a run or a Stop answers to beside the reference's rules: admission's gates
//! (per-caller quotas, in one list) and the decisions' record (the audit log). Each is an
//! extra that plugs in here, so admission (`adapter/routes/run/`), the cancel route and the
//! thread routes name none of the extras' types.

use std::sync::Arc;

use crate::adapter::routes::run::Refusal;
use crate::i18n::Lang;
use crate::principal::Caller;

/// What a gate sees of a run asking in: who, whether it joins a run already counted
/// (guidance), when, and the language of a refusal.
pub(crate) struct Entry<'a> {
    pub(crate) caller: &'a Caller,
    pub(crate) guidance: bool,
    pub(crate) now_ms: u64,
    pub(crate) lang: Lang,
}

/// One admission gate: lets a well-formed run in, or refuses it before its thread is touched
/// (nothing is written); what it lets in it may hold for the run's life.
pub(crate) trait Gate: Send + Sync {
    fn enter(&self, entry: &Entry<'_>) -> Result<Option<Box<dyn Hold>>, Refusal>;
}

/// What a gate holds for an admitted run (a quota's place): told when the run starts and
/// what it used when it ends; dropped with the run (a run that never started gives it back).
pub(crate) trait Hold: Send {
    fn started(&mut self);
    fn ended(&mut self, now_ms: u64, used: crate::quota::Used);
}

/// The extras' policies, each set up by its `with_*` builder on `Shared`.
#[derive(Default)]
pub struct Policies {
    /// Admission's gates, in the order they are asked.
    gates: Vec<Box<dyn Gate>>,
    /// Each decision's record, written before it is acknowledged (`--audit-log`).
    pub(crate) audit: crate::audit::Audit,
    /// Per-caller quotas and usage (the `/usage` route reads them too), and who is calling:
    /// a caller's credentials may set its own (a tokens-file line).
    pub(crate) quotas: Arc<crate::quota::Quotas>,
    identity: Option<crate::auth::Identity>,
}

impl Policies {
    /// The gates, in order.
    pub(crate) fn gates(&self) -> &[Box<dyn Gate>] {
        &self.gates
    }

    pub(crate) fn set_audit(&mut self, audit: crate::audit::Audit) {
        self.audit = audit;
    }

    /// Hold callers to `quotas` (a principal's credentials may set its own, `identity` says
    /// them): one gate (set up once, at start-up).
    pub(crate) fn set_quotas(
        &mut self,
        quotas: Arc<crate::quota::Quotas>,
        identity: crate::auth::Identity,
    ) {
        self.quotas = quotas.clone();
        self.identity = Some(identity.clone());
        self.gates.push(Box::new(QuotaGate { quotas, identity }));
    }

    /// The quotas `caller` is held to: the options, with its tokens-file line's over them.
    pub(crate) fn limits_of(&self, caller: &Caller) -> crate::quota::Limits {
        limits_of(&self.quotas, self.identity.as_ref(), caller)
    }
}

fn limits_of(
    quotas: &crate::quota::Quotas,
    identity: Option<&crate::auth::Identity>,
    caller: &Caller,
) -> crate::quota::Limits {
    let own = identity.map(|i| i.own_limits(caller)).unwrap_or_default();
    quotas.defaults().over(crate::quota::Limits {
        max_runs: own.max_runs,
        rate_per_min: own.rate_per_min,
    })
}

/// Per-caller quotas (issue 44): concurrent runs and admissions per minute, checked once the
/// request is known to be well formed, before anything is written. Guidance joins a run
/// already counted.
struct QuotaGate {
    quotas: Arc<crate::quota::Quotas>,
    identity: crate::auth::Identity,
}

impl Gate for QuotaGate {
    fn enter(&self, e: &Entry<'_>) -> Result<Option<Box<dyn Hold>>, Refusal> {
        if e.guidance {
            return Ok(None);
        }
        let limits = limits_of(&self.quotas, Some(&self.identity), e.caller);
        match self.quotas.admit(e.caller, limits, e.now_ms) {
            Ok(ticket) => Ok(Some(Box::new(ticket))),
            Err(over) => Err(rate_limited(over, e.lang)),
        }
    }
}

impl Hold for crate::quota::Ticket {
    fn started(&mut self) {
        self.start();
    }
    fn ended(&mut self, now_ms: u64, used: crate::quota::Used) {
        self.used(now_ms, used);
    }
}

/// `429 RATE_LIMITED` before the stream, `Retry-After` in seconds.
fn rate_limited(over: crate::quota::Over, lang: Lang) -> Refusal {
    use crate::catalog::Msg;
    use crate::errors::{ApiError, Code};
    crate::metrics::M.quota_refusals.inc(over.label());
    let msg = match over {
        crate::quota::Over::Runs { .. } => Msg::RateLimitedRuns,
        crate::quota::Over::Rate { .. } => Msg::RateLimitedRate,
    };
    Refusal::from(
        ApiError::new(Code::RateLimited, msg)
            .response(lang)
            .with_header("retry-after", over.retry_after().to_string()),
    )
}
