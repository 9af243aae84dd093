//! The audit log (issue 44), against the real binary and a demo kernel process: each decision
//! (a run admitted, a resume's answers, a cancel, a thread deleted, a run's end) is in the file
//! by the time it is acknowledged; a log that cannot be written refuses the decision and
//! nothing is done; a torn last line is set aside at start-up; the file rotates by size; and
//! no credential ever reaches it.
//! Every test names its callers with a tokens file (feature `identity`).

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::procs::{Procs, adapter_with_env, start_with_env};
use common::*;
use serde_json::{Value, json};

const CANCEL: &str = "/extensions/iac-code/v1/executions";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const ALICE_TOKEN: &str = "alice-canary-token-7f3a";

fn sha(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A tokens file naming alice, in `dir` (made here).
fn tokens_file(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(&file, format!("alice {}\n", sha(ALICE_TOKEN))).unwrap();
    file
}

/// An adapter with alice's tokens file (beside `audit`) and `audit` as its audit log, plus
/// `extra`.
fn start(name: &str, audit: &Path, extra: &[&str], env: &[(&str, &str)]) -> Procs {
    let tokens = tokens_file(&audit.parent().unwrap().join("t"));
    let mut args = vec![
        "--auth-tokens-file".to_string(),
        tokens.display().to_string(),
        "--audit-log".into(),
        audit.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start_with_env(name, &args, env)
}

/// A directory for an audit log, outside the pair's own (which goes when the pair does).
fn log_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iac-agui-audit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn alice() -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".into()),
        ("Authorization", format!("Bearer {ALICE_TOKEN}")),
        ("traceparent", TRACEPARENT.into()),
    ]
}

fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let who = alice();
    let h: Vec<(&str, &str)> = who.iter().map(|(k, v)| (*k, v.as_str())).collect();
    raw(addr, &request(method, path, &h, body))
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    send(addr, "POST", path, &serde_json::to_vec(body).unwrap())
}

fn run_body(p: &Procs, thread: &str, run: &str, text: &str) -> Value {
    serde_json::from_slice(&p.body(thread, run, text)).unwrap()
}

fn resume_body(p: &Procs, thread: &str, run: &str, answers: Value) -> Value {
    let mut b = run_body(p, thread, run, "x");
    b["messages"] = json!([]);
    b["resume"] = answers;
    b
}

/// A finished run's events.
fn run(p: &Procs, body: &Value) -> Vec<Value> {
    let r = post(p.addr, "/", body);
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    check_stream(&events).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    events
}

