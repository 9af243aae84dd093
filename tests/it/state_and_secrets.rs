//! Fail-closed persistence, crash safety of thread files, and secrets that must never reach
//! the disk or the logs.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::*;
use iac_agui::a2a::client::{A2aClient, A2aConfig};
use iac_agui::adapter::env::SystemEnv;
use iac_agui::adapter::threads::{Registry, ThreadStore};
use iac_agui::adapter::{AguiBackend, Shared};
use iac_agui::config::AguiProtocol;
use iac_agui::kernel::demo::{DemoConfig, DemoKernel};
use iac_agui::principal::ThreadKey;
use iac_agui::server::ServerConfig;
use iac_agui::store::document::{Execution, ThreadDoc};
use iac_agui::store::files::{FileStore, StoreError};
use serde_json::json;

/// A file store whose saves start failing after `allowed` successes (-1: never fail).
struct Flaky {
    inner: FileStore,
    allowed: AtomicI64,
}

impl ThreadStore for Flaky {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        self.inner.load(key)
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        let left = self.allowed.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::Io(std::io::Error::other(
                "disk full (injected)",
            )));
        }
        if left > 0 {
            self.allowed.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.save(doc)
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iac-agui-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("ws")).unwrap();
    std::fs::canonicalize(d).unwrap()
}

fn flaky_stack(name: &str) -> (DemoKernel, TestServer, Arc<Flaky>, PathBuf) {
    let dir = temp_dir(name);
    let kernel = DemoKernel::start(DemoConfig {
        token: None,
        frame_delay: Duration::ZERO,
        tick: Duration::from_millis(100),
        cancel_linger: Duration::ZERO,
    })
    .unwrap();
    let store = Arc::new(Flaky {
        inner: FileStore::open(&dir.join("state")).unwrap(),
        allowed: AtomicI64::new(-1),
    });
    let shared = Arc::new(Shared::new(
        Registry::new(store.clone()),
        A2aClient::new(A2aConfig::new(kernel.base_url(), None)),
        Arc::new(SystemEnv),
        vec![dir.clone()],
        None,
        AguiProtocol::V0_1,
    ));
    let srv = TestServer::start(
        Arc::new(AguiBackend { shared }),
        None,
        ServerConfig::default(),
        16,
    );
    (kernel, srv, store, dir)
}

fn body(dir: &Path, thread: &str, run: &str, text: &str) -> serde_json::Value {
    json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m", "role": "user", "content": text}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir.join("ws")}}})
}

fn post(srv: &TestServer, b: &serde_json::Value) -> Resp {
    post_json(srv.addr, "/", &[], &serde_json::to_vec(b).unwrap())
}

