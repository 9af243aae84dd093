//! `--cors-origins` (issue 46 item 1), against the real binary and a demo kernel process: a
//! preflight answered before auth, the CORS headers on every answer to a listed origin (JSON
//! errors, the run's SSE stream), 403 for an origin not listed, nothing at all without the
//! option, and the values refused at start-up.

use crate::common;

use common::procs::{Procs, start_with_env};
use common::*;

const PAGE: &str = "http://localhost:5173";
const TOKEN: &str = "cors-token";

fn with_cors(name: &str) -> Procs {
    start_with_env(
        name,
        &[
            "--cors-origins",
            "http://localhost:5173, https://app.example",
        ],
        &[("IAC_CODE_AGUI_AUTH_TOKEN", TOKEN)],
    )
}

fn preflight(p: &Procs, path: &str, origin: &str) -> Resp {
    raw(
        p.addr,
        &request(
            "OPTIONS",
            path,
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "authorization, content-type",
                ),
            ],
            b"",
        ),
    )
}

fn assert_cors(r: &Resp, origin: &str) {
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(origin),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("vary"), Some("Origin"));
    let exposed = r.header("access-control-expose-headers").unwrap_or("");
    assert!(exposed.contains("Retry-After"), "{exposed}");
    assert!(exposed.contains("X-Iac-Code-Thread-Id"), "{exposed}");
}

fn no_cors(r: &Resp) {
    assert!(
        !r.headers
            .iter()
            .any(|(n, _)| n.to_ascii_lowercase().starts_with("access-control-")),
        "{:?}",
        r.headers
    );
}

#[test]
fn a_preflight_from_a_listed_origin_is_answered_before_auth() {
    let p = with_cors("cors-preflight");
    let r = preflight(&p, "/", PAGE);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_cors(&r, PAGE);
    assert_eq!(r.header("access-control-allow-methods"), Some("POST"));
    let allowed = r.header("access-control-allow-headers").unwrap_or("");
    for h in [
        "Authorization",
        "Content-Type",
        "Accept",
        "Accept-Language",
        "Last-Event-ID",
        "X-Iac-Code-Thread-Id",
    ] {
        assert!(allowed.split(", ").any(|a| a == h), "{h} in {allowed}");
    }
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert!(r.body.is_empty());
    // Each route says its own methods; the second origin of the list is one too.
    let (path, methods) = if cfg!(feature = "threads") {
        ("/threads/t1", "GET, PATCH, DELETE")
    } else {
        ("/capabilities", "HEAD, GET")
    };
    let r = preflight(&p, path, "https://app.example");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-methods"), Some(methods));
    assert_cors(&r, "https://app.example");
}

/// Issue 57, 6: OpenTelemetry's web instrumentation adds `traceparent` and `tracestate` to
/// every `fetch`; a preflight that did not allow them failed each call in the browser. A
/// browser sends the preflight's answer's check as here: every header it asks for must be in
/// `Access-Control-Allow-Headers` (case-insensitively).
#[test]
fn a_preflight_allows_every_request_header_the_server_reads() {
    // Callers named by a proxy's header (feature `identity`): that header is read too.
    let identity = cfg!(feature = "identity");
    let mut args = vec!["--cors-origins", PAGE];
    if identity {
        args.extend(["--identity-header", "X-Auth-Request-User"]);
    }
    let p = start_with_env("cors-headers", &args, &[]);
    let allows = |asked: &str| {
        let r = raw(
            p.addr,
            &request(
                "OPTIONS",
                "/",
                &[
                    ("Origin", PAGE),
                    ("Access-Control-Request-Method", "POST"),
                    ("Access-Control-Request-Headers", asked),
                ],
                b"",
            ),
        );
        assert_eq!(r.status, 204, "{}", r.text());
        let allowed: Vec<String> = r
            .header("access-control-allow-headers")
            .unwrap_or("")
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .collect();
        asked
            .split(',')
            .all(|h| allowed.contains(&h.trim().to_ascii_lowercase()))
    };
    // Every request header a route reads (browsers ask in lowercase).
    for h in [
        "authorization",
        "content-type",
        "accept",
        "accept-language",
        "last-event-id",
        "x-iac-code-thread-id",
        "traceparent",
        "tracestate",
        "x-auth-request-user",
    ]
    .into_iter()
    .filter(|h| identity || *h != "x-auth-request-user")
    {
        assert!(allows(h), "{h} is not allowed");
    }
    // What @opentelemetry/instrumentation-fetch makes of an HttpAgent call.
    assert!(allows("content-type,traceparent,tracestate"));
    assert!(allows("authorization,content-type,traceparent"));
}

