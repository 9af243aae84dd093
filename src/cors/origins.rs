//! Cross-origin browser access (`--cors-origins`, issue 46): exact origins only, never `*`,
//! since every answer allows credentials (a bearer token in `Authorization`). Pure: as one of
//! the head decision's checks ([`HeadCheck`]) it refuses unlisted origins and answers
//! preflights; the loop adds [`Cors::answer_headers`] to every answer of a listed origin
//! (errors and streams too).
//!
//! Without the option nothing here runs: no `Access-Control-*` header is ever sent and a
//! preflight gets the 405 it always did.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::routes::HeadCheck;
use crate::server::http::{RequestHead, Response};

/// What a browser may send beyond the CORS-safelisted headers: every request header the
/// server reads. `traceparent` and `tracestate` are what OpenTelemetry's web instrumentation
/// adds to each `fetch`; without them a browser fails every call it decorates (issue 57, 6).
const ALLOW_HEADERS: &str = "Authorization, Content-Type, Accept, Accept-Language, Last-Event-ID, \
                             X-Iac-Code-Thread-Id, traceparent, tracestate";

/// Answer headers a client reads: the 503/429 back-off and the routing key echoed.
const EXPOSE_HEADERS: &str = "Retry-After, X-Iac-Code-Thread-Id";

/// The configured origins and the headers a preflight allows.
#[derive(Debug, Clone)]
pub struct Cors {
    origins: Vec<String>,
    allow_headers: String,
    /// The refused origins logged so far (shared by the clones).
    refused: Arc<Mutex<Refused>>,
}

/// The distinct origins whose refusal was logged: each once, so that a page on
/// `http://localhost:5173` refused by a server that lists `http://127.0.0.1:5173` is found in
/// the log, and a page that keeps calling does not fill it. At most
/// `limits::CORS_REFUSALS_LOGGED` of them; past that one line says that more are not logged.
#[derive(Debug, Default)]
struct Refused {
    seen: HashSet<String>,
    full: bool,
}

/// What to log for a refused origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    /// Its first refusal: the origin and the option.
    First,
    /// The first refusal of an origin once the memory is full: say that more go unlogged.
    Full,
    /// Already said.
    Quiet,
}

impl Refused {
    fn note(&mut self, origin: &str) -> Note {
        if self.seen.contains(origin) {
            return Note::Quiet;
        }
        if self.seen.len() < crate::limits::CORS_REFUSALS_LOGGED {
            self.seen.insert(origin.to_string());
            return Note::First;
        }
        if std::mem::replace(&mut self.full, true) {
            Note::Quiet
        } else {
            Note::Full
        }
    }
}

/// What a request's `Origin` means for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin<'h> {
    /// No `Origin`, or this server's own (the console): nothing to do.
    None,
    /// A listed origin: answered with its headers.
    Listed(&'h str),
    /// Any other origin: 403.
    Unlisted,
}

/// `scheme://host[:port]` as browsers serialize an origin (lowercase, no default port), or
/// why `s` is not one.
pub(crate) fn parse_origin(s: &str) -> Result<String, &'static str> {
    let s = s.trim();
    if s.contains('*') {
        return Err(
            "a wildcard (`*`) is refused: answers allow credentials, so each origin is named",
        );
    }
    let lower = s.to_ascii_lowercase();
    let (scheme, authority) = lower
        .split_once("://")
        .ok_or("an origin is scheme://host[:port]")?;
    let default_port = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => return Err("the scheme must be http or https"),
    };
    if authority.contains(['/', '?', '#', '@']) {
        return Err("an origin has no path, query or user (not even a trailing /)");
    }
    let ok = crate::authority::split(authority.as_bytes())
        .is_some_and(|(host, port)| !host.is_empty() && port.is_none_or(|p| !p.is_empty()))
        && crate::authority::host_name(authority.as_bytes()).is_some();
    if !ok {
        return Err("the host or port is not valid");
    }
    let authority = authority.strip_suffix(default_port).unwrap_or(authority);
    Ok(format!("{scheme}://{authority}"))
}

