//! The quotas wired into the server: admission's gate (`adapter::policies`), `GET /usage` (a
//! route of the extra's own, found by `find` and answered by `answer`), the usage flush (a chore, and a last one
//! once the server stopped), and their metrics' counts.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Day, Limits, Over, OwnLimits, Quotas, Settings, Ticket, UsageFiles};
use crate::adapter::Shared;
use crate::adapter::state::policies::{Entry, Gate, Hold, Refusal};
use crate::agui::events::RunUsage;
use crate::agui::field::{FieldError, Problem};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::principal::Caller;
use crate::server::http::Response;

/// How often callers' usage is written to their `~usage.json` (a crash loses at most this).
const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// Days `GET /usage` answers when `days` is not given.
const DEFAULT_DAYS: usize = 31;

/// Per-caller quotas (issue 44): concurrent runs and admissions per minute, checked once the
/// request is known to be well formed, before anything is written. Guidance joins a run
/// already counted.
pub(crate) struct QuotaGate {
    quotas: Arc<Quotas>,
    /// Where a caller's own quotas come from (the tokens file), if callers have any.
    own: Option<Arc<dyn OwnLimits>>,
}

impl QuotaGate {
    /// The quotas `caller` is held to: the options, with its own over them.
    fn limits_of(&self, caller: &Caller) -> Limits {
        let own = self
            .own
            .as_ref()
            .map_or_else(Limits::default, |o| o.own_limits(caller));
        self.quotas.defaults().over(own)
    }
}

impl Gate for QuotaGate {
    fn enter(&self, e: &Entry<'_>) -> Result<Option<Box<dyn Hold>>, Refusal> {
        if e.guidance {
            return Ok(None);
        }
        let limits = self.limits_of(e.caller);
        match self.quotas.admit(e.caller, limits, e.now_ms) {
            Ok(ticket) => Ok(Some(Box::new(ticket))),
            Err(over) => Err(rate_limited(over, e.lang)),
        }
    }
}

impl Hold for Ticket {
    fn started(&mut self) {
        self.start();
    }
    fn ended(&mut self, now_ms: u64, used: RunUsage) {
        self.used(now_ms, used);
    }
}

/// `429 RATE_LIMITED` before the stream, `Retry-After` in seconds.
fn rate_limited(over: Over, lang: Lang) -> Refusal {
    crate::metrics::M.quota_refusals.inc(over.label());
    let msg = match over {
        Over::Runs { .. } => Msg::RateLimitedRuns,
        Over::Rate { .. } => Msg::RateLimitedRate,
    };
    Refusal::from(
        ApiError::new(Code::RateLimited, msg)
            .response(lang)
            .with_header("retry-after", over.retry_after().to_string()),
    )
}

/// `GET /usage?days=N`: the calling caller's own totals and days, and its quotas.
/// The route as spans name it, and the extra that answers it (`extras::answer`).
const ROUTE: &str = "/usage";
pub(crate) const EXTRA: &str = "usage";

/// `GET /usage`, as its path decodes (found from the head: `extras::worker_routes`).
pub(crate) fn find(raw: &str) -> Option<crate::routes::ExtraPath> {
    (crate::server::http::percent_decode(raw) == ROUTE).then_some(crate::routes::ExtraPath {
        extra: EXTRA,
        route: ROUTE,
        allow: "GET",
        body: None,
        id: None,
    })
}

/// The calling caller's own totals and days, and its quotas (`extras::answer`).
pub(crate) fn answer(sh: &Shared, req: crate::app::ExtraRequest) -> Response {
    let Some(g) = sh.policies.gate::<QuotaGate>() else {
        return Response::text(404, "Not Found");
    };
    let (caller, lang) = (&req.caller, req.lang);
    let days = match days(&req.work.query) {
        Ok(d) => d,
        Err(e) => return e.response(lang),
    };
    let list = g.quotas.days(caller, days);
    let limits = g.limits_of(caller);
    let mut quotas = serde_json::Map::new();
    if let Some(n) = limits.max_runs {
        quotas.insert("maxRuns".into(), n.into());
    }
    if let Some(n) = limits.rate_per_min {
        quotas.insert("ratePerMinute".into(), n.into());
    }
    let body = serde_json::json!({
        "caller": caller.name().unwrap_or("shared"),
        "running": g.quotas.running(caller),
        "quotas": quotas,
        "total": super::total_json(&list),
        "days": list
            .iter()
            .map(|(d, v): &(String, Day)| super::day_json(d, v))
            .collect::<Vec<_>>(),
    });
    Response::json(200, serde_json::to_vec(&body).unwrap_or_default())
}