#[test]
fn admission_write_failure_is_503_and_records_nothing() {
    let (_k, srv, store, dir) = flaky_stack("admit");
    store.allowed.store(0, Ordering::SeqCst);
    let r = post(&srv, &body(&dir, "t1", "r1", "hello"));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (503, "STATE_UNAVAILABLE")
    );
    assert!(!dir.join("state/threads/t1.json").exists());
    store.allowed.store(-1, Ordering::SeqCst);
    // The runId was not burned.
    let r = post(&srv, &body(&dir, "t1", "r1", "hello"));
    assert_eq!(r.status, 200);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn task_mapping_write_failure_fails_closed() {
    let (k, srv, store, dir) = flaky_stack("mapping");
    // Admission may write; learning the task id may not.
    store.allowed.store(1, Ordering::SeqCst);
    let r = post(&srv, &body(&dir, "t1", "r1", "slow please"));
    assert_eq!(r.status, 200);
    let (ev, _) = sse_events(&r.body);
    check_stream(&ev).unwrap();
    let fin = ev.last().unwrap();
    assert_eq!(fin["code"], "STATE_PERSISTENCE_FAILED");
    // The session event never revealed the task id that could not be written.
    assert_eq!(session_event(&ev)["taskId"], serde_json::Value::Null);
    // The task was cancelled rather than left running unmapped.
    let ids = k.task_ids();
    assert_eq!(ids.len(), 1);
    assert!(wait_until(Duration::from_secs(5), || k
        .task_state(&ids[0])
        .as_deref()
        == Some("TASK_STATE_CANCELED")));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unreadable_state_files_are_503_on_both_routes() {
    let (_k, srv, _store, dir) = flaky_stack("corrupt");
    let threads = dir.join("state/threads");
    std::fs::write(threads.join("bad.json"), b"{not json").unwrap();
    std::fs::write(threads.join("wrong.json"), br#"{"schemaVersion":2}"#).unwrap();
    std::fs::write(dir.join("elsewhere.json"), b"{}").unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere.json"), threads.join("link.json")).unwrap();
    for t in ["bad", "wrong", "link"] {
        let r = post(&srv, &body(&dir, t, "r1", "hello"));
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (503, "STATE_UNAVAILABLE"),
            "{t}"
        );
        let c = post_json(
            srv.addr,
            "/extensions/iac-code/v1/executions/e/cancel",
            &[],
            format!(r#"{{"threadId":"{t}","rosInvocationId":"ros"}}"#).as_bytes(),
        );
        assert_eq!(
            (c.status, c.error_code().as_str()),
            (503, "STATE_UNAVAILABLE"),
            "{t}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn state_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let (_k, srv, _store, dir) = flaky_stack("modes");
    assert_eq!(post(&srv, &body(&dir, "t1", "r1", "hello")).status, 200);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("state")), 0o700);
    assert_eq!(mode(&dir.join("state/threads")), 0o700);
    assert_eq!(mode(&dir.join("state/threads/t1.json")), 0o600);
    let _ = std::fs::remove_dir_all(dir);
}

/// Repeated saves of one growing thread each leave a complete, loadable file. Started by the
/// crash test below with `IAC_AGUI_CRASH_DIR`, it saves until killed; on its own it checks
/// 200 save/load rounds.
#[test]
fn crash_child_save_loop() {
    let (dir, rounds) = match iac_agui::config::Environ::capture().get("IAC_AGUI_CRASH_DIR") {
        Some(d) => (PathBuf::from(d), u64::MAX),
        None => (temp_dir("save-loop").join("state"), 200),
    };
    let store = FileStore::open(&dir).unwrap();
    let mut doc = ThreadDoc {
        thread_id: "crash".into(),
        context_id: "agui-x".into(),
        cwd: "/w".into(),
        execution: Execution {
            execution_id: "e".into(),
            ros_invocation_id: "r".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    for i in 0..rounds {
        doc.record_run(&format!("run-{i}"), &"d".repeat(64));
        doc.execution.pipeline_sequence = i as i64;
        store.save(&doc).unwrap();
        if rounds != u64::MAX {
            let back = store
                .load(&ThreadKey::shared("crash"))
                .unwrap()
                .expect("the file just saved");
            assert_eq!(back.execution.pipeline_sequence, i as i64);
            assert_eq!(back.run_digests.len() as u64, i + 1);
        }
    }
    if rounds != u64::MAX {
        drop(store);
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}

#[test]
fn sigkill_during_saves_never_leaves_a_torn_file() {
    let dir = temp_dir("crash");
    let state = dir.join("state");
    let exe = std::env::current_exe().unwrap();
    let mut last_seq = -1i64;
    let save_loop = common::test_path(module_path!(), "crash_child_save_loop");
    for i in 0..25u64 {
        let mut child = Command::new(&exe)
            .args(["--exact", &save_loop, "--nocapture", "--test-threads=1"])
            .env("IAC_AGUI_CRASH_DIR", &state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(40 + (i * 37) % 90));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // A new process takes the lock, sweeps temp files, and finds a valid document.
        let store = FileStore::open(&state).unwrap();
        if let Some(doc) = store.load(&ThreadKey::shared("crash")).unwrap() {
            assert!(doc.execution.pipeline_sequence >= 0);
            last_seq = doc.execution.pipeline_sequence;
        }
        let leftovers: Vec<_> = std::fs::read_dir(state.join("threads"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "temp files left after restart: {leftovers:?}"
        );
    }
    assert!(last_seq >= 0, "the child never managed to save");
    let _ = std::fs::remove_dir_all(dir);
}

/// The binary at trace level with its state under `dir`; stderr lines arrive on the channel
/// (those up to the ready line are returned).
fn spawn_traced(
    args: &[&str],
    dir: &Path,
) -> (
    std::process::Child,
    std::net::SocketAddr,
    std::sync::mpsc::Receiver<String>,
    Vec<String>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args(["--port", "0"])
        .args(args)
        .env("RUST_LOG", "trace")
        .env("IAC_CODE_AGUI_METRICS_TOKEN", CANARIES[4])
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", dir)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let l = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        log.push(l.clone());
        if let Some(addr) = common::procs::ready_line_addr(&l) {
            break addr;
        }
    };
    (child, addr, rx, log)
}

const CANARIES: &[&str] = &[
    "CANARY-KEY-7f3a",
    "CANARY-HDR-91bc",
    "CANARY-AKS-55d2",
    "CANARY-STS-0e6f",
    // The metrics token (a secret of the server's own).
    "CANARY-MTR-3c1d",
];

#[test]
fn secrets_never_reach_state_files_or_trace_logs() {
    let dir = temp_dir("canary");
    let (mut child, addr, rx, mut log) = spawn_traced(&["--demo"], &dir);
    let secret_props = |run: &str, text: &str, resume: Option<serde_json::Value>| {
        let mut b = json!({"threadId": "sec", "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m", "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir.join("ws"),
                "llmApiKey": CANARIES[0], "llmHeaders": {"X-Secret": CANARIES[1]},
                "alibabaCloud": {"accessKeyId": "AKID", "accessKeySecret": CANARIES[2], "securityToken": CANARIES[3]},
                "model": "m", "thinking": {"enabled": true}}}});
        if let Some(r) = resume {
            b["resume"] = r;
        }
        serde_json::to_vec(&b).unwrap()
    };
    let r = post_json(
        addr,
        "/",
        &[],
        &secret_props("r1", "permission please", None),
    );
    let (ev, _) = sse_events(&r.body);
    let pid = interrupts(&ev)[0]["id"].as_str().unwrap().to_string();
    let resume =
        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]);
    let r = post_json(addr, "/", &[], &secret_props("r2", "", Some(resume)));
    assert_eq!(r.status, 200);
    let r = post_json(addr, "/", &[], &secret_props("r3", "fault-garbage", None));
    assert_eq!(r.status, 200);
    let bearer = format!("Bearer {}", CANARIES[4]);
    let r = common::raw(
        addr,
        &common::request("GET", "/metrics", &[("Authorization", &bearer)], b""),
    );
    assert_eq!(r.status, 200);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
        log.push(l);
    }
    let logs = log.join("\n");
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG") || logs.contains("INFO"),
        "no logs captured"
    );
    let mut files = String::new();
    for e in walk(&dir.join("state")) {
        files.push_str(&String::from_utf8_lossy(&std::fs::read(e).unwrap()));
    }
    assert!(
        files.contains("runDigests"),
        "the state file was not written"
    );
    for c in CANARIES {
        assert!(!logs.contains(c), "{c} leaked into the logs");
        assert!(!files.contains(c), "{c} leaked into the state directory");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Every `metadata.iac_code` key of a new turn, against the reference's full capture
/// (`a2a_send_streaming_message_full.json`), with canary values: sent to the kernel exactly,
/// and (apart from the user id, which the thread schema holds) never on disk or in the logs.
#[test]
fn a_new_turn_sends_every_metadata_key_and_keeps_none_on_disk_or_in_logs() {
    let full: serde_json::Value = serde_json::from_str(include_str!(
        "../fixtures/agui/a2a_send_streaming_message_full.json"
    ))
    .unwrap();
    // Fixture value → canary, so every secret can be looked for afterwards.
    let canary = |v: &str| match v {
        "u1" => "CANARY-USER-1",
        "web" => "CANARY-CHANNEL",
        "selling" => "CANARY-PIPELINE",
        "invocation-1" => "CANARY-ROS",
        "1" => "CANARY-HEADER-VALUE",
        "AK" => "CANARY-AKID",
        "SK" => "CANARY-AKSECRET",
        "STS" => "CANARY-STS-TOKEN",
        "cn-hangzhou" => "CANARY-REGION",
        "qwen-max" => "CANARY-MODEL",
        "sk-x" => "CANARY-API-KEY",
        other => panic!("unexpected fixture value {other}"),
    };
    let dir = temp_dir("metadata");
    let ctx = iac_agui::adapter::admission::context_id("meta");
    let done = json!({"task": {"id": "t1", "contextId": ctx, "status": {"state": "TASK_STATE_COMPLETED"}}});
    let kernel = ScriptKernel::start(vec![Canned {
        expect: "SendStreamingMessage".into(),
        status: 200,
        content_type: "text/event-stream",
        body: sse_body(&[done]),
    }]);
    let (mut child, addr, rx, mut log) = spawn_traced(&["--a2a-url", &kernel.url], &dir);
    let ws = dir.join("ws").to_string_lossy().into_owned();
    let body = json!({"threadId": "meta", "runId": "r1", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "message-1", "role": "user", "content": "List my files"}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": canary("invocation-1"),
            "cwd": ws, "userId": canary("u1"), "channel": canary("web"), "preferredLanguage": "en",
            "candidatePresentation": "rich", "runMode": "pipeline", "pipelineName": canary("selling"),
            "llmHeaders": {"X-Trace": canary("1")}, "model": canary("qwen-max"), "llmApiKey": canary("sk-x"),
            "thinking": {"enabled": true, "effort": "high", "budget": 2048},
            "alibabaCloud": {"accessKeyId": canary("AK"), "accessKeySecret": canary("SK"),
                "securityToken": canary("STS"), "regionId": canary("cn-hangzhou")}}}});
    let r = post_json(addr, "/", &[], &serde_json::to_vec(&body).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let (ev, _) = sse_events(&r.body);
    assert_eq!(last(&ev)["type"], "RUN_FINISHED", "{}", r.text());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(300)) {
        log.push(l);
    }

    // The wire: the fixture's keys, in its order, with the canaries in place of its values.
    fn substitute(v: &serde_json::Value, f: &dyn Fn(&str) -> &'static str) -> serde_json::Value {
        match v {
            serde_json::Value::String(s) => serde_json::Value::String(f(s).to_string()),
            serde_json::Value::Object(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), substitute(v, f)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let want_meta = &full["params"]["message"]["metadata"]["iac_code"];
    let reqs = kernel.requests.lock().unwrap().clone();
    let sent = &reqs[0].1["params"]["message"];
    let got = sent["metadata"]["iac_code"].as_object().unwrap();
    let want = want_meta.as_object().unwrap();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "metadata keys and their order"
    );
    let enumerated = [
        "preferredLanguage",
        "candidatePresentation",
        "run_mode",
        "cleanupOnly",
        "thinking",
    ];
    for (k, w) in want {
        let w = match k.as_str() {
            "cwd" => serde_json::Value::String(ws.clone()),
            k if enumerated.contains(&k) => w.clone(),
            _ => substitute(w, &canary),
        };
        assert_eq!(got[k], w, "metadata key {k}");
    }
    assert_eq!(sent["messageId"], "message-1");
    assert_eq!(sent["parts"], full["params"]["message"]["parts"]);
    assert_eq!(
        reqs[0].1["params"]["configuration"],
        full["params"]["configuration"]
    );

    // Disk and logs.
    let mut files = String::new();
    for e in walk(&dir.join("state")) {
        files.push_str(&String::from_utf8_lossy(&std::fs::read(e).unwrap()));
    }
    assert!(files.contains("\"userId\": \"CANARY-USER-1\""), "{files}");
    let logs = log.join("\n");
    for secret in [
        "CANARY-CHANNEL",
        "CANARY-PIPELINE",
        "CANARY-HEADER-VALUE",
        "X-Trace",
        "CANARY-AKID",
        "CANARY-AKSECRET",
        "CANARY-STS-TOKEN",
        "CANARY-REGION",
        "CANARY-MODEL",
        "CANARY-API-KEY",
    ] {
        assert!(
            !files.contains(secret),
            "{secret} reached the state directory"
        );
        assert!(!logs.contains(secret), "{secret} reached the logs");
    }
    assert!(
        !logs.contains("CANARY-USER-1"),
        "the user id reached the logs"
    );
    for key in [
        "preferredLanguage",
        "runMode",
        "run_mode",
        "thinking",
        "channel",
        "pipeline_name",
        "llm_headers",
        "iac_code_model",
    ] {
        assert!(!files.contains(key), "{key} reached the state directory");
    }
    let _ = std::fs::remove_dir_all(dir);
}
