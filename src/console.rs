//! The browser console (`GET /console` with `--console` or `--demo`): one self-contained page
//! embedded in the binary. Its inline style and script are allowed by hash in a strict
//! Content-Security-Policy, so nothing else can run in it and it can talk only to this server.

use base64::Engine;
use sha2::Digest;

use crate::server::http::Response;

const PAGE: &str = include_str!("console.html");

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

#[cfg(test)]
mod tests {
    use super::*;

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