impl Cors {
    /// `origins` already checked by [`parse_origin`]; the identity header (lowercase), when
    /// callers are named by one, is allowed too.
    pub fn new(origins: Vec<String>, identity_header: Option<&str>) -> Cors {
        let mut allow_headers = ALLOW_HEADERS.to_string();
        if let Some(h) = identity_header {
            allow_headers.push_str(", ");
            allow_headers.push_str(h);
        }
        Cors {
            origins,
            allow_headers,
            refused: Arc::default(),
        }
    }

    /// The server's CORS from `--cors-origins` (none when it lists nothing); the identity
    /// header, when callers are named by one, is allowed in requests.
    pub(crate) fn configured(origins: &[String], identity_header: Option<&str>) -> Option<Cors> {
        (!origins.is_empty()).then(|| Cors::new(origins.to_vec(), identity_header))
    }

    /// The request's `Origin` against the list. Same-origin is `Origin` naming the `Host`
    /// the request came to (the Host rule, checked first, keeps rebinding names out).
    pub(crate) fn origin<'h>(&self, head: &'h RequestHead) -> Origin<'h> {
        let Some(raw) = head.header("origin") else {
            return Origin::None;
        };
        let Ok(origin) = std::str::from_utf8(raw.trim_ascii()) else {
            return Origin::Unlisted;
        };
        if self.origins.iter().any(|o| o == origin) {
            return Origin::Listed(origin);
        }
        let host = head.header("host").map(<[u8]>::trim_ascii);
        let same = origin.split_once("://").is_some_and(|(scheme, authority)| {
            matches!(scheme, "http" | "https")
                && host.is_some_and(|h| h.eq_ignore_ascii_case(authority.as_bytes()))
        });
        if same { Origin::None } else { Origin::Unlisted }
    }

    /// Log the refusal of `head`'s origin (`Origin::Unlisted`), once per distinct origin.
    pub(crate) fn log_refusal(&self, head: &RequestHead) {
        let origin = head
            .header("origin")
            .map(<[u8]>::trim_ascii)
            .unwrap_or_default();
        let origin = String::from_utf8_lossy(origin);
        let note = crate::sync::lock(&self.refused).note(&origin);
        match note {
            Note::First => log::warn!(
                "a page on {origin} was refused (403 FORBIDDEN): --cors-origins lists {}; add that \
                 origin, exactly as written here, if its page should call this server",
                self.origins.join(", ")
            ),
            Note::Full => log::warn!(
                "a page on {origin} was refused (403 FORBIDDEN); {} refused origins were logged, \
                 further ones are not",
                crate::limits::CORS_REFUSALS_LOGGED
            ),
            Note::Quiet => {}
        }
    }

    /// A CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`.
    pub(crate) fn is_preflight(head: &RequestHead) -> bool {
        head.method == "OPTIONS"
            && head.header("origin").is_some()
            && head.header("access-control-request-method").is_some()
    }

    /// The preflight's answer for a route taking `methods` (the loop adds the origin's
    /// [`Cors::answer_headers`]).
    pub(crate) fn preflight(&self, methods: &str) -> Response {
        Response::new(204, "", Vec::new())
            .with_header("access-control-allow-methods", methods.into())
            .with_header("access-control-allow-headers", self.allow_headers.clone())
            .with_header(
                "access-control-max-age",
                crate::limits::CORS_MAX_AGE.as_secs().to_string(),
            )
    }

    /// The headers of every answer to a listed origin; none for any other request.
    pub(crate) fn answer_headers(&self, head: &RequestHead) -> Vec<(&'static str, String)> {
        let Origin::Listed(origin) = self.origin(head) else {
            return Vec::new();
        };
        vec![
            ("access-control-allow-origin", origin.to_string()),
            ("access-control-allow-credentials", "true".into()),
            ("access-control-expose-headers", EXPOSE_HEADERS.into()),
            ("vary", "Origin".into()),
        ]
    }
}

impl HeadCheck for Cors {
    /// A page on an origin not listed is refused whatever it asks (before auth: its preflight
    /// carries no credentials, and its request must not reach a worker).
    fn before_routes(&self, head: &RequestHead, _path: &str, default: Lang) -> Option<Response> {
        if self.origin(head) != Origin::Unlisted {
            return None;
        }
        self.log_refusal(head);
        Some(
            ApiError::new(Code::Forbidden, Msg::OriginNotAllowed)
                .response(crate::routes::header_lang(head, default)),
        )
    }

