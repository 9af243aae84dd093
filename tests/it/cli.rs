//! The binary: exit codes, the ready line, graceful shutdown on signals.

use crate::common;

use common::procs::Stopper;
use iac_agui::clock::{Clock as _, SystemClock};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_iac-agui"));
    c.env_remove("IAC_CODE_AGUI_PORT")
        .env_remove("IAC_CODE_AGUI_HOST")
        .env_remove("IAC_CODE_AGUI_AUTH_TOKEN")
        .env_remove("IAC_CODE_AGUI_STATE_DIR");
    c
}

/// Start the binary on a free port and return it with its address.
fn start(args: &[&str]) -> (Child, std::net::SocketAddr) {
    let dir = std::env::temp_dir().join(format!(
        "iac-agui-cli-{}-{}",
        std::process::id(),
        args.len()
    ));
    start_with_env(args, &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())])
}

fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> (Child, std::net::SocketAddr) {
    let (child, addr, _log) = start_logged(args, env);
    (child, addr)
}

/// Like `start_with_env`, also collecting every stderr line after the ready line.
fn start_logged(
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, std::net::SocketAddr, common::procs::Log) {
    let mut child = bin()
        .args(["--port", "0", "--demo"])
        .args(args)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let log = common::procs::Log::default();
    let addr = common::procs::ready_addr_logged(&mut child, Some(&log));
    (child, addr, log)
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let end = SystemClock.now() + within;
    while SystemClock.now() < end {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn version_and_help_exit_zero() {
    let out = bin().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iac-agui "));
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--a2a-url"));
}

#[test]
fn invalid_values_exit_2_with_one_line() {
    for args in [
        &["--port", "99999"][..],
        &["--port", "abc"],
        &["--idle-shutdown", "-3"],
        &["--no-such-flag"],
        &["--config", "/nonexistent/file.yaml"],
    ] {
        let out = bin().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("iac-agui: "), "{err}");
    }
    let out = bin().env("IAC_CODE_AGUI_PORT", "-1").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sigterm_and_sigint_shut_down_gracefully() {
    for sig in ["-TERM", "-INT"] {
        let (mut child, addr) = start(&[]);
        let r = common::raw(addr, &common::request("GET", "/health", &[], b""));
        assert_eq!(r.status, 200);
        let ok = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exited");
        assert_eq!(status.code(), Some(0), "{sig}");
    }
}

#[test]
fn sigterm_stops_the_managed_kernel_too() {
    let (mut child, kernel_pid) = managed("sig-term", "ok", true);
    assert!(alive(kernel_pid));
    signal(&child, "-TERM");
    let status = wait_exit(&mut child, Duration::from_secs(15)).expect("exited");
    assert_eq!(status.code(), Some(0));
    // The kernel was stopped and reaped before iac-agui exited: no orphan, no zombie.
    assert!(!std::path::Path::new(&format!("/proc/{kernel_pid}")).exists());
}

#[test]
fn a_kernel_that_fails_to_start_exits_1_with_the_reason() {
    let out = bin()
        .args(["--port", "0"])
        .env("IAC_CODE_AGUI_KERNEL_CMD", "/nonexistent/iac-code")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cannot start the local A2A process"));
}

/// The fixes every kernel-not-found line names (issue 46.5).
fn names_the_fixes(err: &str) {
    for fix in ["[kernel]", "a2a-sdk>=1.0.2,<1.2.1", "--a2a-url", "--demo"] {
        assert!(err.contains(fix), "{fix}: {err}");
    }
    assert!(!err.contains("entity not found"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// Issue 46.5: with no kernel installed the start-up failure read `Cannot start the local A2A
/// process (iac-code): entity not found`; it says where iac-agui looked and how to fix it.
#[test]
fn no_kernel_installed_says_where_it_looked_and_the_fixes() {
    let dir = common::tempdir("cli-no-kernel");
    let out = bin()
        .args(["--port", "0"])
        .env_remove("IAC_CODE_AGUI_KERNEL_CMD")
        .env("PATH", &dir)
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let exe_dir = std::path::Path::new(env!("CARGO_BIN_EXE_iac-agui"))
        .parent()
        .unwrap();
    assert!(err.contains("no iac-code kernel found"), "{err}");
    assert!(
        err.contains(&format!("beside iac-agui (in {})", exe_dir.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("iac-code is not on PATH (PATH={})", dir.display())),
        "{err}"
    );
    names_the_fixes(&err);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 46.5: a mistyped `IAC_CODE_AGUI_KERNEL_CMD` read the same; the line names the
/// variable and its value.
#[test]
fn a_mistyped_kernel_command_names_the_variable() {
    let dir = common::tempdir("cli-kernel-typo");
    let out = bin()
        .args(["--port", "0"])
        .env("IAC_CODE_AGUI_KERNEL_CMD", "iac-cdoe --verbose")
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "IAC_CODE_AGUI_KERNEL_CMD is \"iac-cdoe --verbose\" and iac-cdoe is not on PATH"
        ),
        "{err}"
    );
    assert!(err.contains("unset it"), "{err}");
    names_the_fixes(&err);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn non_loopback_kernel_urls_are_refused_at_start() {
    let out = bin()
        .args(["--a2a-url", "http://192.0.2.1:8000/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}

#[test]
fn idle_shutdown_exits_when_nothing_is_pending() {
    let dir = std::env::temp_dir().join(format!("iac-agui-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut child, _addr) = start_with_env(
        &["--idle-shutdown", "0.5"],
        &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())],
    );
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("idle shutdown");
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_loaded_pending_interrupt_prevents_idle_shutdown() {
    let dir = std::env::temp_dir().join(format!("iac-agui-idle2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let (mut child, addr) = start_with_env(
        &["--idle-shutdown", "0.5"],
        &[
            (
                "IAC_CODE_AGUI_STATE_DIR",
                dir.join("state").to_str().unwrap(),
            ),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", dir.to_str().unwrap()),
        ],
    );
    let body = serde_json::json!({"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": "permission please"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir.join("ws")}}});
    let r = common::post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
    let (ev, _) = common::sse_events(&r.body);
    let exec = common::session_event(&ev)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        wait_exit(&mut child, Duration::from_secs(2)).is_none(),
        "shut down with a pending interrupt"
    );
    // Once the interrupt is gone (cancelled), idle shutdown proceeds.
    let c = common::post_json(
        addr,
        &format!("/extensions/iac-code/v1/executions/{exec}/cancel"),
        &[],
        br#"{"threadId":"t","rosInvocationId":"ros"}"#,
    );
    assert_eq!(c.status, 200);
    let status =
        wait_exit(&mut child, Duration::from_secs(10)).expect("idle shutdown after cancel");
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_421_names_the_host_it_got_and_allowed_hosts() {
    // Regression (issue 46.4): behind nginx without `proxy_set_header Host $host;` every
    // request was 421 with a body that named neither the Host received nor the option.
    let dir = common::tempdir("cli-421");
    let (mut child, addr) = start_with_env(
        &["--allowed-hosts", "agui.example.com"],
        &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())],
    );
    let upstream = format!("127.0.0.1:{}", addr.port());
    let r = get_with_host(addr, &upstream);
    assert_eq!(r.status, 421);
    assert_eq!(r.error_code(), "HOST_NOT_ALLOWED");
    let body = r.json();
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("`{upstream}`")), "{msg}");
    assert!(msg.contains("--allowed-hosts"), "{msg}");
    // In every language (the Host is the caller's, the option's name is not translated).
    let de = common::raw(
        addr,
        &common::request(
            "GET",
            "/threads",
            &[("Host", "Other.Example"), ("Accept-Language", "de")],
            b"",
        ),
    );
    let body = de.json();
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`Other.Example`") && msg.contains("--allowed-hosts") && msg.contains("Host"),
        "{msg}"
    );
    assert_eq!(get_with_host(addr, "agui.example.com").status, 200);
    child.kill().unwrap();
    let _ = child.wait();
}

/// `GET /capabilities` with this Host (`/health` is answered whatever the Host).
fn get_with_host(addr: std::net::SocketAddr, host: &str) -> common::Resp {
    common::raw(
        addr,
        &common::request("GET", "/capabilities", &[("Host", host)], b""),
    )
}

#[test]
fn a_loopback_listener_refuses_foreign_host_names() {
    // Regression (DNS rebinding): a page on evil.example resolving to 127.0.0.1 could drive runs.
    let dir = common::tempdir("cli-hosts");
    let (mut child, addr) =
        start_with_env(&[], &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())]);
    for ok in [
        "localhost",
        "127.0.0.1",
        "[::1]",
        &format!("localhost:{}", addr.port()),
    ] {
        assert_eq!(get_with_host(addr, ok).status, 200, "{ok}");
    }
    for bad in [
        "evil.example",
        &format!("evil.example:{}", addr.port()),
        "localhost..",
        "local..host",
    ] {
        let r = get_with_host(addr, bad);
        assert_eq!(r.status, 421, "{bad}");
        assert_eq!(r.error_code(), "HOST_NOT_ALLOWED");
        // The health route reveals nothing and is answered for any Host (probes).
        let health = common::request("GET", "/health", &[("Host", bad)], b"");
        assert_eq!(common::raw(addr, &health).status, 200, "{bad}");
    }
    let run = common::raw(
        addr,
        &common::request(
            "POST",
            "/",
            &[
                ("Host", "evil.example"),
                ("Content-Type", "application/json"),
            ],
            b"{}",
        ),
    );
    assert_eq!(run.status, 421);
    assert_eq!(run.error_code(), "HOST_NOT_ALLOWED");
    child.kill().unwrap();
    let _ = child.wait();

    let (mut child, addr) = start_with_env(
        &["--allowed-hosts", "agui.test"],
        &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())],
    );
    assert_eq!(get_with_host(addr, "agui.test:1").status, 200);
    assert_eq!(get_with_host(addr, "localhost").status, 421);
    child.kill().unwrap();
    let _ = child.wait();
    let (mut child, addr) = start_with_env(
        &[],
        &[
            ("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap()),
            ("IAC_CODE_AGUI_ALLOWED_HOSTS", "*"),
        ],
    );
    assert_eq!(get_with_host(addr, "evil.example").status, 200);
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn interrupt_ttl_is_accepted_and_warned_about_once() {
    let dir = common::tempdir("cli-ttl");
    let (mut child, addr, log) = start_logged(
        &["--interrupt-ttl", "600"],
        &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())],
    );
    assert_eq!(get_with_host(addr, "127.0.0.1").status, 200);
    let warned = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("interrupt_ttl"))
        .count();
    assert_eq!(warned, 1, "{:?}", log.lock().unwrap());
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_newline_or_an_override_in_a_clients_string_cannot_forge_or_reorder_a_log_line() {
    let dir = common::tempdir("cli-loginject");
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let (mut child, addr, log) = start_logged(
        &[],
        &[
            (
                "IAC_CODE_AGUI_STATE_DIR",
                dir.join("state").to_str().unwrap(),
            ),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", dir.to_str().unwrap()),
        ],
    );
    let forged = "[2026-01-01T00:00:00Z ERROR iac_agui] FORGED";
    let body = |run: &str, cwd: &str| {
        let b = serde_json::json!({"threadId": "t-log", "runId": run, "state": {},
            "tools": [], "context": [], "messages": [{"id": "m", "role": "user", "content": "hello"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": cwd}}});
        serde_json::to_vec(&b).unwrap()
    };
    let ws = dir.join("ws").display().to_string();
    // An id cannot carry one at all (issue 57, 3–4): refused before anything logs it.
    for run in [format!("r\n{forged}"), "r\u{202e}1 success".to_string()] {
        let r = common::post_json(addr, "/", &[], &body(&run, &ws));
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.error_message().contains("`runId`"), "{}", r.text());
    }
    // A workspace path may, and the warning that names the new directory escapes them.
    let cwd = format!("{ws}/new\n{forged} \u{202e}sseccus");
    let r = common::post_json(addr, "/", &[], &body("r1", &cwd));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        common::wait_until(Duration::from_secs(10), || log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("created the workspace"))),
        "{:?}",
        log.lock().unwrap()
    );
    let lines = log.lock().unwrap().clone();
    assert!(
        !lines.iter().any(|l| l.starts_with("[2026-01-01")),
        "a forged line: {lines:?}"
    );
    let created = lines
        .iter()
        .find(|l| l.contains("created the workspace"))
        .unwrap();
    assert!(created.contains("new\\n[2026-01-01"), "{created}");
    assert!(created.contains("\\u{202e}sseccus"), "{created}");
    assert!(!lines.iter().any(|l| l.contains('\u{202e}')), "{lines:?}");
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_demo_keeps_its_state_in_a_private_temporary_directory() {
    // Regression: --demo wrote into ~/.iac-code/agui, so the README walkthrough could not be
    // repeated (DUPLICATE_RUN_ID, THREAD_BINDING_CONFLICT) and a real server's lock was taken.
    let home = common::tempdir("cli-demo-home");
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("IAC_CODE_AGUI_ALLOWED_CWDS", home.to_str().unwrap()),
    ];
    for round in 0..2 {
        let (mut child, addr, log) = start_logged(&[], &env);
        let dir = log
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| {
                l.split("private temporary directory ")
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .map(std::path::PathBuf::from)
            })
            .expect("the start-up log names the demo state directory");
        let body = serde_json::json!({"threadId": "demo-1", "runId": "run-1", "state": {}, "tools": [],
            "context": [], "messages": [{"id": "m1", "role": "user", "content": "hello"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros-1", "cwd": home}}});
        let r = common::post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
        assert_eq!(r.status, 200, "round {round}: {}", r.text());
        assert!(dir.join("threads/demo-1.json").is_file(), "round {round}");
        assert!(
            !home.join(".iac-code").exists(),
            "the real state directory was touched"
        );
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exited");
        assert_eq!(status.code(), Some(0));
        assert!(!dir.exists(), "the demo state directory is removed at exit");
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_config_files_state_dir_does_not_take_the_demos_threads() {
    // Regression (issue 57): `--config` with a `state_dir` and `--demo` wrote the demo's
    // threads into the configured (real) directory, and nothing said so.
    let home = common::tempdir("cli-demo-config");
    let configured = home.join("configured");
    let config = home.join("agui.yaml");
    std::fs::write(&config, format!("state_dir: {}\n", configured.display())).unwrap();
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("IAC_CODE_AGUI_ALLOWED_CWDS", home.to_str().unwrap()),
    ];
    let run = |addr, thread: &str| {
        let body = serde_json::json!({"threadId": thread, "runId": "run-1", "state": {}, "tools": [],
            "context": [], "messages": [{"id": "m1", "role": "user", "content": "hello"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros-1", "cwd": home}}});
        let r = common::post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
        assert_eq!(r.status, 200, "{}", r.text());
    };
    // Stopped by a failed assertion too (a Stopper's drop).
    let stop = |mut child: Stopper| {
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert_eq!(
            wait_exit(&mut child.0, Duration::from_secs(10)).and_then(|s| s.code()),
            Some(0)
        );
    };
    let (child, addr, log) = start_logged(&["--config", config.to_str().unwrap()], &env);
    let child = Stopper(child);
    run(addr, "demo-1");
    let lines = log.lock().unwrap().clone();
    let private = lines
        .iter()
        .find_map(|l| {
            l.split("private temporary directory ")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .map(std::path::PathBuf::from)
        })
        .unwrap_or_else(|| panic!("no private directory: {lines:#?}"));
    assert!(private.join("threads/demo-1.json").is_file(), "{lines:#?}");
    assert!(!configured.exists(), "the configured directory was used");
    // Start-up says why the configured directory is not used.
    assert!(
        lines.iter().any(|l| l.contains("WARN")
            && l.contains(&format!(
                "state_dir (config file {}, line 1)",
                config.display()
            ))
            && l.contains("not used by --demo")),
        "{lines:#?}"
    );
    stop(child);
    // A directory named on the command line is the demo's.
    let flagged = home.join("flagged");
    let (child, addr, log) = start_logged(
        &[
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            flagged.to_str().unwrap(),
        ],
        &env,
    );
    let child = Stopper(child);
    run(addr, "demo-2");
    assert!(flagged.join("threads/demo-2.json").is_file());
    assert!(!configured.exists());
    assert!(
        !log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("not used by")),
        "{:#?}",
        log.lock().unwrap()
    );
    stop(child);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn the_demos_start_up_line_names_every_listed_script() {
    // Regression (issue 57 item 9): the line left out `select`, `candidates` and `confirm`
    // and named test-only keywords (`fault-`, `flood`, `pace`).
    let home = common::tempdir("cli-demo-keywords");
    let env = [
        ("HOME", home.to_str().unwrap()),
        ("IAC_CODE_AGUI_ALLOWED_CWDS", home.to_str().unwrap()),
    ];
    let (child, _, log) = start_logged(&[], &env);
    let _child = Stopper(child);
    let line = log
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains("scripts by keyword in the message: "))
        .cloned()
        .expect("the demo's start-up line");
    let listed = line
        .split("scripts by keyword in the message: ")
        .nth(1)
        .unwrap();
    assert_eq!(
        listed,
        "hello, think, permission, question, select, candidates, pipeline, pipeline select, \
         pipeline confirm, artifact, fail, slow, big T R"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn one_access_line_per_request_in_json_with_no_secret() {
    let dir = common::tempdir("cli-access");
    let (mut child, addr, log) = start_logged(
        &["--log-format", "json"],
        &[
            (
                "IAC_CODE_AGUI_STATE_DIR",
                dir.join("state").to_str().unwrap(),
            ),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", dir.to_str().unwrap()),
        ],
    );
    let health = common::request("GET", "/health", &[("Host", "127.0.0.1")], b"");
    assert_eq!(common::raw(addr, &health).status, 200);
    let body = serde_json::json!({"threadId": "t-acc", "runId": "r-acc", "state": {}, "tools": [],
        "context": [], "messages": [{"id": "m", "role": "user", "content": "hello"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir,
            "llmApiKey": "CANARY-ACCESS-KEY", "llmHeaders": {"Authorization": "CANARY-ACCESS-HDR"}}}});
    let r = common::post_json(
        addr,
        "/",
        &[("Authorization", "Bearer CANARY-ACCESS-TOKEN")],
        &serde_json::to_vec(&body).unwrap(),
    );
    assert_eq!(r.status, 200);
    let conflict = common::post_json(addr, "/", &[], br#"{"threadId":"t-acc"}"#);
    assert_eq!(conflict.status, 400);
    let access = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        log.lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "iac_agui::access")
            .any(|v| pred(&v))
    };
    assert!(common::wait_until(Duration::from_secs(5), || access(
        &|v| v["run_id"] == "r-acc"
    )));
    assert!(access(&|v| v["path"] == "/health" && v["status"] == 200));
    assert!(access(&|v| v["method"] == "POST"
        && v["status"] == 200
        && v["thread_id"] == "t-acc"
        && v["outcome"] == "success"
        && v["execution_id"].is_string()
        && v["bytes"].as_u64().unwrap() > 0
        && v["duration_ms"].is_u64()));
    assert!(common::wait_until(Duration::from_secs(5), || access(
        &|v| v["status"] == 400 && v.get("outcome").is_none()
    )));
    let lines = log.lock().unwrap().clone();
    for l in &lines {
        // Every line, the ready line included, is one JSON object.
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["ts"].is_string() && v["level"].is_string() && v["msg"].is_string());
        assert!(
            !l.contains("CANARY-ACCESS"),
            "a secret reached the log: {l}"
        );
    }
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn healthcheck_exit_codes() {
    let dir = common::tempdir("cli-healthcheck");
    let (mut child, addr) =
        start_with_env(&[], &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())]);
    let url = format!("http://{addr}/health");
    let ok = bin().args(["healthcheck", &url]).output().unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let port_env = bin()
        .arg("healthcheck")
        .env("IAC_CODE_AGUI_PORT", addr.port().to_string())
        .output()
        .unwrap();
    assert_eq!(
        port_env.status.code(),
        Some(0),
        "the default URL uses IAC_CODE_AGUI_PORT"
    );
    let not_found = bin()
        .args(["healthcheck", &format!("http://{addr}/nope")])
        .output()
        .unwrap();
    assert_eq!(not_found.status.code(), Some(1));
    child.kill().unwrap();
    let _ = child.wait();
    let down = bin().args(["healthcheck", &url]).output().unwrap();
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("healthcheck"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 46.14: the base URL a client is given (`http://HOST:PORT`, with or without the `/`)
/// was probed as is and got 405; `/health` under it is probed, and a URL that names `/health`
/// keeps working.
#[test]
fn healthcheck_accepts_the_base_url() {
    let dir = common::tempdir("cli-healthcheck-base");
    let (mut child, addr) =
        start_with_env(&[], &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())]);
    for url in [
        format!("http://{addr}"),
        format!("http://{addr}/"),
        format!("http://{addr}/health"),
    ] {
        let out = bin().args(["healthcheck", &url]).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A path that is not the server's: its own `/health` is probed, and named when it fails.
    let out = bin()
        .args(["healthcheck", &format!("http://{addr}/nope/")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("http://{addr}/nope/health: status 404")),
        "{err}"
    );
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression (second red-team, fault 1): behind `--allowed-hosts` the healthcheck sent
/// `Host: 127.0.0.1:PORT` and got 421, and it read the port only from IAC_CODE_AGUI_PORT.
#[test]
fn healthcheck_works_behind_allowed_hosts_with_the_servers_own_options() {
    let dir = common::tempdir("cli-healthcheck-hosts");
    let (mut child, addr) = start_with_env(
        &["--allowed-hosts", "agui.example.com"],
        &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())],
    );
    let port = addr.port().to_string();
    let code = |args: &[&str]| {
        let out = bin()
            .arg("healthcheck")
            .args(args)
            .env_remove("IAC_CODE_AGUI_PORT")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (c, err) = code(&["--port", &port, "--allowed-hosts", "agui.example.com"]);
    assert_eq!(c, Some(0), "--port: {err}");
    let cfg = dir.join("agui.yaml");
    std::fs::write(&cfg, format!("port: {port}\nhost: 0.0.0.0\n")).unwrap();
    let (c, err) = code(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        c,
        Some(0),
        "--config (host 0.0.0.0 is checked on loopback): {err}"
    );
    let (c, _) = code(&["--port", "0"]);
    assert_eq!(c, Some(2), "port 0 cannot be checked");
    // A probe with the pod's address as Host (a kubelet httpGet) is answered; other routes
    // still get 421 for that Host.
    let get = |path: &str| {
        common::raw(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: 10.1.2.3:{port}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .status
    };
    assert_eq!(get("/health"), 200);
    assert_eq!(get("/capabilities"), 421);
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_allowed_workspace_root_of_slash_is_warned_about() {
    let dir = common::tempdir("cli-root-warn");
    let (mut child, _addr, log) = start_logged(
        &[],
        &[
            ("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap()),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", "/"),
        ],
    );
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("allowed workspace root is /")),
        "{:?}",
        log.lock().unwrap()
    );
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_console_exists_only_with_console_or_demo_and_has_a_strict_policy() {
    let (mut demo, addr) = start(&[]);
    let page = common::raw(
        addr,
        &common::request("GET", "/console", &[("Host", "localhost")], b""),
    );
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.starts_with("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert!(page.text().contains("<title>iac-agui console</title>"));
    let _ = demo.kill();
    let _ = demo.wait();
    let dir = common::tempdir("cli-no-console");
    let mut plain = bin()
        .args(["--port", "0", "--a2a-url", "http://127.0.0.1:9/"])
        .env("IAC_CODE_AGUI_STATE_DIR", &dir)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let addr = common::procs::ready_addr(&mut plain);
    let absent = common::raw(
        addr,
        &common::request("GET", "/console", &[("Host", "localhost")], b""),
    );
    assert_eq!(absent.status, 404);
    let _ = plain.kill();
    let _ = plain.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Wait for `child` to exit 0 and parse `lines`: each must be one JSON log record.
fn json_lines_until_exit(child: &mut Child, lines: Vec<String>) -> Vec<serde_json::Value> {
    let status = wait_exit(child, Duration::from_secs(20)).expect("exited");
    assert_eq!(status.code(), Some(0));
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(
                v["ts"].is_string() && v["level"].is_string() && v["msg"].is_string(),
                "{l}"
            );
            v
        })
        .collect()
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn json_logs_are_json_from_start_through_a_run_and_a_drain_to_exit() {
    let dir = common::tempdir("cli-json-all");
    let (mut child, addr, log) = start_logged(
        &["--log-format", "json"],
        &[
            ("IAC_CODE_AGUI_STATE_DIR", dir.join("s").to_str().unwrap()),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", dir.to_str().unwrap()),
        ],
    );
    let body = serde_json::json!({"threadId": "t-json", "runId": "r1", "state": {}, "tools": [],
        "context": [], "messages": [{"id": "m", "role": "user", "content": "think hello"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir}}});
    let r = common::post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
    assert_eq!(r.status, 200);
    sigterm(&child);
    let _ = wait_exit(&mut child, Duration::from_secs(20));
    // The exit's own line is read by the drain thread a moment after the exit.
    let said_stopped = || {
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("\"stopped\""))
    };
    assert!(common::wait_until(Duration::from_secs(5), said_stopped));
    let lines = log.lock().unwrap().clone();
    let recs = json_lines_until_exit(&mut child, lines);
    let ready: Vec<_> = recs.iter().filter(|v| v["msg"] == "listening").collect();
    assert_eq!(ready.len(), 1, "{recs:?}");
    assert_eq!(ready[0]["url"], format!("http://{addr}"));
    assert_eq!(ready[0]["version"], env!("CARGO_PKG_VERSION"));
    assert!(recs.iter().any(|v| v["target"] == "iac_agui::access"));
    assert!(
        recs.iter()
            .any(|v| v["msg"].as_str().unwrap().contains("signal"))
    );
    assert!(recs.iter().any(|v| v["msg"] == "stopped"), "{recs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_logs_relay_the_managed_kernels_output_as_records() {
    let dir = common::tempdir("cli-json-kernel");
    let mut child = bin()
        .args(["--port", "0", "--log-format", "json"])
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("s"))
        .env(
            "IAC_CODE_AGUI_KERNEL_CMD",
            "env STUB_MODE=ok python3 tests/support/stub_kernel.py",
        )
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = log.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if common::procs::ready_line_addr(&l).is_some() {
                let _ = tx.send(());
            }
            sink.lock().unwrap().push(l);
        }
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("ready");
    sigterm(&child);
    let _ = wait_exit(&mut child, Duration::from_secs(20));
    reader.join().unwrap();
    let lines = log.lock().unwrap().clone();
    let recs = json_lines_until_exit(&mut child, lines);
    let kernel: Vec<_> = recs
        .iter()
        .filter(|v| v["target"] == "iac_agui::kernel")
        .collect();
    assert!(
        kernel.iter().any(|v| v["msg"]
            .as_str()
            .unwrap()
            .starts_with("stub kernel starting")
            && v["stream"] == "stderr"),
        "{recs:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_logs_report_a_start_up_failure_as_a_record() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = bin()
        .args(["--demo", "--port", &port, "--log-format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(!text.is_empty());
    for l in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["msg"].is_string());
    }
    assert!(text.contains("cannot listen"), "{text}");
}

#[test]
fn systemd_notify_gets_ready_then_stopping() {
    let dir = common::tempdir("cli-notify");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (child, _addr, _log) = start_logged(
        &[],
        &[
            ("IAC_CODE_AGUI_STATE_DIR", dir.join("s").to_str().unwrap()),
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
        ],
    );
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    sigterm(&child);
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{msg}");
    let mut child = child;
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(20)).and_then(|s| s.code()),
        Some(0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `pid` runs (a zombie does not count: it waits only to be reaped).
fn alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_none_or(|st| st != "Z"),
        Err(_) => false,
    }
}

/// iac-agui with a managed stand-in kernel in `mode`; the child and the kernel's pid once
/// the stand-in recorded it.
fn managed(name: &str, mode: &str, wait_ready: bool) -> (Child, u64) {
    let record =
        std::env::temp_dir().join(format!("iac-agui-cli-{name}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&record);
    let mut child = bin()
        .args(["--port", "0"])
        .env("IAC_CODE_AGUI_STATE_DIR", common::tempdir(name))
        .env(
            "IAC_CODE_AGUI_KERNEL_CMD",
            format!(
                "env STUB_MODE={mode} STUB_RECORD={} python3 tests/support/stub_kernel.py",
                record.display()
            ),
        )
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if common::procs::ready_line_addr(&l).is_some() {
                let _ = tx.send(());
            }
        }
    });
    if wait_ready {
        rx.recv_timeout(Duration::from_secs(20)).expect("ready");
    }
    let mut pid = None;
    assert!(common::wait_until(Duration::from_secs(10), || {
        pid = std::fs::read_to_string(&record)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v["pid"].as_u64());
        pid.is_some()
    }));
    let _ = std::fs::remove_file(&record);
    (child, pid.unwrap())
}

fn signal(child: &Child, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

#[test]
fn hup_and_quit_drain_like_term_and_stop_the_managed_kernel() {
    // Regression (red team): SIGHUP and SIGQUIT killed iac-agui outright and left the
    // kernel running under PID 1.
    for sig in ["-HUP", "-QUIT"] {
        let (mut child, kernel) = managed(&format!("sig{}", sig.to_lowercase()), "ok", true);
        signal(&child, sig);
        let status = wait_exit(&mut child, Duration::from_secs(15)).expect("exited");
        assert_eq!(status.code(), Some(0), "{sig}: {status:?}");
        assert!(!alive(kernel), "{sig}: the kernel outlived iac-agui");
    }
}

#[test]
fn usr1_and_usr2_are_ignored() {
    let (mut child, addr) = start(&[]);
    signal(&child, "-USR1");
    signal(&child, "-USR2");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "a user signal ended the process"
    );
    assert_eq!(get_with_host(addr, "127.0.0.1").status, 200);
    signal(&child, "-TERM");
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(15)).and_then(|s| s.code()),
        Some(0)
    );
}

#[test]
fn sigkill_of_iac_agui_does_not_orphan_the_managed_kernel() {
    // SIGKILL cannot be handled: the kernel has a parent-death signal instead.
    let (mut child, kernel) = managed("sig-kill", "ok", true);
    signal(&child, "-KILL");
    let _ = child.wait();
    assert!(
        common::wait_until(Duration::from_secs(10), || !alive(kernel)),
        "the kernel outlived a SIGKILLed iac-agui"
    );
}

#[test]
fn sigterm_during_the_kernels_start_up_stops_it_and_exits_0() {
    let (mut child, kernel) = managed("sig-startup", "never-ready", false);
    assert!(alive(kernel));
    signal(&child, "-TERM");
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("exited");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(!alive(kernel), "the starting kernel outlived iac-agui");
}

#[test]
fn capabilities_describe_the_agent_and_need_the_token_when_one_is_set() {
    let dir = common::tempdir("cli-capabilities");
    let get = |addr, auth: Option<&str>| {
        let mut h = vec![("Host", "127.0.0.1")];
        let bearer = auth.map(|t| format!("Bearer {t}"));
        if let Some(b) = &bearer {
            h.push(("Authorization", b.as_str()));
        }
        common::raw(addr, &common::request("GET", "/capabilities", &h, b""))
    };
    let (mut child, addr) =
        start_with_env(&[], &[("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap())]);
    let r = get(addr, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let c = r.json();
    assert_eq!(c["identity"]["name"], "iac-agui");
    assert_eq!(c["identity"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(c["transport"]["streaming"], true);
    assert_eq!(c["transport"]["resumable"], true);
    assert_eq!(c["humanInTheLoop"]["interrupts"], true);
    assert_eq!(c["tools"]["clientProvided"], false);
    // Regression (issue 36): `tools.supported` was false while the agent streams tool calls.
    assert_eq!(c["tools"]["supported"], true);
    assert_eq!(c["tools"]["parallelCalls"], true);
    assert_eq!(c["execution"]["codeExecution"], true);
    assert_eq!(c["multimodal"]["input"]["image"], true);
    assert_eq!(c["multimodal"]["input"]["audio"], false);
    assert_eq!(c["custom"]["iacCode"]["protocolMode"], "0.1");
    assert_eq!(c["custom"]["iacCode"]["contextForwarded"], false);
    // Issue 57: each dialect the server serves (a request declaring 1.x gets the 1.0 one),
    // whatever `--agui-protocol` gives requests that declare none.
    let dialects = &c["custom"]["iacCode"]["dialects"];
    assert_eq!(dialects["0.1"]["contextForwarded"], false);
    assert_eq!(
        dialects["0.1"]["interruptKinds"],
        c["custom"]["iacCode"]["interruptKinds"]
    );
    assert_eq!(dialects["1.0"]["contextForwarded"], true);
    assert_eq!(
        dialects["1.0"]["interruptKinds"]["candidate_selection"],
        "candidate_selection"
    );
    assert_eq!(
        dialects["1.0"]["interruptKinds"]["deployment_confirmation"],
        "deployment_confirmation"
    );
    let kinds = &c["custom"]["iacCode"]["interruptKinds"];
    assert_eq!(
        kinds["cloud_resource_selection"],
        "cloud_resource_selection"
    );
    assert_eq!(kinds["candidate_selection"], "input_required");
    assert_eq!(kinds["permission"], "tool_call");
    // The reference's reading of a deployment confirmation: no interrupt, so no kind.
    assert!(kinds.get("deployment_confirmation").is_none(), "{kinds}");
    let sel = &c["custom"]["iacCode"]["resourceSelector"];
    assert_eq!(sel["queryMode"], "ros_api_json");
    assert_eq!(sel["profileHash"], iac_agui::a2a::KERNEL_PROFILE_HASH);
    assert!(
        c["custom"]["iacCode"]["routes"]["subscribe"]
            .as_str()
            .unwrap()
            .contains("/subscribe")
    );
    // The thread routes only where they exist (feature `threads`), after subscribe as always.
    let routes: Vec<&str> = c["custom"]["iacCode"]["routes"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = vec!["run", "cancel", "subscribe"];
    if cfg!(feature = "threads") {
        want.extend(["threads", "threadMessages", "deleteThread"]);
    }
    want.extend(["health", "metrics"]);
    assert_eq!(routes, want);
    child.kill().unwrap();
    let _ = child.wait();
    let (mut child, addr) = start_with_env(
        &["--agui-protocol", "1.0"],
        &[
            ("IAC_CODE_AGUI_STATE_DIR", dir.to_str().unwrap()),
            ("IAC_CODE_AGUI_AUTH_TOKEN", "tok"),
        ],
    );
    assert_eq!(get(addr, None).status, 401);
    assert_eq!(get(addr, Some("wrong")).status, 401);
    let r = get(addr, Some("tok"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["custom"]["iacCode"]["protocolMode"], "1.0");
    assert_eq!(r.json()["custom"]["iacCode"]["dialects"], *dialects);
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_default_cwd_outside_the_allowed_roots_is_refused_at_start() {
    let out = bin()
        .args(["--port", "0", "--demo", "--default-cwd", "/etc"])
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--default-cwd"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// AG-UI 1.0: a receiver accepts fields it does not know; iac-agui also logs them (debug),
/// so that a client's misspelt field shows (issue 36, request rules).
#[test]
fn unknown_run_input_fields_are_accepted_and_logged_at_debug() {
    let dir = common::tempdir("cli-unknown-fields");
    let (mut child, addr, log) = start_logged(
        &["--debug"],
        &[
            (
                "IAC_CODE_AGUI_STATE_DIR",
                dir.join("state").to_str().unwrap(),
            ),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", dir.to_str().unwrap()),
        ],
    );
    let body = serde_json::json!({"threadId": "t-unk", "runId": "r-unk", "messages":
        [{"id": "m", "role": "user", "content": "hello"}], "forwardedProp": {"typo": true},
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir}}});
    let r = common::post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let logged = || {
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("forwardedProp ") && l.contains("not one this server reads"))
    };
    assert!(common::wait_until(Duration::from_secs(5), logged));
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 46.11: a mistyped workspace was created silently (as the reference does); it is
/// still created, and the log says so, naming it. A workspace that exists is not reported.
#[test]
fn a_missing_workspace_is_created_with_a_warning_naming_it() {
    let dir = common::tempdir("cli-created-ws");
    let roots = dir.join("roots");
    std::fs::create_dir_all(roots.join("project")).unwrap();
    let roots = roots.canonicalize().unwrap();
    let (mut child, addr, log) = start_logged(
        &[],
        &[
            (
                "IAC_CODE_AGUI_STATE_DIR",
                dir.join("state").to_str().unwrap(),
            ),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", roots.to_str().unwrap()),
        ],
    );
    let run = |thread: &str, cwd: &std::path::Path| {
        let body = serde_json::json!({"threadId": thread, "runId": format!("{thread}-1"),
            "messages": [{"id": "m", "role": "user", "content": "hello"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros",
                "cwd": cwd}}});
        let r = common::post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
        assert_eq!(r.status, 200, "{}", r.text());
    };
    let created = |l: &String| l.contains("created the workspace");
    run("t-existing", &roots.join("project"));
    let typo = roots.join("projcet");
    run("t-typo", &typo);
    assert!(
        typo.is_dir(),
        "the reference's behaviour: the workspace is created"
    );
    let named = format!("created the workspace {} ", typo.display());
    assert!(
        common::wait_until(Duration::from_secs(5), || log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(&named) && l.contains("WARN"))),
        "{:?}",
        log.lock().unwrap()
    );
    // Only the directory that was missing is reported.
    assert_eq!(log.lock().unwrap().iter().filter(|l| created(l)).count(), 1);
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 46.10: a configuration error names where the value came from — the flag, the
/// environment variable, or the config file and its line — and shows the value as written.
#[test]
fn configuration_errors_name_the_flag_the_variable_or_the_file_and_line() {
    let dir = common::tempdir("cli-config-source");
    let file = dir.join("agui.yaml");
    std::fs::write(&file, "# iac-agui\nport: 0\nheartbeat-interval: 2.0x\n").unwrap();
    let f = file.to_str().unwrap();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], String);
    let cases: [Case; 3] = [
        (
            &["--heartbeat-interval", "2.0x"],
            &[],
            "--heartbeat-interval must be a number of seconds, not \"2.0x\".".into(),
        ),
        (
            &[],
            &[("IAC_CODE_AGUI_PROTOCOL", "2.0")],
            "IAC_CODE_AGUI_PROTOCOL must be 0.1 or 1.0, not \"2.0\".".into(),
        ),
        (
            &["--config", f],
            &[],
            format!(
                "heartbeat_interval (config file {f}, line 3) must be a number of seconds, \
                 not 2.0x."
            ),
        ),
    ];
    for (args, env, said) in cases {
        let out = bin().args(args).envs(env.iter().copied()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end(), format!("iac-agui: {said}"));
    }
    // The value as written: `2.0` in the file, not `2`.
    std::fs::write(&file, "agui_protocol: 2.0\n").unwrap();
    let out = bin().args(["--config", f]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!("iac-agui: agui_protocol (config file {f}, line 1) must be 0.1 or 1.0, not 2.0.")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 46.10: `--default-cwd` outside the roots was explained in a request's terms
/// (`forwardedProps.iacCode.cwd`); it is told as the option and the roots it must lie under.
#[test]
fn a_default_cwd_outside_the_roots_is_explained_in_option_terms() {
    let dir = common::tempdir("cli-default-cwd-terms");
    let root = dir.canonicalize().unwrap();
    let out = bin()
        .args(["--port", "0", "--demo"])
        .env("IAC_CODE_AGUI_DEFAULT_CWD", "/etc")
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &root)
        .env("IAC_CODE_AGUI_STATE_DIR", root.join("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "IAC_CODE_AGUI_DEFAULT_CWD: \"/etc\" is outside the allowed workspace roots ({}): ",
            root.display()
        )),
        "{err}"
    );
    assert!(err.contains("IAC_CODE_AGUI_ALLOWED_CWDS"), "{err}");
    assert!(!err.contains("forwardedProps"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without the `threads` feature the server keeps no conversation: a run writes its thread's
/// state file and nothing beside it (no log, no index), the thread routes are a plain 404
/// like any unknown path, and `/metrics` renders no conversation series.
#[test]
#[cfg(not(feature = "threads"))]
fn without_stored_conversations_a_run_writes_only_its_state_file_and_thread_routes_are_404() {
    let p = common::procs::start("cli-no-threads", &[]);
    let r = common::post_json(p.addr, "/", &[], &p.body("t1", "r1", "hello"));
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = common::sse_events(&r.body);
    assert_eq!(common::last(&events)["type"], "RUN_FINISHED", "{events:?}");
    let mut files: Vec<String> = std::fs::read_dir(p.dir.join("state/threads"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["t1.json"]);
    for (method, path) in [
        ("GET", "/threads"),
        ("GET", "/threads/t1"),
        ("PATCH", "/threads/t1"),
        ("DELETE", "/threads/t1"),
        ("GET", "/threads/t1/messages"),
    ] {
        let h = [("Content-Type", "application/json")];
        let r = common::raw(p.addr, &common::request(method, path, &h, b"{}"));
        assert_eq!(
            (r.status, r.text()),
            (404, "Not Found".into()),
            "{method} {path}"
        );
    }
    let metrics = common::raw(p.addr, &common::request("GET", "/metrics", &[], b""));
    assert!(metrics.text().contains("iac_agui_runs_active"));
    assert!(
        !metrics.text().contains("iac_agui_threads"),
        "{}",
        metrics.text()
    );
    assert!(!metrics.text().contains("iac_agui_history"));
}
