//! Cross-origin browser access (`--cors-origins`, issue 46): exact origins only, never `*`,
//! since every answer allows credentials (a bearer token in `Authorization`). Pure: the head
//! decision (`routes::decide`) answers preflights and refuses unlisted origins; the loop adds
//! [`Cors::answer_headers`] to every answer of a listed origin (errors and streams too).
//!
//! Without the option nothing here runs: no `Access-Control-*` header is ever sent and a
//! preflight gets the 405 it always did.

use crate::server::http::{RequestHead, Response};

/// What a browser may send beyond the CORS-safelisted headers.
const ALLOW_HEADERS: &str =
    "Authorization, Content-Type, Accept, Accept-Language, Last-Event-ID, X-Iac-Code-Thread-Id";

/// Answer headers a client reads: the 503/429 back-off and the routing key echoed.
const EXPOSE_HEADERS: &str = "Retry-After, X-Iac-Code-Thread-Id";

/// The configured origins and the headers a preflight allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    origins: Vec<String>,
    allow_headers: String,
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
        }
    }

    /// The server's CORS from `--cors-origins` (none when it lists nothing); the identity
    /// header, when callers are named by one, is allowed in requests.
    pub(crate) fn configured(origins: &[String], identity: &crate::auth::Identity) -> Option<Cors> {
        let header = match identity {
            crate::auth::Identity::Header { name, .. } => Some(name.as_str()),
            _ => None,
        };
        (!origins.is_empty()).then(|| Cors::new(origins.to_vec(), header))
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
    fn the_identity_header_is_allowed_and_no_origins_mean_no_cors() {
        let header = crate::auth::Identity::Header {
            name: "x-forwarded-user".into(),
            token: None,
        };
        let origins = vec!["http://localhost:5173".to_string()];
        let cors = Cors::configured(&origins, &header).unwrap();
        assert!(cors.allow_headers.ends_with(", x-forwarded-user"));
        let shared = crate::auth::Identity::shared(None);
        let cors = Cors::configured(&origins, &shared).unwrap();
        assert_eq!(cors.allow_headers, ALLOW_HEADERS);
        assert!(Cors::configured(&[], &header).is_none());
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
            allow.ends_with("X-Iac-Code-Thread-Id, x-forwarded-user"),
            "{allow}"
        );
    }
}
