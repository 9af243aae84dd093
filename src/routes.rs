//! The route table and the checks that need only the request head (reference §1.1–§1.6):
//! Host → the extras' checks ([`HeadCheck`]: CORS's `Origin`, the console's page) → route →
//! the extras' checks of a route (CORS's preflight) → method → auth → Content-Type → body
//! limit. Pure: no I/O.

use crate::auth::{Identity, MetricsAccess, Refusal};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::{self, Lang};
use crate::limits;
use crate::principal::Caller;
use crate::server::HeadDecision;
use crate::server::http::{self, RequestHead, Response};

/// The routes that read a body and are worked on a worker thread: what the head decision
/// hands the worker, typed (the worker never parses the path again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    Run,
    Cancel {
        execution_id: String,
    },
    Subscribe {
        execution_id: String,
    },
    /// A route of an extra's (`RouteConfig::extra_routes`), answered with one response.
    /// Boxed: a worker's first frames hold a `Work` for a stream's whole life.
    Extra(Box<ExtraWork>),
}

impl Work {
    /// The one method the route takes.
    fn method(&self) -> &'static str {
        match self {
            Work::Run | Work::Cancel { .. } | Work::Subscribe { .. } => "POST",
            Work::Extra(w) => w.method,
        }
    }

    /// Whether the route reads a JSON body.
    fn has_body(&self) -> bool {
        match self {
            Work::Extra(w) => w.body.is_some(),
            _ => true,
        }
    }
}

/// A path one of an extra's routes names: what `RouteConfig::extra_routes` finds for a raw
/// path (each segment decoded on its own: an id may hold `/` once decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraPath {
    /// Whose route it is (the extra's feature): its answer is that extra's
    /// (`Backend::extra`).
    pub extra: &'static str,
    /// The route as spans name it (`/threads/{threadId}`); its extra answers by it.
    pub route: &'static str,
    /// The methods it takes, as an `allow` header lists them (`GET, PATCH, DELETE`).
    pub allow: &'static str,
    /// The method that reads a JSON body, and what a body too large is told.
    pub body: Option<(&'static str, Msg)>,
    /// The path's parameter, percent-decoded (a thread id).
    pub id: Option<String>,
}

impl ExtraPath {
    /// `method`, when the route takes it.
    fn method(&self, method: &str) -> Option<&'static str> {
        self.allow.split(", ").find(|m| *m == method)
    }
}

/// A request on an extra's route, as the head decided it: what the worker hands the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraWork {
    pub extra: &'static str,
    pub route: &'static str,
    /// The request's method, one the route takes.
    pub method: &'static str,
    /// What a body too large is told, when this method reads one.
    pub body: Option<Msg>,
    pub id: Option<String>,
    /// The raw query (read on the worker).
    pub query: String,
}

/// A body route with the principal it acts for (decided from the head, on the loop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    pub work: Work,
    pub caller: Caller,
}

const CANCEL_PREFIX: &str = "/extensions/iac-code/v1/executions/";
const CANCEL_SUFFIX: &str = "/cancel";
const SUBSCRIBE_SUFFIX: &str = "/subscribe";

/// Every route: the ones answered from the head, and the body routes a worker takes (the
/// core's, and the extras' found in `RouteConfig::extra_routes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Health,
    Metrics,
    Capabilities,
    Work(Work),
    Extra(ExtraPath),
}

impl Route {
    fn allow(&self) -> &'static str {
        match self {
            Route::Health | Route::Metrics | Route::Capabilities => "HEAD, GET",
            Route::Work(w) => w.method(),
            Route::Extra(p) => p.allow,
        }
    }

    fn accepts(&self, method: &str) -> bool {
        match self {
            Route::Health | Route::Metrics | Route::Capabilities => {
                method == "GET" || method == "HEAD"
            }
            Route::Work(w) => method == w.method(),
            Route::Extra(p) => p.method(method).is_some(),
        }
    }
}

