//! SIGKILL the adapter at varied points during runs that end in interrupts. After every kill
//! each thread file loads and validates, no temp file is left, and every persisted interrupt
//! can be resumed by the restarted adapter (bounded: 12 kills); with stored conversations
//! (feature `threads`) each reads, holds its admitted turn and is listed.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
#[cfg(feature = "threads")]
use iac_agui::conversation::Bounds;
use iac_agui::kernel::demo::{DemoConfig, DemoKernel};
#[cfg(feature = "threads")]
use iac_agui::store::conversations::Conversations;
use iac_agui::store::files::FileStore;
use serde_json::json;

fn start(url: &str, dir: &std::path::Path) -> (Child, std::net::SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args(["--port", "0", "--a2a-url", url])
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", dir)
        .env("IAC_CODE_AGUI_A2A_TOKEN", "tok")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let l = lines
            .next()
            .expect("the adapter exited before its ready line")
            .unwrap();
        if let Some(addr) = common::procs::ready_line_addr(&l) {
            break addr;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

#[cfg(feature = "threads")]
fn get(addr: std::net::SocketAddr, path: &str) -> Resp {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&request("GET", path, &[], b"")).unwrap();
    Reader::new(s).response(false).expect("an answer")
}

#[test]
fn sigkill_at_random_points_loses_nothing() {
    let kernel = DemoKernel::start(DemoConfig {
        token: Some("tok".into()),
        frame_delay: Duration::from_millis(15),
        tick: Duration::from_millis(50),
        cancel_linger: Duration::ZERO,
    })
    .unwrap();
    let dir = std::env::temp_dir().join(format!("iac-agui-crash-adapter-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let dir = std::fs::canonicalize(dir).unwrap();
    let body = |thread: &str, run: &str, resume: Option<serde_json::Value>| {
        let mut b = json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m", "role": "user", "content": "permission please"}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": dir.join("ws")}}});
        if let Some(r) = resume {
            b["resume"] = r;
            b["messages"] = json!([]);
        }
        serde_json::to_vec(&b).unwrap()
    };
    let mut resumed = 0;
    for i in 0..12u64 {
        let (mut child, addr) = start(&kernel.base_url(), &dir);
        // Start a run and kill the adapter somewhere between admission and well after the end.
        let thread = format!("c{i}");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let b = body(&thread, "r1", None);
        write!(s, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", b.len()).unwrap();
        s.write_all(&b).unwrap();
        std::thread::sleep(Duration::from_millis(10 + (i * 53) % 260));
        child.kill().unwrap();
        child.wait().unwrap();
        drop(s);
        // Every file is whole and valid; no temp files once a process has taken over.
        let store = std::sync::Arc::new(FileStore::open(&dir.join("state")).unwrap());
        #[cfg(feature = "threads")]
        let conversations = Conversations::new(store.clone(), Bounds::default());
        let mut pending = Vec::new();
        for e in std::fs::read_dir(dir.join("state/threads"))
            .unwrap()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.ends_with(".tmp"), "temp file left: {name}");
            if name == "~index.jsonl" {
                continue;
            }
            // A conversation reads. One without its thread's state file is an admission the
            // kill cut between its messages' append and its state save: never announced, and
            // not listed after the restart (`listed == admitted` below). Its one record may
            // even be torn (the kill came mid-append): then it holds nothing to read.
            if let Some(_id) = name.strip_suffix("~history.jsonl") {
                #[cfg(feature = "threads")]
                {
                    let key = iac_agui::principal::ThreadKey::shared(_id);
                    let read = conversations.read(&key).unwrap();
                    assert!(
                        read.is_some() || store.load(&key).unwrap().is_none(),
                        "{name}: an admitted thread's conversation reads nothing"
                    );
                }
                continue;
            }
            let id = name.trim_end_matches(".json");
            let key = iac_agui::principal::ThreadKey::shared(id);
            let doc = store.load(&key).unwrap().expect("a thread file");
            // State and conversation agree: an admitted turn's message is in it.
            #[cfg(feature = "threads")]
            {
                let t = conversations
                    .transcript(&key, &|_| iac_agui::store::index::Status::Idle)
                    .unwrap();
                let first = t.as_ref().and_then(|t| t.messages.first().cloned());
                assert_eq!(
                    first.map(|m| m["content"].clone()),
                    Some(json!("permission please")),
                    "{id}: admitted, but its conversation lacks the message"
                );
            }
            if let Some((pid, _)) = doc.execution.pending.first() {
                pending.push((id.to_string(), pid.clone()));
            }
        }
        #[cfg(feature = "threads")]
        drop(conversations);
        drop(store);
        // The restarted adapter resumes every persisted interrupt of this round's thread.
        let (mut child, addr) = start(&kernel.base_url(), &dir);
        for (t, pid) in pending.iter().filter(|(t, _)| *t == thread) {
            let r = post_json(
                addr,
                "/",
                &[],
                &body(
                    t,
                    "resume",
                    Some(
                        json!([{"interruptId": pid, "status": "resolved", "payload": {"decision": "allow_once"}}]),
                    ),
                ),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            let (ev, _) = sse_events(&r.body);
            check_stream(&ev).unwrap();
            let outcome = last(&ev)["outcome"]["type"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let code = last(&ev)["code"].as_str().unwrap_or("").to_string();
            assert!(
                outcome == "success" || code == "EXECUTION_LOST",
                "resume ended {outcome} {code}"
            );
            resumed += 1;
        }
        // The thread is listed after the restart, its turn in its conversation (marked cut
        // when the kill came before its end).
        #[cfg(feature = "threads")]
        {
            let admitted = dir.join(format!("state/threads/{thread}.json")).exists();
            let list = get(addr, "/threads").json();
            let listed = list["threads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["threadId"] == thread);
            assert_eq!(listed, admitted, "{list}");
            if admitted {
                let m = get(addr, &format!("/threads/{thread}/messages")).json();
                assert_eq!(m["messages"][0]["content"], "permission please", "{m}");
            }
        }
        // A thread whose run was cut off is not busy after the restart.
        let r = post_json(addr, "/", &[], &body(&thread, "after", None));
        assert!(
            r.status == 200 || r.error_code() == "RESUME_REQUIRED",
            "{} {}",
            r.status,
            r.text()
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eprintln!("interrupts resumed after a kill: {resumed}");
    assert!(
        resumed > 0,
        "no kill landed after an interrupt was persisted"
    );
    let _ = std::fs::remove_dir_all(dir);
}