/// `days`: 1 to `DAYS_KEPT` (default `DEFAULT_DAYS`).
fn days(query: &str) -> Result<usize, FieldError> {
    let pairs = crate::app::requests::query_pairs(query)?;
    match pairs.iter().find(|(k, _)| k == "days") {
        None => Ok(DEFAULT_DAYS),
        Some((_, v)) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=super::DAYS_KEPT).contains(n))
            .ok_or_else(|| FieldError::new("days", Problem::Value)),
    }
}

impl Settings {
    /// The extra's `with_*` builder: callers held to the quotas at admission (a principal's
    /// own from `own`, the tokens file), their usage kept in `files`.
    pub(crate) fn with_quotas(
        &self,
        mut sh: Shared,
        files: Arc<dyn UsageFiles>,
        own: Option<Arc<dyn OwnLimits>>,
    ) -> Shared {
        // Principals from a tokens file are a bounded set: `/metrics` may name them.
        let quotas = Quotas::new(self.limits, Some(files)).with_named_metrics(own.is_some());
        let gate = QuotaGate {
            quotas: Arc::new(quotas),
            own,
        };
        sh.policies.add_gate(Arc::new(gate));
        sh
    }

    /// Usage reaches its files here, not at each run's end (no fsync more per run).
    pub(crate) fn chores(&self, sh: &Arc<Shared>) -> Vec<crate::chores::Chore> {
        let weak: Weak<Shared> = Arc::downgrade(sh);
        vec![crate::chores::Chore::every(FLUSH_EVERY, move || {
            let Some(sh) = weak.upgrade() else {
                return false;
            };
            flush(&sh);
            true
        })]
    }

    /// What the last flush period counted.
    pub(crate) fn stop(&self, sh: &Shared) {
        flush(sh);
    }
}

fn flush(sh: &Shared) {
    if let Some(g) = sh.policies.gate::<QuotaGate>() {
        g.quotas.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Caller {
        Caller::named(b"alice").unwrap()
    }

    /// A tokens file whose only quota is alice's own line.
    struct Lines(Limits);

    impl OwnLimits for Lines {
        fn own_limits(&self, caller: &Caller) -> Limits {
            if *caller == alice() {
                self.0
            } else {
                Limits::default()
            }
        }
    }

    fn enter(
        g: &QuotaGate,
        caller: &Caller,
        guidance: bool,
    ) -> Result<Option<Box<dyn Hold>>, Response> {
        let e = Entry {
            caller,
            guidance,
            now_ms: 0,
            lang: Lang::En,
        };
        g.enter(&e).map_err(Refusal::into_response)
    }

    /// Where quotas meet identity: the gate puts a caller's own quotas (its tokens-file
    /// line, through `OwnLimits`) over the options', and only that caller's.
    #[test]
    fn a_callers_own_quotas_from_its_identity_go_over_the_options() {
        let options = Limits {
            max_runs: Some(3),
            rate_per_min: None,
        };
        let own = Limits {
            max_runs: Some(1),
            rate_per_min: None,
        };
        let gate = QuotaGate {
            quotas: Arc::new(Quotas::new(options, None)),
            own: Some(Arc::new(Lines(own))),
        };
        let bob = Caller::named(b"bob").unwrap();
        let _held = enter(&gate, &alice(), false).unwrap();
        let Err(r) = enter(&gate, &alice(), false) else {
            panic!("alice's own max_runs=1 let a second run in");
        };
        assert_eq!(r.status, 429);
        assert!(
            r.headers
                .iter()
                .any(|(k, v)| *k == "retry-after" && v == "5")
        );
        // Guidance joins a run already counted.
        assert!(enter(&gate, &alice(), true).unwrap().is_none());
        // Bob has no line of his own: the options hold him.
        let bobs: Vec<_> = (0..3).map(|_| enter(&gate, &bob, false).unwrap()).collect();
        assert!(enter(&gate, &bob, false).is_err());
        drop(bobs);
        // Without an identity that sets any, the options hold everyone.
        let gate = QuotaGate {
            quotas: Arc::new(Quotas::new(options, None)),
            own: None,
        };
        let _held: Vec<_> = (0..3)
            .map(|_| enter(&gate, &alice(), false).unwrap())
            .collect();
        assert!(enter(&gate, &alice(), false).is_err());
    }
}