/// Match a percent-decoded path against the route table.
pub(crate) fn match_route(path: &str) -> Option<Route> {
    match path {
        "/health" => return Some(Route::Health),
        "/metrics" => return Some(Route::Metrics),
        "/capabilities" => return Some(Route::Capabilities),
        "/" => return Some(Route::Work(Work::Run)),
        _ => {}
    }
    let rest = path.strip_prefix(CANCEL_PREFIX)?;
    let (id, subscribe) = match rest.strip_suffix(CANCEL_SUFFIX) {
        Some(id) => (id, false),
        None => (rest.strip_suffix(SUBSCRIBE_SUFFIX)?, true),
    };
    if id.is_empty() || id.contains('/') {
        return None;
    }
    let execution_id = id.to_string();
    Some(Route::Work(if subscribe {
        Work::Subscribe { execution_id }
    } else {
        Work::Cancel { execution_id }
    }))
}

/// Which `Host` header values are answered. A web page can reach a loopback server through
/// DNS rebinding (its own name resolving to 127.0.0.1); the browser then sends that name as
/// `Host`, so a loopback listener answers only loopback names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostRule {
    /// Every Host (a non-loopback listener without `--allowed-hosts`, or `*`).
    Any,
    /// `localhost`, `127.0.0.1` and `[::1]`, any port.
    Loopback,
    /// Exactly these names (lowercase, without port).
    Names(Vec<String>),
}

impl HostRule {
    /// The rule for a listener: `allowed` is `--allowed-hosts` split on commas, if given.
    pub(crate) fn for_listener(loopback: bool, allowed: Option<&[String]>) -> HostRule {
        match allowed {
            None if loopback => HostRule::Loopback,
            None => HostRule::Any,
            Some(names) if names.iter().any(|n| n.trim() == "*") => HostRule::Any,
            Some(names) => HostRule::Names(
                names
                    .iter()
                    .map(|n| n.trim().to_ascii_lowercase())
                    .filter(|n| !n.is_empty())
                    .collect(),
            ),
        }
    }

    /// Whether a request with this `Host` header (None when absent) is answered.
    pub(crate) fn allows(&self, host: Option<&[u8]>) -> bool {
        if *self == HostRule::Any {
            return true;
        }
        let Some(name) = host.and_then(crate::authority::host_name) else {
            return false;
        };
        match self {
            HostRule::Any => true,
            HostRule::Loopback => matches!(name.as_str(), "localhost" | "127.0.0.1" | "[::1]"),
            HostRule::Names(names) => names.contains(&name),
        }
    }
}

/// What an extra adds to the head decision ([`decide`]), each at its point of the order; the
/// extras' own (`crate::extras::routes`), so that the head decision names none of them. Each
/// point asks them in the order of [`RouteConfig::checks`]; the first answer is sent.
pub(crate) trait HeadCheck: std::fmt::Debug + Send + Sync {
    /// After the Host rule, before the route table (`path` percent-decoded): an answer of the
    /// extra's own (a refusal, a route of its own), or `None` to go on.
    fn before_routes(&self, _head: &RequestHead, _path: &str, _default: Lang) -> Option<Response> {
        None
    }

    /// Once the route table found a route taking the methods `allow`, before the method is
    /// checked.
    fn on_route(&self, _head: &RequestHead, _allow: &str) -> Option<Response> {
        None
    }