/// Issue 57: a page refused for its origin ("localhost" against a listed "127.0.0.1") left
/// nothing in the server's log. Each distinct refused origin is logged once, with the option
/// to change and what it lists; a hostile origin is escaped like any client string.
#[test]
fn a_refused_origin_is_logged_once_with_the_option_to_change() {
    let (p, log) = common::procs::start_logged(
        "cors-refusal-log",
        &["--cors-origins", "http://127.0.0.1:5173"],
        &[],
    );
    let from = |origin: &str| {
        raw(
            p.addr,
            &request("GET", "/threads", &[("Origin", origin)], b""),
        )
    };
    for _ in 0..3 {
        assert_eq!(from("http://localhost:5173").status, 403);
    }
    let hostile = "http://evil\u{202e}gro.test";
    assert_eq!(from(hostile).status, 403);
    // The log is in request order: once the last refusal's line is there, so are the others.
    let lines = || log.lock().unwrap().clone();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || lines()
            .iter()
            .any(|l| l.contains("evil"))),
        "{:?}",
        lines()
    );
    let lines = lines();
    let localhost: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("http://localhost:5173"))
        .collect();
    assert_eq!(localhost.len(), 1, "{lines:?}");
    assert!(
        localhost[0].contains("--cors-origins lists http://127.0.0.1:5173"),
        "{lines:?}"
    );
    let evil = lines.iter().find(|l| l.contains("evil")).unwrap();
    assert!(evil.contains("evil\\u{202e}gro"), "{evil}");
    assert!(!evil.contains('\u{202e}'), "{evil}");
}

