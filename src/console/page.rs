//! The browser console (`GET /console` with `--console` or `--demo`): one self-contained page
//! embedded in the binary. Its inline style and script are allowed by hash in a strict
//! Content-Security-Policy, so nothing else can run in it and it can talk only to this server.
//! Served as one of the head decision's checks ([`HeadCheck`]), before the route table.

use base64::Engine;
use sha2::Digest;

use crate::i18n::Lang;
use crate::routes::HeadCheck;
use crate::server::http::{RequestHead, Response};

const PAGE: &str = include_str!("../console.html");

/// The page and its headers, built once at start-up.
#[derive(Debug, Clone)]
pub struct Console {
    body: Vec<u8>,
    csp: String,
}

/// The text between `open` and `close` (the first such element).
fn inner<'a>(page: &'a str, open: &str, close: &str) -> &'a str {
    let Some(start) = page.find(open).map(|i| i + open.len()) else {
        return "";
    };
    let end = page[start..].find(close).map_or(page.len(), |i| start + i);
    &page[start..end]
}

fn sha256_b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text.as_bytes()))
}

impl Console {
    /// The page. It holds no server path: it is served without auth, and reads the
    /// workspace from `/capabilities`, which asks for the token when one is set.
    pub fn new() -> Console {
        let body = PAGE;
        let script = sha256_b64(inner(PAGE, "<script>", "</script>"));
        let style = sha256_b64(inner(PAGE, "<style>", "</style>"));
        let csp = format!(
            "default-src 'none'; script-src 'sha256-{script}'; style-src 'sha256-{style}'; \
             connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'"
        );
        Console {
            body: body.as_bytes().to_vec(),
            csp,
        }
    }

    pub(crate) fn response(&self) -> Response {
        Response::new(200, "text/html; charset=utf-8", self.body.clone())
            .with_header("content-security-policy", self.csp.clone())
            .with_header("x-content-type-options", "nosniff".into())
            .with_header("cache-control", "no-store".into())
            .with_header("referrer-policy", "no-referrer".into())
    }
}

impl HeadCheck for Console {
    /// `/console`: the page is public; the API calls it makes carry the token.
    fn before_routes(&self, head: &RequestHead, path: &str, _default: Lang) -> Option<Response> {
        (path == "/console").then(|| match head.method.as_str() {
            "GET" | "HEAD" => self.response(),
            _ => Response::text(405, "Method Not Allowed").with_header("allow", "HEAD, GET".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_decision_serves_the_page_at_console_only_by_get_and_head() {
        let mut cfg = crate::routes::RouteConfig::new(Some("t".into()), b"{}".to_vec());
        let live = crate::routes::Live {
            draining: false,
            kernel_up: true,
            store_up: true,
        };
        let answer = |cfg: &crate::routes::RouteConfig, method: &str, path: &str| {
            let raw = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
            let h = crate::server::http::parse_head(raw.as_bytes())
                .unwrap()
                .unwrap()
                .0;
            match crate::routes::decide(&h, cfg, live) {
                crate::server::HeadDecision::Respond(r) => r,
                crate::server::HeadDecision::ReadBody { .. } => panic!("{method} {path}"),
            }
        };
        // Without the console, a path as any unknown one.
        assert_eq!(answer(&cfg, "GET", "/console").status, 404);
        crate::console::Settings.route(&mut cfg);
        // Public: no token asked.
        for method in ["GET", "HEAD"] {
            let r = answer(&cfg, method, "/console");
            assert_eq!(r.status, 200, "{method}");
            assert!(
                r.headers
                    .iter()
                    .any(|(n, _)| *n == "content-security-policy")
            );
        }
        let post = answer(&cfg, "POST", "/console");
        assert_eq!(post.status, 405);
        assert!(post.headers.contains(&("allow", "HEAD, GET".into())));
        assert_eq!(answer(&cfg, "GET", "/console/").status, 404);
        assert_eq!(answer(&cfg, "GET", "/capabilities").status, 401);
    }

    #[test]
    fn the_policy_allows_exactly_the_page_s_own_script_and_style() {
        let c = Console::new();
        let body = String::from_utf8(c.body.clone()).unwrap();
        // Regression (second red-team, fault 3): the page embedded a server path, served to
        // anyone.
        assert!(
            !body.contains("{{") && !body.contains("/tmp") && !body.contains("iac-default-cwd")
        );
        // One inline script and one style, no external resource, no inline handlers.
        assert_eq!(body.matches("<script").count(), 1);
        assert_eq!(body.matches("<style").count(), 1);
        for bad in [
            "src=\"http",
            "href=\"http",
            " onclick=\"",
            " onload=\"",
            "style=\"",
        ] {
            assert!(!body.contains(bad), "{bad}");
        }
        let script = inner(&body, "<script>", "</script>");
        assert!(c.csp.contains(&format!("'sha256-{}'", sha256_b64(script))));
        assert!(c.csp.contains("connect-src 'self'") && c.csp.starts_with("default-src 'none'"));
    }
}
