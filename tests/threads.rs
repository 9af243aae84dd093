//! Threads as durable conversations (issue 39), against the real binary and a demo kernel
//! process: the listing, a conversation's pages, deletion, their refusals, a restart, and a
//! damaged conversation file contained to its thread.
#![cfg(feature = "demo")]

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use common::procs::{Procs, start};
use common::*;
use serde_json::{Value, json};

fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    send(addr, "GET", path, headers)
}

fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&request(method, path, headers, b"")).unwrap();
    Reader::new(s).response(false).expect("an answer")
}

fn run(p: &Procs, thread: &str, run: &str, text: &str) -> Vec<Value> {
    let r = post_json(p.addr, "/", &[], &p.body(thread, run, text));
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    check_stream(&events).unwrap();
    events
}

fn messages(p: &Procs, thread: &str, query: &str) -> Value {
    let r = get(p.addr, &format!("/threads/{thread}/messages{query}"), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn a_threads_conversation_is_listed_paged_and_deleted() {
    let p = start("threads-basic", &[]);
    run(&p, "a", "a1", "first thread, hello");
    let q = run(&p, "b", "b1", "a question please");
    assert_eq!(last(&q)["type"], "RUN_FINISHED");
    run(&p, "c", "c1", "third one");

    // Newest activity first; b waits on its question.
    let list = get(p.addr, "/threads", &[]).json();
    let ids: Vec<&str> = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c", "b", "a"], "{list}");
    let b = &list["threads"][1];
    assert_eq!(b["status"], "interrupted");
    assert_eq!(b["title"], "a question please");
    assert!(b["messageCount"].as_u64().unwrap() >= 2);
    assert!(b["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(list["threads"][0]["status"], "idle");
    assert_eq!(list["nextCursor"], Value::Null);

    // Pages of two, then one, never repeating.
    let page1 = get(p.addr, "/threads?limit=2", &[]).json();
    assert_eq!(page1["threads"].as_array().unwrap().len(), 2);
    let cursor = page1["nextCursor"].as_str().unwrap().to_string();
    let page2 = get(p.addr, &format!("/threads?limit=2&cursor={cursor}"), &[]).json();
    assert_eq!(page2["threads"][0]["threadId"], "a");
    assert_eq!(page2["nextCursor"], Value::Null);

    // A conversation: the user's message, the answer; pages backwards with `before`.
    let all = messages(&p, "a", "");
    let m = all["messages"].as_array().unwrap();
    assert_eq!(
        m[0],
        json!({"id": "a1", "role": "user", "content": "first thread, hello"})
    );
    assert_eq!(m[1]["role"], "assistant");
    assert!(!m[1]["content"].as_str().unwrap().is_empty());
    let last_one = messages(&p, "a", "?limit=1");
    assert_eq!(last_one["messages"][0], m[m.len() - 1]);
    let before = last_one["nextCursor"].as_str().unwrap().to_string();
    let earlier = messages(&p, "a", &format!("?limit=1&before={before}"));
    assert_eq!(earlier["messages"][0], m[m.len() - 2]);

    // Delete: gone, files and all; a second delete is a 404.
    let state = p.dir.join("state/threads");
    assert!(state.join("a.json").exists() && state.join("a~history.json").exists());
    let d = send(p.addr, "DELETE", "/threads/a", &[]);
    assert_eq!(d.status, 204, "{}", d.text());
    assert!(!state.join("a.json").exists() && !state.join("a~history.json").exists());
    let again = send(p.addr, "DELETE", "/threads/a", &[]);
    assert_eq!(again.status, 404);
    assert_eq!(again.error_code(), "THREAD_NOT_FOUND");
    let gone = get(p.addr, "/threads/a/messages", &[]);
    assert_eq!(gone.status, 404);
    assert_eq!(gone.error_code(), "THREAD_NOT_FOUND");
    // The id is free again: a new conversation.
    run(&p, "a", "a1", "a fresh start");
    assert_eq!(
        messages(&p, "a", "")["messages"][0]["content"],
        "a fresh start"
    );
}

#[test]
fn a_running_thread_is_not_deleted() {
    let p = start("threads-busy", &[]);
    let mut sock = TcpStream::connect(p.addr).unwrap();
    sock.write_all(&request(
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        &p.body("w", "w1", "wait 3"),
    ))
    .unwrap();
    let mut r = Reader::new(sock);
    assert_eq!(r.head().unwrap().0, 200);
    let busy = wait_until(std::time::Duration::from_secs(5), || {
        send(p.addr, "DELETE", "/threads/w", &[]).status == 409
    });
    assert!(busy, "a running thread was deleted");
    let d = send(p.addr, "DELETE", "/threads/w", &[]);
    assert_eq!(d.error_code(), "THREAD_BUSY");
    assert_eq!(d.json()["error"]["runId"], "w1");
    let list = get(p.addr, "/threads", &[]).json();
    let _ = list;
    while let Some(c) = r.chunk() {
        if c.is_empty() {
            break;
        }
    }
    assert_eq!(send(p.addr, "DELETE", "/threads/w", &[]).status, 204);
}

#[test]
fn bad_pages_are_400s_that_name_the_field() {
    let p = start("threads-bad", &[]);
    run(&p, "t", "t1", "hello");
    for (path, field, lang) in [
        ("/threads?limit=0", "limit", "en"),
        ("/threads?limit=201", "limit", "fr"),
        ("/threads?limit=x", "limit", "zh"),
        ("/threads?cursor=%21%21", "cursor", "de"),
        ("/threads?cursor=", "cursor", "ja"),
        ("/threads?limit=1&limit=2", "limit", "es"),
        ("/threads/t/messages?before=bm9wZQ", "before", "pt"),
        ("/threads/t/messages?limit=-1", "limit", "en"),
    ] {
        let r = get(p.addr, path, &[("Accept-Language", lang)]);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.error_code(), "INVALID_INPUT");
        assert!(r.error_message().contains(field), "{path}: {}", r.text());
    }
    // Other methods and a body are refused like on every route.
    assert_eq!(send(p.addr, "POST", "/threads", &[]).status, 405);
    assert_eq!(send(p.addr, "PUT", "/threads/t", &[]).status, 405);
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.write_all(b"GET /threads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    assert_eq!(Reader::new(s).response(false).unwrap().status, 413);
}

#[test]
fn conversations_survive_a_restart_and_a_damaged_one_stays_with_its_thread() {
    let mut p = start("threads-restart", &[]);
    run(&p, "keep", "k1", "remember me");
    run(&p, "hurt", "h1", "this file will be damaged");
    let before = messages(&p, "keep", "");
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let file = p.dir.join("state/threads/hurt~history.json");
    std::fs::write(
        &file,
        b"{\"schemaVersion\": 1, \"threadId\": \"hurt\", \"messa",
    )
    .unwrap();
    let (adapter, addr) = common::procs::adapter(&p.dir, p.kernel_port, &[]);
    p.adapter = adapter;
    p.addr = addr;
    assert_eq!(messages(&p, "keep", ""), before, "lost in the restart");
    let hurt = get(p.addr, "/threads/hurt/messages", &[]);
    assert_eq!(hurt.status, 500, "{}", hurt.text());
    assert_eq!(hurt.error_code(), "HISTORY_UNREADABLE");
    // The listing and the other thread are not affected.
    let list = get(p.addr, "/threads", &[]).json();
    assert_eq!(list["threads"][0]["threadId"], "keep", "{list}");
    // The next run on it keeps the damaged file aside and starts a new conversation.
    run(&p, "hurt", "h2", "again");
    let m = messages(&p, "hurt", "");
    assert_eq!(m["messages"][0]["content"], "again");
    let aside = std::fs::read_dir(p.dir.join("state/threads"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("hurt~history.json.damaged-")
        })
        .count();
    assert_eq!(aside, 1);
    // A future version's file is refused the same way, with its own reason.
    let future = serde_json::to_vec(&json!({"schemaVersion": 9, "threadId": "keep",
        "createdAt": 1, "updatedAt": 1, "dropped": 0, "messages": []}))
    .unwrap();
    std::fs::write(p.dir.join("state/threads/keep~history.json"), future).unwrap();
    assert_eq!(
        get(p.addr, "/threads/keep/messages", &[]).error_code(),
        "HISTORY_UNREADABLE"
    );
}

#[test]
fn metrics_count_threads_and_conversation_bytes() {
    let p = start("threads-metrics", &[]);
    let gauge = |name: &str| -> i64 {
        let text = get(p.addr, "/metrics", &[]).text();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    };
    assert_eq!(gauge("iac_agui_threads"), 0);
    run(&p, "m1", "r1", "hello");
    run(&p, "m2", "r1", "hello");
    assert_eq!(gauge("iac_agui_threads"), 2);
    let bytes = gauge("iac_agui_history_bytes");
    let on_disk: u64 = ["m1", "m2"]
        .iter()
        .map(|t| {
            std::fs::metadata(p.dir.join(format!("state/threads/{t}~history.json")))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(bytes as u64, on_disk);
    assert_eq!(send(p.addr, "DELETE", "/threads/m1", &[]).status, 204);
    assert_eq!(gauge("iac_agui_threads"), 1);
}

#[test]
fn threads_idle_past_the_retention_are_deleted() {
    let p = start("threads-retention", &["--thread-retention", "2"]);
    run(&p, "old", "o1", "hello");
    assert_eq!(get(p.addr, "/threads/old/messages", &[]).status, 200);
    let gone = wait_until(std::time::Duration::from_secs(15), || {
        get(p.addr, "/threads/old/messages", &[]).status == 404
    });
    assert!(gone, "kept past its retention");
    assert!(!p.dir.join("state/threads/old.json").exists());
    // A thread that is active again is kept.
    run(&p, "new", "n1", "hello");
    assert_eq!(get(p.addr, "/threads/new/messages", &[]).status, 200);
}