#[test]
fn listed_origins_get_cors_headers_on_json_errors_and_on_the_run_stream() {
    let p = with_cors("cors-answers");
    let origin = [("Origin", PAGE)];
    // Without the token: the 401 still carries them (a page must read the error).
    let r = post_json(p.addr, "/", &origin, b"{}");
    assert_eq!(r.status, 401);
    assert_cors(&r, PAGE);
    let auth = format!("Bearer {TOKEN}");
    let who = [("Origin", PAGE), ("Authorization", auth.as_str())];
    let r = raw(p.addr, &request("GET", "/capabilities", &who, b""));
    assert_eq!(r.status, 200);
    assert_cors(&r, PAGE);
    let r = post_json(p.addr, "/", &who, b"[]");
    assert_eq!(r.status, 400);
    assert_cors(&r, PAGE);
    // A whole run: the SSE head carries them, and the stream is the usual one.
    let r = post_json(p.addr, "/", &who, &p.body("t1", "r1", "hello"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-type")
            .unwrap_or("")
            .starts_with("text/event-stream")
    );
    assert_cors(&r, PAGE);
    let (events, _) = sse_events(&r.body);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    // On one connection, a request without Origin after one with it gets none of them.
    let mut sock = std::net::TcpStream::connect(p.addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let json = ("Content-Type", "application/json");
    let mut both = request("POST", "/", &[json, who[0], who[1]], b"[]");
    both.extend(request("POST", "/", &[json, who[1]], b"[]"));
    std::io::Write::write_all(&mut sock, &both).unwrap();
    let mut reader = Reader::new(sock);
    let first = reader.response(false).expect("first answer");
    assert_eq!(first.status, 400);
    assert_cors(&first, PAGE);
    let second = reader.response(false).expect("second answer");
    assert_eq!(second.status, 400);
    no_cors(&second);
}

#[test]
fn an_origin_not_listed_is_refused_with_403_and_the_own_origin_is_not() {
    let p = with_cors("cors-refused");
    let auth = format!("Bearer {TOKEN}");
    for r in [
        preflight(&p, "/", "http://evil.test"),
        post_json(
            p.addr,
            "/",
            &[
                ("Origin", "http://localhost:5174"),
                ("Authorization", auth.as_str()),
            ],
            &p.body("t2", "r2", "hello"),
        ),
        raw(
            p.addr,
            &request("GET", "/threads", &[("Origin", "null")], b""),
        ),
    ] {
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(r.error_code(), "FORBIDDEN");
        assert!(r.error_message().contains("--cors-origins"), "{}", r.text());
        no_cors(&r);
    }
    // The server's own origin (the console's calls) is served as before, without CORS.
    let own = format!("http://{}", p.addr);
    let host = p.addr.to_string();
    let r = post_json(
        p.addr,
        "/",
        &[
            ("Host", host.as_str()),
            ("Origin", own.as_str()),
            ("Authorization", auth.as_str()),
        ],
        b"[]",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    no_cors(&r);
    // The Host rule still comes first (a rebinding name is not "the own origin").
    let r = post_json(
        p.addr,
        "/",
        &[("Host", "evil.test"), ("Origin", "http://evil.test")],
        b"[]",
    );
    assert_eq!(r.error_code(), "HOST_NOT_ALLOWED");
}

#[test]
fn a_page_on_an_origin_not_listed_is_refused_the_console_too() {
    // The extras' checks are asked in order: CORS before the console's page.
    let p = start_with_env(
        "cors-console",
        &["--cors-origins", PAGE, "--console"],
        &[("IAC_CODE_AGUI_AUTH_TOKEN", TOKEN)],
    );
    let get = |origin: Option<&str>| {
        let mut headers = vec![("Host", "localhost")];
        headers.extend(origin.map(|o| ("Origin", o)));
        raw(p.addr, &request("GET", "/console", &headers, b""))
    };
    let r = get(Some("http://evil.test"));
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.error_code(), "FORBIDDEN");
    no_cors(&r);
    let r = get(Some(PAGE));
    assert_eq!(r.status, 200);
    assert_cors(&r, PAGE);
    let r = get(None);
    assert_eq!(r.status, 200);
    no_cors(&r);
}

#[test]
fn without_cors_origins_no_access_control_header_is_sent_and_preflights_get_405() {
    let p = start_with_env("cors-off", &[], &[("IAC_CODE_AGUI_AUTH_TOKEN", TOKEN)]);
    let r = preflight(&p, "/", PAGE);
    assert_eq!(r.status, 405);
    no_cors(&r);
    let auth = format!("Bearer {TOKEN}");
    let r = post_json(
        p.addr,
        "/",
        &[("Origin", PAGE), ("Authorization", auth.as_str())],
        &p.body("t3", "r3", "hello"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    no_cors(&r);
    let r = post_json(p.addr, "/", &[("Origin", "http://evil.test")], b"{}");
    assert_eq!(r.status, 401);
    no_cors(&r);
}

#[test]
fn cors_origins_refuses_a_wildcard_and_anything_but_an_origin_at_start_up() {
    let bin = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_iac-agui"));
        c.env_remove("IAC_CODE_AGUI_CORS_ORIGINS")
            .args(["--port", "0", "--demo"]);
        c
    };
    // A value wrongly accepted starts a server: stop it rather than wait for ever.
    let output = |c: &mut std::process::Command| {
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let exited = wait_until(std::time::Duration::from_secs(20), || {
            child.try_wait().unwrap().is_some()
        });
        if !exited {
            let _ = child.kill();
        }
        child.wait_with_output().unwrap()
    };
    let dir = tempdir("cors-config");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agui.yaml");
    std::fs::write(&file, "cors_origins: \"*\"\n").unwrap();
    let flag = |v: &str| output(bin().args(["--cors-origins", v]));
    let wildcard = "a wildcard (`*`) is refused";
    // Each error names where the value came from (the flag, the variable, the file's line).
    for (out, source, shown) in [
        (flag("*"), "--cors-origins", wildcard),
        (
            flag("http://localhost:5173,https://*.example"),
            "--cors-origins",
            wildcard,
        ),
        (
            flag("http://localhost:5173/"),
            "--cors-origins",
            "http://localhost:5173/",
        ),
        (flag("localhost:5173"), "--cors-origins", "localhost:5173"),
        (
            output(bin().env("IAC_CODE_AGUI_CORS_ORIGINS", "*")),
            "IAC_CODE_AGUI_CORS_ORIGINS",
            wildcard,
        ),
        (
            output(bin().arg("--config").arg(&file)),
            "cors_origins (config file ",
            wildcard,
        ),
    ] {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(source), "{err}");
        assert!(err.contains(shown), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
