//! The build docs/operations.md recommends for production (`--no-default-features`: no demo
//! kernel). The other suites that need no demo kernel run in this build too (`.ci/run`).

use std::process::Command;

use crate::common;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_iac-agui")
}

#[test]
fn a_build_without_the_demo_refuses_demo_and_says_why() {
    for args in [&["--demo", "--port", "0"][..], &["--demo-kernel-only", "0"]] {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!("iac-agui: {} needs the `demo` feature", args[0])),
            "{args:?}: {err}"
        );
    }
}

/// Without the `cors` and `console` features the server answers as one without their options:
/// `Origin` is not looked at, no `Access-Control-*` header is sent, a preflight gets 405, and
/// `/console` is a 404 as any unknown path.
#[cfg(not(any(feature = "cors", feature = "console")))]
#[test]
fn a_build_without_cors_and_console_answers_as_a_server_without_their_options() {
    let dir = common::tempdir("sidecar-web");
    let mut child = Command::new(bin())
        .args(["--port", "0", "--a2a-url", "http://127.0.0.1:9/"])
        .env("IAC_CODE_AGUI_STATE_DIR", &dir)
        .env_remove("IAC_CODE_AGUI_AUTH_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::procs::ready_addr(&mut child);
    let ask = |method: &str, path: &str, headers: &[(&str, &str)]| {
        let mut h = vec![("Host", "localhost")];
        h.extend_from_slice(headers);
        common::raw(addr, &common::request(method, path, &h, b""))
    };
    let no_cors = |r: &common::Resp| {
        assert!(
            !r.headers
                .iter()
                .any(|(n, _)| n.to_ascii_lowercase().starts_with("access-control-")),
            "{:?}",
            r.headers
        );
    };
    let preflight = ask(
        "OPTIONS",
        "/",
        &[
            ("Origin", "http://localhost:5173"),
            ("Access-Control-Request-Method", "POST"),
        ],
    );
    assert_eq!(preflight.status, 405);
    no_cors(&preflight);
    // A page on any origin reaches the route (no 403).
    let caps = ask("GET", "/capabilities", &[("Origin", "http://evil.test")]);
    assert_eq!(caps.status, 200, "{}", caps.text());
    no_cors(&caps);
    for method in ["GET", "POST"] {
        assert_eq!(ask(method, "/console", &[]).status, 404, "{method}");
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_build_without_the_demo_still_serves_help_and_version() {
    let out = Command::new(bin()).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iac-agui "));
    let out = Command::new(bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--a2a-url"));
}

/// Issue 58: a build without quotas has no usage route and no series of the quotas', one
/// without the audit log none of its (a build with them: tests/it/quotas.rs, tests/it/audit.rs).
#[cfg(not(feature = "quotas"))]
#[test]
fn a_build_without_quotas_has_no_usage_route_and_no_quota_series() {
    use common::procs::{Stopper, adapter, free_port};
    use common::{Reader, request, tempdir};
    use std::io::Write;
    let get = |addr, path: &str| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&request("GET", path, &[], b"")).unwrap();
        Reader::new(s).response(false).expect("an answer")
    };
    let dir = tempdir("sidecar-usage");
    // No kernel listens there: the routes are answered all the same.
    let (child, addr) = adapter(&dir, free_port(), &[]);
    let _stop = Stopper(child);
    assert_eq!(get(addr, "/usage").status, 404);
    assert_eq!(get(addr, "/usage?days=3").status, 404);
    let metrics = String::from_utf8(get(addr, "/metrics").body).unwrap();
    assert!(metrics.contains("iac_agui_connections_total"), "{metrics}");
    for family in ["iac_agui_caller_quota_refusals_total", "iac_agui_usage_"] {
        assert!(!metrics.contains(family), "{family}");
    }
    if !cfg!(feature = "audit") {
        assert!(!metrics.contains("iac_agui_audit_"), "{metrics}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
