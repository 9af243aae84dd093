//! `GET /usage?days=N` (issue 44): the calling caller's own usage, its days and its quotas.
//! Found from the head by [`find`] (an extra's route table, `RouteConfig::extra_routes`),
//! answered by [`answer`].

use crate::adapter::Shared;
use crate::agui::field::{FieldError, Problem};
use crate::app::{ExtraRequest, query_pairs};
use crate::errors::ApiError;
use crate::routes::ExtraPath;
use crate::server::http::Response;

/// The extra the route is (`Backend::extra` hands it back by it).
const EXTRA: &str = "usage";
const ROUTE: &str = "/usage";

/// `/usage`, as its path decodes.
pub(crate) fn find(raw: &str) -> Option<ExtraPath> {
    (crate::server::http::percent_decode(raw) == ROUTE).then_some(ExtraPath {
        extra: EXTRA,
        route: ROUTE,
        allow: "GET",
        body: None,
        id: None,
    })
}

/// `days`: 1..=`quota::DAYS_KEPT`, default `limits::USAGE_DEFAULT_DAYS`.
fn days(query: &str) -> Result<usize, FieldError> {
    let pairs = query_pairs(query)?;
    match pairs.iter().find(|(k, _)| k == "days") {
        None => Ok(crate::limits::USAGE_DEFAULT_DAYS),
        Some((_, v)) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=crate::quota::DAYS_KEPT).contains(n))
            .ok_or_else(|| FieldError::new("days", Problem::Value)),
    }
}

/// The calling caller's own totals and days, and its quotas.
pub(crate) fn answer(sh: &Shared, req: ExtraRequest) -> Response {
    let days = match days(&req.work.query) {
        Ok(d) => d,
        Err(e) => return ApiError::invalid_field(&e, req.lang),
    };
    let caller = &req.caller;
    let list = sh.policies.quotas.days(caller, days);
    let limits = sh.policies.limits_of(caller);
    let mut quotas = serde_json::Map::new();
    if let Some(n) = limits.max_runs {
        quotas.insert("maxRuns".into(), n.into());
    }
    if let Some(n) = limits.rate_per_min {
        quotas.insert("ratePerMinute".into(), n.into());
    }
    let body = serde_json::json!({
        "caller": caller.name().unwrap_or("shared"),
        "running": sh.policies.quotas.running(caller),
        "quotas": quotas,
        "total": crate::quota::total_json(&list),
        "days": list
            .iter()
            .map(|(d, v)| crate::quota::day_json(d, v))
            .collect::<Vec<_>>(),
    });
    Response::json(200, serde_json::to_vec(&body).unwrap_or_default())
}
