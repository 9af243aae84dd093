//! Operating the server (issue 14): readiness that tells the truth about the kernel, a
//! managed kernel restarted after it died, and `/metrics` counters that move.

use crate::common;

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::procs::{Procs, free_port, start};
use common::*;

fn get(addr: SocketAddr, path: &str, headers: &str) -> Resp {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n").as_bytes(),
    )
}

fn health(addr: SocketAddr) -> u16 {
    get(addr, "/health", "").status
}

#[test]
fn health_follows_an_external_kernel_down_and_back_up() {
    let mut p: Procs = start("ops-external", &[]);
    assert_eq!(health(p.addr), 200);
    p.kernel.kill().unwrap();
    p.kernel.wait().unwrap();
    // The probe runs every 5 s; a failed run kicks it at once.
    let failed = post_json(p.addr, "/", &[], &p.body("h1", "r1", "hello"));
    let (events, _) = sse_events(&failed.body);
    assert_eq!(last(&events)["code"], "A2A_UNAVAILABLE");
    assert!(wait_until(Duration::from_secs(3), || health(p.addr) == 503));
    let body = get(p.addr, "/health", "").json();
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["reason"], "kernel");
    p.kernel = common::procs::kernel(p.kernel_port);
    assert!(wait_until(Duration::from_secs(8), || health(p.addr) == 200));
    let ok = post_json(p.addr, "/", &[], &p.body("h2", "r1", "hello"));
    assert_eq!(last(&sse_events(&ok.body).0)["type"], "RUN_FINISHED");
}