    fn on_route(&self, head: &RequestHead, allow: &str) -> Option<Response> {
        Cors::is_preflight(head).then(|| self.preflight(allow))
    }

    fn answer_headers(&self, head: &RequestHead, out: &mut Vec<(&'static str, String)>) {
        out.append(&mut Cors::answer_headers(self, head));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut raw = format!("{method} / HTTP/1.1\r\n");
        for (n, v) in headers {
            raw.push_str(&format!("{n}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        crate::server::http::parse_head(raw.as_bytes())
            .unwrap()
            .unwrap()
            .0
    }

    /// What the head decision answers with CORS among its checks (`None`: a body is read).
    fn decided(cfg: &crate::routes::RouteConfig, h: &RequestHead) -> Option<Response> {
        let live = crate::routes::Live {
            draining: false,
            kernel_up: true,
            store_up: true,
        };
        match crate::routes::decide(h, cfg, live) {
            crate::server::HeadDecision::Respond(r) => Some(r),
            crate::server::HeadDecision::ReadBody { .. } => None,
        }
    }

    #[test]
    fn the_head_decision_refuses_unlisted_origins_first_and_answers_preflights_on_routes() {
        let mut cfg = crate::routes::RouteConfig::new(Some("t".into()), b"{}".to_vec())
            .with_extras(
                crate::extras::worker_routes().iter().map(|w| w.find),
                crate::extras::series(),
            );
        crate::cors::Settings {
            origins: vec!["http://localhost:5173".into()],
        }
        .route(&mut cfg);
        let at = |method: &str, path: &str, origin: &str, extra: &[(&str, &str)]| {
            let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            raw.push_str(&format!("Origin: {origin}\r\n"));
            for (n, v) in extra {
                raw.push_str(&format!("{n}: {v}\r\n"));
            }
            raw.push_str("\r\n");
            crate::server::http::parse_head(raw.as_bytes())
                .unwrap()
                .unwrap()
                .0
        };
        let ask = [("Access-Control-Request-Method", "POST")];
        // Refused before the route table (an unknown path too) and before auth.
        for h in [
            at("GET", "/nowhere", "http://x", &[]),
            at("OPTIONS", "/", "http://x", &ask),
            at("GET", "/capabilities", "http://x", &[]),
        ] {
            let r = decided(&cfg, &h).unwrap();
            assert_eq!(r.status, 403, "{}", h.raw_path());
            assert!(cfg.answer_headers(&h).is_empty());
        }
        // A listed origin's preflight, on a route only, allows that route's methods (an
        // extra's route too).
        let p = decided(&cfg, &at("OPTIONS", "/", PAGE, &ask)).unwrap();
        assert_eq!(p.status, 204);
        assert!(
            p.headers
                .iter()
                .any(|(n, v)| *n == "access-control-allow-methods" && v.contains("POST"))
        );
        #[cfg(feature = "threads")]
        {
            let p = decided(&cfg, &at("OPTIONS", "/threads/t1", PAGE, &ask)).unwrap();
            assert_eq!(p.status, 204);
            assert!(
                p.headers
                    .contains(&("access-control-allow-methods", "GET, PATCH, DELETE".into()))
            );
        }
        let nowhere = at("OPTIONS", "/nowhere", PAGE, &ask);
        assert_eq!(decided(&cfg, &nowhere).unwrap().status, 404);
        // Its other requests go on to auth; every answer carries the headers.
        let h = at("GET", "/capabilities", PAGE, &[]);
        assert_eq!(decided(&cfg, &h).unwrap().status, 401);
        assert!(cfg.answer_headers(&h).contains(&("vary", "Origin".into())));
    }

    const PAGE: &str = "http://localhost:5173";

    #[test]
    fn origins_are_exact_scheme_host_port_and_never_a_wildcard() {
        for (given, want) in [
            ("http://localhost:5173", "http://localhost:5173"),
            (" HTTPS://App.Example ", "https://app.example"),
            ("http://127.0.0.1:80", "http://127.0.0.1"),
            ("https://app.example:443", "https://app.example"),
            ("https://app.example:8443", "https://app.example:8443"),
            ("http://[::1]:3000", "http://[::1]:3000"),
        ] {
            assert_eq!(parse_origin(given).as_deref(), Ok(want), "{given}");
        }
        for bad in [
            "*",
            "http://*",
            "https://*.example",
            "localhost:5173",
            "ftp://x",
            "http://",
            "http://localhost:5173/",
            "http://localhost/app",
            "http://localhost?x",
            "http://user@localhost",
            "http://localhost:",
            "http://localhost:99999",
            "http://bad host",
            "null",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_refused_origin_is_logged_once_and_the_memory_is_bounded() {
        let mut r = Refused::default();
        assert_eq!(r.note("http://localhost:5173"), Note::First);
        assert_eq!(r.note("http://localhost:5173"), Note::Quiet);
        assert_eq!(r.note("http://127.0.0.1:5173"), Note::First);
        for i in 2..crate::limits::CORS_REFUSALS_LOGGED {
            assert_eq!(r.note(&format!("http://h{i}")), Note::First);
        }
        assert_eq!(r.note("http://one-more"), Note::Full);
        assert_eq!(r.note("http://and-another"), Note::Quiet);
        assert_eq!(r.note("http://localhost:5173"), Note::Quiet);
        assert_eq!(r.seen.len(), crate::limits::CORS_REFUSALS_LOGGED);
    }

    #[test]
    fn the_identity_header_is_allowed_and_no_origins_mean_no_cors() {
        let header = Some("x-forwarded-user");
        let origins = vec!["http://localhost:5173".to_string()];
        let cors = Cors::configured(&origins, header).unwrap();
        assert!(cors.allow_headers.ends_with(", x-forwarded-user"));
        let cors = Cors::configured(&origins, None).unwrap();
        assert_eq!(cors.allow_headers, ALLOW_HEADERS);
        assert!(Cors::configured(&[], header).is_none());
    }

    #[test]
    fn an_origin_is_listed_same_origin_or_refused() {
        let cors = Cors::new(vec!["http://localhost:5173".into()], None);
        let h = |o: &str| head("GET", &[("Host", "127.0.0.1:8000"), ("Origin", o)]);
        assert_eq!(
            cors.origin(&h("http://localhost:5173")),
            Origin::Listed("http://localhost:5173")
        );
        assert_eq!(cors.origin(&h("http://127.0.0.1:8000")), Origin::None);
        assert_eq!(cors.origin(&h("http://127.0.0.1:8001")), Origin::Unlisted);
        assert_eq!(cors.origin(&h("http://localhost:5174")), Origin::Unlisted);
        assert_eq!(cors.origin(&h("null")), Origin::Unlisted);
        assert_eq!(
            cors.origin(&head("GET", &[("Host", "127.0.0.1:8000")])),
            Origin::None
        );
    }

    #[test]
    fn listed_origins_get_credentials_and_vary_others_get_nothing() {
        let cors = Cors::new(
            vec!["http://localhost:5173".into()],
            Some("x-forwarded-user"),
        );
        let h = head(
            "POST",
            &[("Host", "127.0.0.1"), ("Origin", "http://localhost:5173")],
        );
        let got = cors.answer_headers(&h);
        assert!(got.contains(&(
            "access-control-allow-origin",
            "http://localhost:5173".into()
        )));
        assert!(got.contains(&("access-control-allow-credentials", "true".into())));
        assert!(got.contains(&("vary", "Origin".into())));
        let other = head("POST", &[("Host", "127.0.0.1"), ("Origin", "http://x")]);
        assert!(cors.answer_headers(&other).is_empty());
        let p = cors.preflight("POST");
        assert_eq!(p.status, 204);
        let allow = &p
            .headers
            .iter()
            .find(|(n, _)| *n == "access-control-allow-headers")
            .unwrap()
            .1;
        assert!(
            allow.ends_with("traceparent, tracestate, x-forwarded-user"),
            "{allow}"
        );
    }
}