    /// Headers for every answer to this request, errors and streams too
    /// (`Handler::answer_headers`).
    fn answer_headers(&self, _head: &RequestHead, _out: &mut Vec<(&'static str, String)>) {}
}

/// Static configuration of the head checks.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Which `Host` values are answered (every route).
    pub(crate) hosts: HostRule,
    /// Who is calling: the shared token (or none), the tokens file, or the identity header.
    pub(crate) identity: Identity,
    /// Who else may read `/metrics` (the metrics token, `--metrics-principals`).
    pub(crate) metrics: MetricsAccess,
    /// The exact `/health` body.
    pub(crate) health_body: Vec<u8>,
    /// The `/health` body while draining (503).
    pub(crate) draining_body: Vec<u8>,
    /// The `/health` body while the kernel is down (503).
    pub(crate) kernel_down_body: Vec<u8>,
    /// The `GET /capabilities` body (AG-UI 1.0 `AgentCapabilities`).
    pub(crate) capabilities_body: Vec<u8>,
    /// The `/health` body while the state directory cannot be written (503).
    pub(crate) store_down_body: Vec<u8>,
    /// The `/health` body while the tokens file cannot be used (503).
    pub(crate) tokens_down_body: Vec<u8>,
    /// The extras' checks and routes (CORS, the console); none in the sidecar.
    pub(crate) checks: Vec<std::sync::Arc<dyn HeadCheck>>,
    /// The extras' worker routes (`crate::extras::worker_routes`): each finds the route a raw
    /// path names, if it is one of its extra's.
    pub(crate) extra_routes: Vec<fn(&str) -> Option<ExtraPath>>,
    /// The extras' series in `/metrics` (`crate::extras::series`).
    pub(crate) extra_series: Vec<fn(&mut String)>,
    pub(crate) max_run_body: usize,
    pub(crate) max_cancel_body: usize,
    /// The language of errors when the request asks for none (`config::Config::default_lang`).
    pub(crate) default_lang: Lang,
}

impl RouteConfig {
    pub fn new(auth_token: Option<String>, health_body: Vec<u8>) -> RouteConfig {
        RouteConfig {
            hosts: HostRule::Any,
            identity: Identity::shared(auth_token),
            metrics: MetricsAccess::default(),
            draining_body: with_status(&health_body, "draining", None),
            kernel_down_body: with_status(&health_body, "unavailable", Some("kernel")),
            store_down_body: with_status(&health_body, "unavailable", Some("state")),
            tokens_down_body: with_status(&health_body, "unavailable", Some("tokens")),
            capabilities_body: b"{}".to_vec(),
            checks: Vec::new(),
            extra_routes: Vec::new(),
            extra_series: Vec::new(),
            health_body,
            max_run_body: limits::MAX_RUN_BODY,
            max_cancel_body: limits::MAX_CANCEL_BODY,
            default_lang: Lang::En,
        }
    }

    /// Find the extras' worker routes with `finds` (`crate::extras::worker_routes`), and
    /// render their `series` in `/metrics` (`crate::extras::series`).
    pub fn with_extras(
        mut self,
        finds: impl IntoIterator<Item = fn(&str) -> Option<ExtraPath>>,
        series: Vec<fn(&mut String)>,
    ) -> RouteConfig {
        self.extra_routes = finds.into_iter().collect();
        self.extra_series = series;
        self
    }

    /// The extras' headers for every answer to `head` (none without an extra that adds some).
    pub(crate) fn answer_headers(&self, head: &RequestHead) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for c in &self.checks {
            c.answer_headers(head, &mut out);
        }
        out
    }
}