/// A managed kernel stand-in: the demo kernel started the way iac-agui starts `iac-code
/// a2a`, recording its pid so the test can kill it.
fn stand_in(dir: &std::path::Path) -> std::path::PathBuf {
    let script = dir.join("kernel.sh");
    let pids = dir.join("pids");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# args: a2a --host H --port P ...\nwhile [ $# -gt 0 ]; do [ \"$1\" = --port ] && port=$2; shift; done\necho $$ >> {}\nexec {} --demo-kernel-only \"$port\"\n",
            pids.display(),
            env!("CARGO_BIN_EXE_iac-agui")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

fn pids(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_managed_kernel_that_dies_is_restarted_and_health_says_so_meanwhile() {
    let dir = tempdir("ops-managed");
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let script = stand_in(&dir);
    let mut adapter = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args(["--port", "0"])
        .env("IAC_CODE_AGUI_KERNEL_CMD", &script)
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::procs::ready_addr(&mut adapter);
    let mut adapter = common::procs::Stopper(adapter);
    let body = |thread: &str, text: &str| {
        serde_json::to_vec(&serde_json::json!({"threadId": thread, "runId": "r1", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m", "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "r", "cwd": dir.join("ws")}}}))
        .unwrap()
    };
    assert_eq!(health(addr), 200);
    // A run streaming when the kernel dies ends with one RUN_ERROR A2A_UNAVAILABLE.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&request(
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        &body("m1", "pace 100 10"),
    ))
    .unwrap();
    let mut r = Reader::new(s);
    assert_eq!(r.head().unwrap().0, 200);
    r.chunk().unwrap();
    let first = pids(&dir);
    assert_eq!(first.len(), 1);
    let killed = SystemClock.now();
    assert!(
        Command::new("kill")
            .args(["-KILL", &first[0]])
            .status()
            .unwrap()
            .success()
    );
    let mut raw = Vec::new();
    while let Some(c) = r.chunk() {
        raw.extend(c);
    }
    let (events, _) = sse_events(&raw);
    assert_eq!(last(&events)["code"], "A2A_UNAVAILABLE");
    // Noticed at once, restarted after a 1 s backoff.
    assert!(wait_until(Duration::from_secs(2), || health(addr) == 503));
    assert!(wait_until(Duration::from_secs(20), || health(addr) == 200));
    assert!(killed.elapsed() >= Duration::from_millis(900));
    assert_eq!(pids(&dir).len(), 2, "started once more");
    let ok = post_json(addr, "/", &[], &body("m2", "hello"));
    assert_eq!(last(&sse_events(&ok.body).0)["type"], "RUN_FINISHED");
    let metrics = get(addr, "/metrics", "").text();
    assert!(
        metrics.contains("iac_agui_kernel_restarts_total 1\n"),
        "{metrics}"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &adapter.id().to_string()])
        .status();
    assert!(adapter.0.wait().unwrap().success());
    // The managed kernel is stopped with the adapter.
    let last_pid = pids(&dir).pop().unwrap();
    assert!(wait_until(
        Duration::from_secs(5),
        || !std::path::Path::new(&format!("/proc/{last_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{last_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One sample's value from the text exposition.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn metrics_need_the_token_and_their_counters_move_with_runs() {
    let dir = tempdir("ops-metrics");
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let port = free_port();
    let mut k = common::procs::kernel(port);
    let (mut a, addr) = {
        let mut c = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
            .args([
                "--port",
                "0",
                "--a2a-url",
                &format!("http://127.0.0.1:{port}/"),
            ])
            .env("IAC_CODE_AGUI_A2A_TOKEN", "k")
            .env("IAC_CODE_AGUI_AUTH_TOKEN", "sesame")
            .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
            .env("IAC_CODE_AGUI_ALLOWED_CWDS", &dir)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = common::procs::ready_addr(&mut c);
        (c, addr)
    };
    assert_eq!(get(addr, "/metrics", "").status, 401);
    let auth = "Authorization: Bearer sesame\r\n";
    let before = get(addr, "/metrics", auth);
    assert_eq!(before.status, 200);
    assert_eq!(
        before.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let before = before.text();
    assert!(before.contains("iac_agui_build_info{version=\""));
    // The standard process series (issue 46, item 15), of the server's own process.
    let series = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in /metrics"))
            .parse()
            .unwrap()
    };
    let rss = std::fs::read_to_string(format!("/proc/{}/status", a.id())).unwrap();
    let rss_kib: f64 = rss
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let reported = series(&before, "process_resident_memory_bytes") / 1024.0;
    assert!(
        (reported - rss_kib).abs() < rss_kib / 2.0,
        "{reported} KiB reported, {rss_kib} KiB read"
    );
    assert!(series(&before, "process_open_fds") >= 3.0);
    assert!(series(&before, "process_max_fds") >= series(&before, "process_open_fds"));
    assert!(series(&before, "process_cpu_seconds_total") >= 0.0);
    use iac_agui::clock::Clock as _;
    let now = iac_agui::clock::SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = series(&before, "process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 120.0,
        "{started} vs {now}"
    );
    let body = serde_json::to_vec(&serde_json::json!({"threadId": "m", "runId": "r1", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": "permission please"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "r", "cwd": dir.join("ws")}}}))
    .unwrap();
    let r = post_json(addr, "/", &[("Authorization", "Bearer sesame")], &body);
    assert_eq!(r.status, 200);
    let after = get(addr, "/metrics", auth).text();
    for (series, grew) in [
        ("iac_agui_runs_total{outcome=\"interrupt\"}", 1.0),
        ("iac_agui_run_duration_seconds_count", 1.0),
        ("iac_agui_time_to_first_event_seconds_count", 1.0),
        ("iac_agui_connections_total", 1.0),
    ] {
        assert!(
            sample(&after, series) >= sample(&before, series) + grew,
            "{series}: {after}"
        );
    }
    let events = sample(&after, "iac_agui_events_sent_total");
    assert!(events >= sse_events(&r.body).0.len() as f64);
    assert!(
        !after.contains("threadId") && !after.contains("\"m\""),
        "no client ids"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &a.id().to_string()])
        .status();
    assert!(a.wait().unwrap().success());
    let _ = k.kill();
    let _ = k.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hung_kernel_is_seen_within_twenty_seconds_and_its_return_too() {
    // Regression (red team): a SIGSTOP'd kernel accepts connections and never answers; the
    // probe waited the whole --a2a-idle-timeout (120 s), so /health said 200 for two minutes.
    // Default flags here: the probe's own timeout is what makes this hold.
    let p: Procs = start("ops-hung", &[]);
    assert_eq!(health(p.addr), 200);
    let pid = p.kernel.id().to_string();
    let sig = |s: &str| {
        assert!(
            Command::new("kill")
                .args([s, &pid])
                .status()
                .unwrap()
                .success()
        )
    };
    sig("-STOP");
    let stopped = SystemClock.now();
    assert!(
        wait_until(Duration::from_secs(20), || health(p.addr) == 503),
        "still 200 after {:?}",
        stopped.elapsed()
    );
    sig("-CONT");
    let resumed = SystemClock.now();
    assert!(
        wait_until(Duration::from_secs(20), || health(p.addr) == 200),
        "still 503 after {:?}",
        resumed.elapsed()
    );
}

#[test]
fn a_kernel_that_lost_its_sessions_ends_the_paused_execution_once_and_the_thread_goes_on() {
    // Regression (red team): after the (demo) kernel was SIGKILLed and restarted without its
    // sessions, a pending resume said A2A_UNAVAILABLE and every later turn ended
    // A2A_PROTOCOL_ERROR "The iac-code session changed unexpectedly" until the thread file
    // was deleted.
    let mut p: Procs = start("ops-lost-sessions", &[]);
    let first = post_json(p.addr, "/", &[], &p.body("ls", "r1", "hello"));
    let (events, _) = sse_events(&first.body);
    let old_session = session_event(&events)["sessionId"].clone();
    let paused = post_json(p.addr, "/", &[], &p.body("ls", "r2", "permission please"));
    let (events, _) = sse_events(&paused.body);
    let pending = interrupts(&events);
    assert_eq!(pending.len(), 1, "{events:?}");
    p.kernel.kill().unwrap();
    p.kernel.wait().unwrap();
    p.kernel = common::procs::kernel(p.kernel_port);
    assert!(wait_until(Duration::from_secs(8), || health(p.addr) == 200));
    let resume = |run: &str| {
        let mut body: serde_json::Value = serde_json::from_slice(&p.body("ls", run, "")).unwrap();
        body["messages"] = serde_json::json!([]);
        body["resume"] = serde_json::json!([{"interruptId": pending[0]["id"],
            "status": "resolved", "payload": {"decision": "allow_once"}}]);
        post_json(p.addr, "/", &[], &serde_json::to_vec(&body).unwrap())
    };
    let lost = resume("r3");
    let (events, _) = sse_events(&lost.body);
    assert_eq!(last(&events)["type"], "RUN_ERROR", "{}", lost.text());
    assert_eq!(last(&events)["code"], "EXECUTION_LOST", "{}", lost.text());
    // Once: the execution is over (nothing pending any more), so answering it again says
    // the same, without another try at the kernel.
    let again = resume("r4");
    let (events, _) = sse_events(&again.body);
    assert_eq!(last(&events)["code"], "EXECUTION_LOST", "{}", again.text());
    // The next turn starts a new session on the same thread, and says so.
    let next = post_json(p.addr, "/", &[], &p.body("ls", "r5", "hello"));
    let (events, _) = sse_events(&next.body);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{}", next.text()); // next turn
    let reset: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.session.reset.v1")
        .collect();
    assert_eq!(reset.len(), 1, "{events:?}");
    assert_eq!(reset[0]["value"]["previousSessionId"], old_session);
    assert_ne!(reset[0]["value"]["sessionId"], old_session);
    assert!(
        reset[0]["value"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    let after = post_json(p.addr, "/", &[], &p.body("ls", "r6", "hello"));
    let (events, _) = sse_events(&after.body);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    assert!(
        !events
            .iter()
            .any(|e| e["name"] == "iac-code.session.reset.v1"),
        "a reset is said once"
    );
}