/// Every record of the file: each line must be one JSON object.
fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The records about `thread`, as `(event, runId)`.
fn events_of(path: &Path, thread: &str) -> Vec<(String, String)> {
    records(path)
        .iter()
        .filter(|r| r["threadId"] == thread)
        .map(|r| {
            (
                r["event"].as_str().unwrap_or("").to_string(),
                r["runId"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn last_of(path: &Path, thread: &str, event: &str) -> Value {
    records(path)
        .into_iter()
        .rev()
        .find(|r| r["threadId"] == thread && r["event"] == event)
        .unwrap_or_else(|| panic!("no {event} record for {thread}: {:?}", records(path)))
}

fn pending_id(events: &[Value]) -> String {
    interrupts(events)[0]["id"].as_str().unwrap().to_string()
}

/// A run left streaming until its session event, and that event.
fn open(p: &Procs, body: &Value) -> (Reader, Value) {
    let mut sock = TcpStream::connect(p.addr).unwrap();
    let who = alice();
    let h: Vec<(&str, &str)> = who.iter().map(|(k, v)| (*k, v.as_str())).collect();
    sock.write_all(&request(
        "POST",
        "/",
        &h,
        &serde_json::to_vec(body).unwrap(),
    ))
    .unwrap();
    let mut r = Reader::new(sock);
    let (status, _) = r.head().expect("a head");
    assert_eq!(status, 200);
    let (_, session) = r.until_session();
    (r, session)
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn each_decision_is_recorded_before_it_is_acknowledged() {
    let dir = log_dir("decisions");
    let log = dir.join("audit.jsonl");
    let p = start("audit-decisions", &log, &[], &[]);

    // A new run: admitted, then interrupted for a permission; both recorded by the end.
    let first = run(&p, &run_body(&p, "P", "p1", "permission please"));
    assert_eq!(last(&first)["outcome"]["type"], "interrupt");
    assert_eq!(
        events_of(&log, "P"),
        vec![
            ("run.admitted".into(), "p1".into()),
            ("run.end".into(), "p1".into())
        ]
    );
    let admitted = last_of(&log, "P", "run.admitted");
    let exec = session_event(&first)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(admitted["caller"], "alice");
    assert_eq!(admitted["mode"], "new");
    assert_eq!(admitted["executionId"], exec.as_str());
    assert_eq!(admitted["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(
        admitted["client"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    assert!(admitted["time"].as_str().unwrap().ends_with('Z'));
    let request = admitted["requestId"].as_str().unwrap_or_default();
    assert!(
        request.len() == 16 && request.bytes().all(|b| b.is_ascii_hexdigit()),
        "{admitted}"
    );
    let ended = last_of(&log, "P", "run.end");
    assert_eq!(ended["outcome"], "interrupt");
    assert!(ended["usage"]["totalTokens"].is_u64(), "{ended}");

    // Allowed: the resume's record says which interrupt, its kind and the decision.
    let pid = pending_id(&first);
    let answer =
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]);
    let allowed = run(&p, &resume_body(&p, "P", "p2", answer));
    assert_eq!(last(&allowed)["outcome"]["type"], "success");
    let resume = last_of(&log, "P", "resume");
    assert_eq!(resume["runId"], "p2");
    assert_eq!(resume["mode"], "resume");
    assert_eq!(
        resume["interrupts"],
        json!([{"id": pid, "kind": "permission", "decision": "allow_once"}])
    );
    assert_eq!(last_of(&log, "P", "run.end")["outcome"], "success");

    // Denied.
    let second = run(&p, &run_body(&p, "D", "d1", "permission please"));
    let did = pending_id(&second);
    let answer =
        json!([{"interruptId": did, "status": "resolved", "payload": {"decision": "deny"}}]);
    run(&p, &resume_body(&p, "D", "d2", answer));
    assert_eq!(
        last_of(&log, "D", "resume")["interrupts"],
        json!([{"id": did, "kind": "permission", "decision": "deny"}])
    );

    // A run going on: its admission is in the file by the time its stream starts; its
    // cancel by the time the route answers.
    let (stream, session) = open(&p, &run_body(&p, "C", "c1", "wait 10"));
    assert_eq!(
        events_of(&log, "C"),
        vec![("run.admitted".into(), "c1".into())]
    );
    let cexec = session["executionId"].as_str().unwrap().to_string();
    let ids = json!({"threadId": "C", "rosInvocationId": "r"});
    let cancel = post(p.addr, &format!("{CANCEL}/{cexec}/cancel"), &ids);
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    let c = last_of(&log, "C", "cancel");
    assert_eq!(
        (c["executionId"].as_str(), c["runId"].as_str()),
        (Some(&*cexec), Some("c1"))
    );
    assert_eq!(c["caller"], "alice");
    drop(stream);
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        events_of(&log, "C").iter().any(|(e, _)| e == "run.end")
    }));
    assert_eq!(last_of(&log, "C", "run.end")["outcome"], "CANCELLED");

    // A client that leaves: its run's end is recorded when the run stops.
    let (stream, _) = open(&p, &run_body(&p, "G", "g1", "wait 10"));
    drop(stream);
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        events_of(&log, "G").iter().any(|(e, _)| e == "run.end")
    }));
    assert_eq!(
        last_of(&log, "G", "run.end")["outcome"],
        "client_disconnected"
    );

    // A thread deleted (feature `threads`): recorded by the 204.
    #[cfg(feature = "threads")]
    {
        let gone = send(p.addr, "DELETE", "/threads/P", b"");
        assert_eq!(gone.status, 204, "{}", gone.text());
        let d = last_of(&log, "P", "thread.delete");
        assert_eq!(d["caller"], "alice");
        assert!(d.get("runId").is_none());
    }

    assert_eq!(mode_of(&log), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_audit_log_refuses_each_decision_with_503_and_nothing_is_done() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let dir = log_dir("unwritable");
    let log = dir.join("audit.jsonl");
    let mut p = start("audit-unwritable", &log, &[], &[]);
    // A thread waiting for a permission, made while the log could be written.
    let first = run(&p, &run_body(&p, "W", "w1", "permission please"));
    let pid = pending_id(&first);
    let exec = session_event(&first)["executionId"]
        .as_str()
        .unwrap()
        .to_string();

    // The same state, a log where every write fails (ENOSPC).
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let tokens = tokens_file(&dir.join("t"));
    let mut args = vec![
        "--auth-tokens-file",
        tokens.to_str().unwrap(),
        "--audit-log",
        "/dev/full",
    ];
    if cfg!(feature = "threads") {
        args.extend(["--thread-retention", "1"]);
    }
    let env = [("IAC_CODE_AGUI_METRICS_TOKEN", "m")];
    let (adapter, addr) = adapter_with_env(&p.dir, p.kernel_port, &args, &env);
    p.adapter = adapter;
    p.addr = addr;

    let refused = |r: Resp| {
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.error_code(), "AUDIT_UNAVAILABLE");
        assert!(!r.error_message().is_empty());
    };
    // A new run: refused, and no thread was made.
    refused(post(p.addr, "/", &run_body(&p, "N", "n1", "hello")));
    #[cfg(feature = "threads")]
    assert_eq!(send(p.addr, "GET", "/threads/N", b"").status, 404);
    // A resume: refused, the interrupt still waits.
    let answer =
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]);
    refused(post(p.addr, "/", &resume_body(&p, "W", "w2", answer)));
    // A cancel: refused, the execution still waits for its answer.
    let ids = json!({"threadId": "W", "rosInvocationId": "r"});
    refused(post(p.addr, &format!("{CANCEL}/{exec}/cancel"), &ids));
    // A deletion (feature `threads`): refused, the thread is still there.
    #[cfg(feature = "threads")]
    {
        refused(send(p.addr, "DELETE", "/threads/W", b""));
        let t = send(p.addr, "GET", "/threads/W", b"");
        assert_eq!(t.status, 200, "{}", t.text());
        let t = t.json();
        assert!(
            t.to_string().contains(&pid),
            "the interrupt no longer waits: {t}"
        );
    }
    let failures = |addr| {
        let r = raw(
            addr,
            &request("GET", "/metrics", &[("Authorization", "Bearer m")], b""),
        );
        r.text()
            .lines()
            .find_map(|l| l.strip_prefix("iac_agui_audit_write_failures_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = failures(p.addr);
    let refusals = if cfg!(feature = "threads") { 4 } else { 3 };
    assert!(before >= refusals, "{before}");
    // Expiry: a thread whose deletion cannot be recorded is kept.
    #[cfg(feature = "threads")]
    {
        assert!(wait_until(std::time::Duration::from_secs(15), || {
            failures(p.addr) > before
        }));
        assert_eq!(send(p.addr, "GET", "/threads/W", b"").status, 200);
    }
    // Other languages say it too.
    let mut h = alice();
    h.push(("Accept-Language", "ja".into()));
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let body = serde_json::to_vec(&run_body(&p, "N", "n2", "hello")).unwrap();
    let ja = raw(p.addr, &request("POST", "/", &h, &body));
    assert_eq!(ja.error_code(), "AUDIT_UNAVAILABLE");
    assert!(ja.error_message().contains("監査ログ"), "{}", ja.text());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_last_line_is_set_aside_at_restart_and_the_file_stays_json_lines() {
    let dir = log_dir("torn");
    let log = dir.join("audit.jsonl");
    let mut p = start("audit-torn", &log, &[], &[]);
    run(&p, &run_body(&p, "T", "t1", "hello"));
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    // A crash in the middle of a write.
    let torn = br#"{"time":"2026-12-06T23:59:59.000Z","event":"run.adm"#;
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(torn).unwrap();
    drop(f);
    let before = records_lines(&log);

    let tokens = tokens_file(&dir.join("t"));
    let args = [
        "--auth-tokens-file",
        tokens.to_str().unwrap(),
        "--audit-log",
        log.to_str().unwrap(),
    ];
    let (adapter, addr) = adapter_with_env(&p.dir, p.kernel_port, &args, &[]);
    p.adapter = adapter;
    p.addr = addr;
    run(&p, &run_body(&p, "T", "t2", "hello"));
    // Every line parses; the whole records before the crash are kept as they were.
    let after = records(&log);
    assert_eq!(after.len(), before + 2, "{after:?}");
    assert_eq!(
        events_of(&log, "T").last().unwrap(),
        &("run.end".into(), "t2".into())
    );
    let mut aside = torn.to_vec();
    aside.push(b'\n');
    assert_eq!(std::fs::read(dir.join("audit.jsonl.torn")).unwrap(), aside);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whole lines in the file (a torn one not counted).
fn records_lines(path: &Path) -> usize {
    std::fs::read(path)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

#[test]
fn the_audit_log_rotates_by_size_and_keeps_n_files() {
    let dir = log_dir("rotate");
    let log = dir.join("audit.jsonl");
    // A record is a few hundred bytes: about two per file.
    let p = start(
        "audit-rotate",
        &log,
        &["--audit-max-bytes", "700", "--audit-keep", "2"],
        &[],
    );
    for n in 0..6 {
        run(&p, &run_body(&p, "R", &format!("r{n}"), "hello"));
    }
    let rotated = |n: usize| dir.join(format!("audit.jsonl.{n}"));
    assert!(rotated(1).exists() && rotated(2).exists());
    assert!(!rotated(3).exists());
    let mut all = Vec::new();
    for f in [rotated(2), rotated(1), log.clone()] {
        assert!(
            std::fs::metadata(&f).unwrap().len() <= 700,
            "{}",
            f.display()
        );
        assert_eq!(mode_of(&f), 0o600, "{}", f.display());
        all.extend(records(&f));
    }
    // What is kept is the newest records, in order, none split.
    let runs: Vec<&str> = all.iter().filter_map(|r| r["runId"].as_str()).collect();
    assert_eq!(runs.last(), Some(&"r5"));
    assert!(!runs.contains(&"r0"), "{runs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_credential_or_free_text_reaches_the_audit_log() {
    let dir = log_dir("canary");
    let log = dir.join("audit.jsonl");
    let env = [
        ("OPENAI_API_KEY", "sk-canary-llm-key-env"),
        ("IAC_CODE_AGUI_METRICS_TOKEN", "canary-metrics-token"),
    ];
    let p = start("audit-canary", &log, &[], &env);
    let mut h = alice();
    h.push(("X-Api-Key", "sk-canary-llm-key-header".into()));
    h.push(("Cookie", "session=canary-cookie".into()));
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let body = serde_json::to_vec(&run_body(&p, "S", "s1", "question please")).unwrap();
    let r = raw(p.addr, &request("POST", "/", &h, &body));
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    let qid = pending_id(&events);
    let answer = json!([{"interruptId": qid, "status": "resolved",
        "payload": {"freeText": "canary-free-text my password"}}]);
    let body = serde_json::to_vec(&resume_body(&p, "S", "s2", answer)).unwrap();
    let _ = raw(p.addr, &request("POST", "/", &h, &body));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"event\":\"run.admitted\""), "{text}");
    for secret in [
        ALICE_TOKEN,
        &sha(ALICE_TOKEN),
        "Bearer",
        "canary",
        "password",
    ] {
        assert!(!text.contains(secret), "{secret} in the audit log:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_audit_log_that_cannot_be_opened_stops_start_up() {
    let dir = log_dir("unopenable");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args([
            "--port",
            "0",
            "--a2a-url",
            "http://127.0.0.1:1/",
            "--audit-log",
        ])
        .arg(dir.join("no/such/dir/audit.jsonl"))
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open the audit log"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg(feature = "threads")]
fn a_thread_deleted_by_retention_is_recorded() {
    let dir = log_dir("retention");
    let log = dir.join("audit.jsonl");
    let p = start("audit-retention", &log, &["--thread-retention", "1"], &[]);
    run(&p, &run_body(&p, "X", "x1", "hello"));
    assert!(wait_until(std::time::Duration::from_secs(15), || {
        events_of(&log, "X")
            .iter()
            .any(|(e, _)| e == "thread.expire")
    }));
    let r = last_of(&log, "X", "thread.expire");
    assert_eq!(r["caller"], "alice");
    assert!(
        r.get("client").is_none() && r.get("traceId").is_none(),
        "{r}"
    );
    assert!(wait_until(std::time::Duration::from_secs(5), || {
        send(p.addr, "GET", "/threads/X", b"").status == 404
    }));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The one resume record of `thread`'s run `run`.
fn resume_of(path: &Path, thread: &str, run: &str) -> Value {
    records(path)
        .into_iter()
        .find(|r| r["threadId"] == thread && r["runId"] == run && r["event"] == "resume")
        .unwrap_or_else(|| panic!("no resume record for {thread}/{run}: {:?}", records(path)))
}

fn code_of(events: &[Value]) -> String {
    last(events)["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_deployment_confirmations_record_says_which_action_and_which_overrides() {
    let dir = log_dir("confirm");
    let log = dir.join("audit.jsonl");
    let p = start("audit-confirm", &log, &["--agui-protocol", "1.0"], &[]);
    let cases = [
        (
            "K1",
            json!({"action": "confirm",
                "parameterOverrides": {"InstanceType": "ecs.g7.xlarge", "DBPassword": "canary-value"}}),
            json!({"decision": "confirm", "overrides": ["InstanceType", "DBPassword"]}),
        ),
        (
            "K2",
            json!({"action": "cancel"}),
            json!({"decision": "cancel"}),
        ),
        (
            "K3",
            json!({"freeText": "canary text"}),
            json!({"decision": "free_text"}),
        ),
    ];
    for (thread, payload, want) in cases {
        let first = run(
            &p,
            &run_body(&p, thread, "k1", "pipeline: confirm the deployment"),
        );
        let id = pending_id(&first);
        let answer = json!([{"interruptId": id, "status": "resolved", "payload": payload}]);
        let ev = run(&p, &resume_body(&p, thread, "k2", answer));
        assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{thread}: {ev:?}");
        let mut want = want;
        want["id"] = id.into();
        want["kind"] = "deployment_confirmation".into();
        let got = &resume_of(&log, thread, "k2")["interrupts"];
        assert_eq!(got, &json!([want]), "{thread}");
    }
    // The overrides' values and free text stay out.
    let text = std::fs::read_to_string(&log).unwrap();
    for secret in ["canary", "ecs.g7.xlarge"] {
        assert!(!text.contains(secret), "{secret} in the audit log:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_answer_that_never_reached_the_kernel_is_recorded_refused_without_its_values() {
    let dir = log_dir("refused");
    let log = dir.join("audit.jsonl");
    let p = start("audit-refused", &log, &[], &[]);
    // A permission answered with a word its schema does not take.
    let first = run(&p, &run_body(&p, "A", "a1", "permission please"));
    let pid = pending_id(&first);
    let forged = json!([{"interruptId": pid, "status": "resolved",
        "payload": {"decision": "allow_always"}}]);
    let ev = run(&p, &resume_body(&p, "A", "a2", forged));
    assert_eq!(code_of(&ev), "RESUME_PAYLOAD_INVALID", "{ev:?}");
    assert_eq!(
        resume_of(&log, "A", "a2")["interrupts"],
        json!([{"id": pid, "kind": "permission", "decision": "refused", "reason": "invalid"}])
    );
    // A question answered with an option it does not have.
    let first = run(&p, &run_body(&p, "Q", "q1", "question please"));
    let qid = pending_id(&first);
    let forged = json!([{"interruptId": qid, "status": "resolved",
        "payload": {"selectedId": "delete-all-prod"}}]);
    let ev = run(&p, &resume_body(&p, "Q", "q2", forged));
    assert_eq!(code_of(&ev), "RESUME_PAYLOAD_INVALID", "{ev:?}");
    assert_eq!(
        resume_of(&log, "Q", "q2")["interrupts"],
        json!([{"id": qid, "kind": "ask_user_question", "decision": "refused", "reason": "invalid"}])
    );
    // The permission allowed, then answered again otherwise: the second answer was never
    // pending.
    let allow =
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]);
    let ev = run(&p, &resume_body(&p, "A", "a3", allow));
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{ev:?}");
    assert_eq!(
        resume_of(&log, "A", "a3")["interrupts"][0]["decision"],
        "allow_once"
    );
    let again =
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "deny"}}]);
    let r = post(p.addr, "/", &resume_body(&p, "A", "a4", again));
    let (ev, _) = sse_events(&r.body);
    // (The demo kernel has forgotten the finished task: `EXECUTION_LOST`.)
    assert_eq!(last(&ev)["type"], "RUN_ERROR", "{}", r.text());
    assert_eq!(
        resume_of(&log, "A", "a4")["interrupts"],
        json!([{"id": pid, "kind": "unknown", "decision": "refused", "reason": "not_pending"}])
    );
    let text = std::fs::read_to_string(&log).unwrap();
    for forged in ["allow_always", "delete-all-prod", "\"deny\""] {
        assert!(!text.contains(forged), "{forged} in the audit log:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_audit_file_removed_while_serving_is_made_again_and_no_decision_is_refused() {
    let dir = log_dir("removed");
    let log = dir.join("audit.jsonl");
    // A record is a few hundred bytes: about five per file.
    let p = start(
        "audit-removed",
        &log,
        &["--audit-max-bytes", "2000", "--audit-keep", "2"],
        &[],
    );
    run(&p, &run_body(&p, "M", "m0", "hello"));
    std::fs::remove_file(&log).unwrap();
    // Each record lands in a file at the path, and rotation goes on past it.
    for n in 1..6 {
        run(&p, &run_body(&p, "M", &format!("m{n}"), "hello"));
        let runs: Vec<String> = events_of(&log, "M").into_iter().map(|(_, r)| r).collect();
        assert!(runs.contains(&format!("m{n}")), "m{n}: {runs:?}");
    }
    assert!(dir.join("audit.jsonl.1").exists());
    assert_eq!(mode_of(&log), 0o600);
    #[cfg(feature = "threads")]
    {
        let gone = send(p.addr, "DELETE", "/threads/M", b"");
        assert_eq!(gone.status, 204, "{}", gone.text());
        assert_eq!(last_of(&log, "M", "thread.delete")["caller"], "alice");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