/// `body` (a JSON object) with another `status` and, after it, a `reason`.
fn with_status(body: &[u8], status: &str, reason: Option<&str>) -> Vec<u8> {
    let mut v = serde_json::Map::new();
    v.insert("status".into(), status.into());
    if let Some(r) = reason {
        v.insert("reason".into(), r.into());
    }
    if let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) {
        for (k, x) in o {
            v.entry(k).or_insert(x);
        }
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What the head checks need to know about the server right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Live {
    /// Shutting down: `/health` says so and new work gets 503 `SERVER_SHUTTING_DOWN`.
    pub(crate) draining: bool,
    /// The kernel answered its last health probe.
    pub(crate) kernel_up: bool,
    /// The state directory took the last probe's write.
    pub(crate) store_up: bool,
}

/// The language for errors decided from headers alone.
pub(crate) fn header_lang(head: &RequestHead, default: Lang) -> Lang {
    let accept = head.header_str("accept-language");
    i18n::header_language(accept.as_deref(), default)
}

/// While draining, `/health` says so and new work gets 503 `SERVER_SHUTTING_DOWN` with
/// `Connection: close`; while the kernel is down `/health` answers 503.
pub(crate) fn decide(head: &RequestHead, cfg: &RouteConfig, live: Live) -> HeadDecision<Routed> {
    // `/health` reveals nothing and a probe sends whatever Host it has (a kubelet the pod's
    // address, Docker's HEALTHCHECK 127.0.0.1): answered before the Host rule.
    if head.raw_path() == "/health" && matches!(head.method.as_str(), "GET" | "HEAD") {
        return HeadDecision::Respond(health(cfg, live));
    }
    if !cfg.hosts.allows(head.header("host")) {
        return HeadDecision::Respond(host_not_allowed(
            head.header("host"),
            header_lang(head, cfg.default_lang),
        ));
    }
    let path = http::percent_decode(head.raw_path());
    // Before auth and before the routes: a refusal of CORS's reaches no worker.
    if let Some(r) = cfg
        .checks
        .iter()
        .find_map(|c| c.before_routes(head, &path, cfg.default_lang))
    {
        return HeadDecision::Respond(r);
    }
    let route = cfg
        .extra_routes
        .iter()
        .find_map(|find| find(head.raw_path()))
        .map(Route::Extra)
        .or_else(|| match_route(&path));
    let Some(route) = route else {
        return HeadDecision::Respond(not_found_or_redirect(head, &path));
    };
    if let Some(r) = cfg
        .checks
        .iter()
        .find_map(|c| c.on_route(head, route.allow()))
    {
        return HeadDecision::Respond(r);
    }
    if !route.accepts(&head.method) {
        return HeadDecision::Respond(
            Response::text(405, "Method Not Allowed").with_header("allow", route.allow().into()),
        );
    }
    let lang = header_lang(head, cfg.default_lang);
    let caller = || cfg.identity.caller(head);
    let refused = |r: Refusal| HeadDecision::Respond(refusal(r, lang));
    let work = match route {
        Route::Health => return HeadDecision::Respond(health(cfg, live)),
        Route::Capabilities => {
            if let Err(r) = caller() {
                return refused(r);
            }
            return HeadDecision::Respond(Response::json(200, cfg.capabilities_body.clone()));
        }
        Route::Metrics => {
            if let Err(r) = cfg.identity.may_read_metrics(head, &cfg.metrics) {
                return refused(r);
            }
            return HeadDecision::Respond(Response::new(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                crate::metrics::render(&cfg.extra_series).into_bytes(),
            ));
        }
        Route::Work(work) => work,
        Route::Extra(p) => Work::Extra(Box::new(ExtraWork {
            method: p.method(&head.method).unwrap_or(""),
            body: p
                .body
                .and_then(|(m, msg)| (m == head.method).then_some(msg)),
            extra: p.extra,
            route: p.route,
            id: p.id,
            query: head.query().unwrap_or("").into(),
        })),
    };
    if live.draining {
        return HeadDecision::Respond(
            ApiError::new(Code::ServerShuttingDown, Msg::ServerShuttingDown)
                .response(lang)
                .closing(),
        );
    }
    let caller = match caller() {
        Ok(c) => c,
        Err(r) => return refused(r),
    };
    if !work.has_body() {
        // No body: one that is sent anyway is too large.
        return HeadDecision::ReadBody {
            limit: 0,
            too_large: ApiError::new(Code::RequestTooLarge, Msg::RunBodyTooLarge).response(lang),
            route: Routed { work, caller },
        };
    }
    if !is_json(head.header("content-type")) {
        return HeadDecision::Respond(
            ApiError::new(Code::UnsupportedMediaType, Msg::UnsupportedMediaType).response(lang),
        );
    }
    // The subscribe body is as small as the cancel body: it shares that limit.
    let (limit, msg) = match &work {
        Work::Run => (cfg.max_run_body, Msg::RunBodyTooLarge),
        Work::Subscribe { .. } => (cfg.max_cancel_body, Msg::SubscribeBodyTooLarge),
        Work::Extra(w) => (
            cfg.max_cancel_body,
            w.body.unwrap_or(Msg::CancelBodyTooLarge),
        ),
        _ => (cfg.max_cancel_body, Msg::CancelBodyTooLarge),
    };
    HeadDecision::ReadBody {
        limit,
        too_large: ApiError::new(Code::RequestTooLarge, msg).response(lang),
        route: Routed { work, caller },
    }
}

/// 421 naming the Host received: behind a proxy that rewrites it (nginx sends the upstream's
/// address unless told `proxy_set_header Host $host;`) the operator sees which name to allow.
fn host_not_allowed(host: Option<&[u8]>, lang: Lang) -> Response {
    let got = String::from_utf8_lossy(host.unwrap_or_default());
    let got: String = crate::logging::escape(got.trim())
        .chars()
        .take(260)
        .collect();
    ApiError::with_message(
        Code::HostNotAllowed,
        Msg::HostNotAllowed.text(lang).replace("{host}", &got),
    )
}

/// 401 (naming the identity header when it is missing), 400 naming the header that cannot
/// name a principal or came twice, 403 for a known caller `/metrics` is not for.
fn refusal(r: Refusal, lang: Lang) -> Response {
    let naming = |msg: Msg, header: &str| {
        msg.text(lang)
            .replace("{field}", &crate::logging::escape(header))
    };
    match r {
        Refusal::Unauthorized => {
            ApiError::new(Code::Unauthorized, Msg::Unauthorized).response(lang)
        }
        Refusal::NoHeader { header } => ApiError::with_message(
            Code::Unauthorized,
            naming(Msg::IdentityHeaderMissing, &header),
        ),
        Refusal::BadHeader { header, .. } => {
            ApiError::invalid_input(naming(Msg::IdentityHeaderInvalid, &header))
        }
        Refusal::Repeated { header } => {
            ApiError::invalid_input(naming(Msg::HeaderRepeated, &header))
        }
        Refusal::Forbidden => ApiError::new(Code::Forbidden, Msg::MetricsForbidden).response(lang),
    }
}

/// `/health`: draining, then the kernel, then the state directory, then the tokens file
/// decide the 503s.
fn health(cfg: &RouteConfig, live: Live) -> Response {
    if live.draining {
        crate::metrics::M.unavailable.inc("health_draining");
        Response::json(503, cfg.draining_body.clone())
    } else if !live.kernel_up {
        crate::metrics::M.unavailable.inc("health_kernel");
        Response::json(503, cfg.kernel_down_body.clone())
    } else if !live.store_up {
        crate::metrics::M.unavailable.inc("health_state");
        Response::json(503, cfg.store_down_body.clone())
    } else if !cfg.identity.usable() {
        crate::metrics::M.unavailable.inc("health_tokens");
        Response::json(503, cfg.tokens_down_body.clone())
    } else {
        Response::json(200, cfg.health_body.clone())
    }
}

/// Starlette's `redirect_slashes`: a path that matches a route once its trailing slashes are
/// removed (or one is added) is redirected with 307, whatever the method.
fn not_found_or_redirect(head: &RequestHead, path: &str) -> Response {
    if path != "/" {
        let toggled = if path.ends_with('/') {
            path.trim_end_matches('/').to_string()
        } else {
            format!("{path}/")
        };
        if match_route(&toggled).is_some() {
            let host = head
                .header_str("host")
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".into());
            let mut location = format!("http://{}{}", host, encode_location(&toggled));
            if let Some(q) = head.query().filter(|q| !q.is_empty()) {
                location.push('?');
                location.push_str(&encode_location(q));
            }
            return Response::new(307, "", Vec::new()).with_header("location", location);
        }
    }
    Response::text(404, "Not Found")
}

/// Keep a Location value to visible ASCII.
fn encode_location(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_graphic() {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reference §1.4 step 3: cut at `;`, trim, case-insensitive `application/json`.
pub(crate) fn is_json(content_type: Option<&[u8]>) -> bool {
    let Some(v) = content_type else {
        return false;
    };
    let main = v.split(|&b| b == b';').next().unwrap_or(&[]);
    let main = main.trim_ascii();
    main.eq_ignore_ascii_case(b"application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(match_route("/health"), Some(Route::Health));
        assert_eq!(match_route("/"), Some(Route::Work(Work::Run)));
        assert_eq!(
            match_route("/extensions/iac-code/v1/executions/abc/cancel"),
            Some(Route::Work(Work::Cancel {
                execution_id: "abc".into()
            }))
        );
        assert_eq!(
            match_route("/extensions/iac-code/v1/executions//cancel"),
            None
        );
        assert_eq!(
            match_route("/extensions/iac-code/v1/executions/a/b/cancel"),
            None
        );
        assert_eq!(match_route("/nope"), None);
        assert_eq!(
            match_route("/extensions/iac-code/v1/executions/abc/subscribe"),
            Some(Route::Work(Work::Subscribe {
                execution_id: "abc".into()
            }))
        );
        assert_eq!(
            match_route("/extensions/iac-code/v1/executions/subscribe"),
            None
        );
    }

    /// An extra's route table of the test: `/things/{id}`, read with `GET`, changed with
    /// `PATCH` and a JSON body.
    fn things(raw: &str) -> Option<ExtraPath> {
        let id = raw.strip_prefix("/things/")?;
        Some(ExtraPath {
            extra: "things",
            route: "/things/{id}",
            allow: "GET, PATCH",
            body: Some(("PATCH", Msg::RenameBodyTooLarge)),
            id: Some(http::percent_decode(id)),
        })
    }

    fn head_fields(method: &str, target: &str, fields: &str) -> RequestHead {
        let raw = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n{fields}\r\n");
        http::parse_head(raw.as_bytes()).unwrap().unwrap().0
    }

    #[test]
    fn an_extras_route_is_found_through_its_table_only() {
        let live = Live {
            draining: false,
            kernel_up: true,
            store_up: true,
        };
        let mut cfg = RouteConfig::new(None, b"{}".to_vec());
        cfg.extra_routes = Vec::new();
        let decided = |cfg: &RouteConfig, h: RequestHead| match decide(&h, cfg, live) {
            HeadDecision::Respond(r) => Err((r.status, r.headers)),
            HeadDecision::ReadBody { limit, route, .. } => Ok((limit, route.work)),
        };
        // Without its table (a build without the extra): not found, as any unknown path.
        let got = decided(&cfg, head_fields("GET", "/things/a%2Fb", ""));
        assert_eq!(got.unwrap_err().0, 404);
        cfg.extra_routes.push(things);
        let work = |method, body, id: &str, query: &str| {
            Work::Extra(Box::new(ExtraWork {
                extra: "things",
                route: "/things/{id}",
                method,
                body,
                id: Some(id.into()),
                query: query.into(),
            }))
        };
        // Its id decoded, its query raw; a method without a body reads none.
        let got = decided(&cfg, head_fields("GET", "/things/a%2Fb?x=%41", ""));
        assert_eq!(got, Ok((0, work("GET", None, "a/b", "x=%41"))));
        // A method it does not take: 405 naming its methods.
        let (status, headers) = decided(&cfg, head_fields("DELETE", "/things/a", "")).unwrap_err();
        assert_eq!(status, 405);
        assert!(
            headers.contains(&("allow", "GET, PATCH".into())),
            "{headers:?}"
        );
        // The method that reads a body: JSON only, within the small bodies' bound.
        let patch = |fields| decided(&cfg, head_fields("PATCH", "/things/a", fields));
        assert_eq!(patch("Content-Length: 2\r\n").unwrap_err().0, 415);
        let json = "Content-Type: application/json\r\nContent-Length: 2\r\n";
        let body = Some(Msg::RenameBodyTooLarge);
        assert_eq!(
            patch(json),
            Ok((cfg.max_cancel_body, work("PATCH", body, "a", "")))
        );
    }

    #[test]
    fn loopback_listeners_answer_only_loopback_host_names() {
        // Regression (DNS rebinding): any Host used to be answered.
        let rule = HostRule::for_listener(true, None);
        for ok in [
            "localhost",
            "LOCALHOST:8000",
            "127.0.0.1",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:8000",
            "localhost.",
        ] {
            assert!(rule.allows(Some(ok.as_bytes())), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8000",
            "127.0.0.1.evil.example",
            "localhost:80x",
            "localhost@evil",
            "localhost..",
            "local..host",
            ".localhost",
            "::1",
            "",
            "127.0.0.2",
        ] {
            assert!(!rule.allows(Some(bad.as_bytes())), "{bad}");
        }
        assert!(!rule.allows(None));
        assert!(!rule.allows(Some(b"\xff")));
    }

    #[test]
    fn allowed_hosts_override_the_listener_default() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(HostRule::for_listener(false, None), HostRule::Any);
        assert_eq!(
            HostRule::for_listener(true, Some(&names(&["*"]))),
            HostRule::Any
        );
        let r = HostRule::for_listener(false, Some(&names(&["Agui.Example", " other "])));
        assert!(r.allows(Some(b"agui.example:443")));
        assert!(r.allows(Some(b"other")));
        assert!(!r.allows(Some(b"localhost")));
        let r = HostRule::for_listener(true, Some(&names(&["agui.test"])));
        assert!(
            !r.allows(Some(b"localhost")),
            "the list replaces the default"
        );
    }

    fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut raw = format!("{method} {path} HTTP/1.1\r\n");
        for (n, v) in headers {
            raw.push_str(&format!("{n}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        http::parse_head(raw.as_bytes()).unwrap().unwrap().0
    }

    const LIVE: Live = Live {
        draining: false,
        kernel_up: true,
        store_up: true,
    };

    /// What `decide` answers from the head alone (`None`: a body is read).
    fn answered(head: &RequestHead, cfg: &RouteConfig) -> Option<Response> {
        match decide(head, cfg, LIVE) {
            HeadDecision::Respond(r) => Some(r),
            HeadDecision::ReadBody { .. } => None,
        }
    }

    /// An extra's check, as CORS and the console are: a path of its own, an answer to
    /// `OPTIONS` on a route, a header on every answer.
    #[derive(Debug)]
    struct Probe;

    impl HeadCheck for Probe {
        fn before_routes(&self, _head: &RequestHead, path: &str, _: Lang) -> Option<Response> {
            (path == "/probe").then(|| Response::text(200, "probe"))
        }
        fn on_route(&self, head: &RequestHead, allow: &str) -> Option<Response> {
            (head.method == "OPTIONS")
                .then(|| Response::new(204, "", Vec::new()).with_header("x-allow", allow.into()))
        }
        fn answer_headers(&self, _head: &RequestHead, out: &mut Vec<(&'static str, String)>) {
            out.push(("x-probe", "1".into()));
        }
    }

    #[test]
    fn an_extras_checks_are_asked_at_their_points_of_the_order() {
        let mut cfg = RouteConfig::new(Some("t".into()), b"{}".to_vec());
        cfg.hosts = HostRule::Loopback;
        let local = [("Host", "localhost")];
        let get = |path: &str, headers: &[(&str, &str)], cfg: &RouteConfig| {
            answered(&head("GET", path, headers), cfg).map(|r| r.status)
        };
        // The sidecar: none.
        assert_eq!(get("/probe", &local, &cfg), Some(404));
        let options = head("OPTIONS", "/", &local);
        assert_eq!(answered(&options, &cfg).unwrap().status, 405);
        assert!(cfg.answer_headers(&options).is_empty());
        cfg.checks.push(std::sync::Arc::new(Probe));
        // Before the route table and auth, after `/health` and the Host rule.
        assert_eq!(get("/probe", &local, &cfg), Some(200));
        assert_eq!(get("/probe", &[("Host", "evil.test")], &cfg), Some(421));
        assert_eq!(get("/health", &[("Host", "evil.test")], &cfg), Some(200));
        // Once a route is found, with its methods, before its method is checked.
        let r = answered(&options, &cfg).unwrap();
        assert_eq!(r.status, 204);
        assert!(r.headers.contains(&("x-allow", "POST".into())));
        let nowhere = head("OPTIONS", "/nowhere", &local);
        assert_eq!(answered(&nowhere, &cfg).unwrap().status, 404);
        // Its headers for every answer; the rest of the order as it was.
        assert_eq!(cfg.answer_headers(&options), [("x-probe", "1".to_string())]);
        assert_eq!(get("/capabilities", &local, &cfg), Some(401));
    }

    #[test]
    fn content_type_rules() {
        assert!(is_json(Some(b"application/json")));
        assert!(is_json(Some(b"Application/JSON; charset=utf-8")));
        assert!(is_json(Some(b"  application/json  ;x")));
        assert!(!is_json(Some(b"application/json-patch+json")));
        assert!(!is_json(Some(b"text/plain")));
        assert!(!is_json(None));
    }
}
