//! Threads as durable conversations (issue 39), against the real binary and a demo kernel
//! process: the listing, a conversation's pages, deletion, their refusals, a restart, and a
//! damaged conversation file contained to its thread.
// The threads extra (feature `threads`), against the demo kernel.

use crate::common;

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

/// Issue 46.13: a deleted thread was answered `HTTP/1.1 204 Unknown`; the bytes on the wire
/// are the standard status line, with no body and no Content-Length (RFC 9110 §8.6), and
/// the connection serves the next request.
#[test]
fn a_delete_is_answered_204_no_content_on_the_wire() {
    use std::io::Read;
    let p = start("threads-204", &[]);
    run(&p, "gone", "g1", "hello");
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(&request("DELETE", "/threads/gone", &[], b""))
        .unwrap();
    s.write_all(&request("GET", "/health", &[("Connection", "close")], b""))
        .unwrap();
    let mut wire = Vec::new();
    s.read_to_end(&mut wire).unwrap();
    let wire = String::from_utf8_lossy(&wire);
    let (first, rest) = wire.split_once("\r\n\r\n").expect("a head");
    assert!(first.starts_with("HTTP/1.1 204 No Content\r\n"), "{wire}");
    assert!(
        !first.to_ascii_lowercase().contains("content-length"),
        "{wire}"
    );
    assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{wire}");
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
    assert!(state.join("a.json").exists() && state.join("a~history.jsonl").exists());
    let d = send(p.addr, "DELETE", "/threads/a", &[]);
    assert_eq!(d.status, 204, "{}", d.text());
    assert!(!state.join("a.json").exists() && !state.join("a~history.jsonl").exists());
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
    let file = p.dir.join("state/threads/hurt~history.jsonl");
    std::fs::write(
        &file,
        b"{\"schemaVersion\": 2, \"threadId\": \"hurt\", \"messa\n",
    )
    .unwrap();
    let (adapter, addr) = common::procs::adapter(&p.dir, p.kernel_port, &[]);
    p.adapter = adapter;
    p.addr = addr;
    assert_eq!(messages(&p, "keep", ""), before, "lost in the restart");
    let hurt = get(p.addr, "/threads/hurt/messages", &[]);
    assert_eq!(hurt.status, 500, "{}", hurt.text());
    assert_eq!(hurt.error_code(), "HISTORY_UNREADABLE");
    // The listing and the other thread are not affected; the damaged one is still listed
    // (it exists, and can be deleted), as it was.
    let list = get(p.addr, "/threads", &[]).json();
    let listed: Vec<&str> = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["hurt", "keep"], "{list}");
    assert_eq!(list["threads"][1]["title"], "remember me");
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
                .starts_with("hurt~history.jsonl.damaged-")
        })
        .count();
    assert_eq!(aside, 1);
    // A future version's file is refused the same way, with its own reason.
    let mut future = serde_json::to_vec(&json!({"schemaVersion": 9, "threadId": "keep",
        "createdAt": 1}))
    .unwrap();
    future.push(b'\n');
    std::fs::write(p.dir.join("state/threads/keep~history.jsonl"), future).unwrap();
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
            std::fs::metadata(p.dir.join(format!("state/threads/{t}~history.jsonl")))
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

/// Start a run on `thread` and keep its stream open (read to its first event).
fn open_run(p: &Procs, thread: &str, run: &str, text: &str) -> Reader {
    let mut sock = TcpStream::connect(p.addr).unwrap();
    sock.write_all(&request(
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        &p.body(thread, run, text),
    ))
    .unwrap();
    let mut r = Reader::new(sock);
    assert_eq!(r.head().unwrap().0, 200);
    r
}

fn listed<'a>(list: &'a Value, thread: &str) -> Option<&'a Value> {
    list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["threadId"] == thread)
}

#[test]
fn a_running_first_turn_is_listed_with_the_run_to_re_attach_to() {
    // Regression (issue 45, item 7): a first turn was listed only once it ended, so another
    // tab could neither see it nor re-attach to it; the same within the disconnect grace.
    let p = start("threads-running", &["--disconnect-grace", "10"]);
    let r = open_run(&p, "w", "w1", "wait 4");
    let list = get(p.addr, "/threads", &[]).json();
    let w =
        listed(&list, "w").unwrap_or_else(|| panic!("a running first turn is not listed: {list}"));
    assert_eq!(w["status"], "running", "{list}");
    assert_eq!(w["runId"], "w1");
    assert_eq!(w["title"], "wait 4");
    let exec = w["executionId"].as_str().unwrap().to_string();
    // Its conversation holds the user's message already.
    assert_eq!(messages(&p, "w", "")["messages"][0]["content"], "wait 4");
    // The client goes; within the grace the run is still listed as running, and another
    // client re-attaches with what the listing gave.
    drop(r);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let list = get(p.addr, "/threads", &[]).json();
    assert_eq!(listed(&list, "w").unwrap()["status"], "running", "{list}");
    let b = serde_json::to_vec(
        &json!({"threadId": "w", "runId": "w1", "rosInvocationId": "r",
        "afterSequence": -1}),
    )
    .unwrap();
    let sub = post_json(
        p.addr,
        &format!("/extensions/iac-code/v1/executions/{exec}/subscribe"),
        &[],
        &b,
    );
    assert_eq!(sub.status, 200, "{}", sub.text());
    let (events, _) = sse_events(&sub.body);
    check_stream(&events).unwrap();
    let list = get(p.addr, "/threads", &[]).json();
    let w = listed(&list, "w").unwrap();
    assert_eq!(w["status"], "idle", "{list}");
    assert!(w.get("executionId").is_none());
}

#[test]
fn a_turn_cut_by_a_crash_is_in_its_conversation_marked_cut() {
    // Regression (issue 45, item 6): a crash mid-run lost the turn, the user's message
    // included, although the state file had saved the run: the thread was not listed and
    // its messages were [].
    let mut p = start("threads-cut", &[]);
    run(&p, "c", "c1", "hello");
    let _r = open_run(&p, "c", "c2", "wait 30");
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let (adapter, addr) = common::procs::adapter(&p.dir, p.kernel_port, &[]);
    p.adapter = adapter;
    p.addr = addr;
    let m = messages(&p, "c", "")["messages"].clone();
    let roles: Vec<&str> = m
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "system"], "{m}");
    assert_eq!(m[2]["content"], "wait 30");
    assert_eq!(m[3]["id"], "iac-agui-turn-cut-c2");
    let list = get(p.addr, "/threads", &[]).json();
    let c = listed(&list, "c").unwrap();
    assert_eq!(
        c["messageCount"], 4,
        "state, listing and conversation agree: {list}"
    );
    assert_eq!(c["status"], "idle");
    // The run id stays taken, as the state file says; the thread goes on.
    let again = post_json(p.addr, "/", &[], &p.body("c", "c2", "wait 30"));
    assert_eq!(again.error_code(), "DUPLICATE_RUN_ID", "{}", again.text());
    run(&p, "c", "c3", "after the crash");
    let m = messages(&p, "c", "")["messages"].clone();
    assert_eq!(m[4]["content"], "after the crash", "{m}");
}

/// Stop the adapter and make `n` copies of thread `seed` (state file and conversation),
/// each another thread id; the index journal goes too (as after an upgrade).
fn clone_threads(p: &mut Procs, seed: &str, n: usize, with_log: bool) {
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let dir = p.dir.join("state/threads");
    let state = std::fs::read_to_string(dir.join(format!("{seed}.json"))).unwrap();
    let log = std::fs::read_to_string(dir.join(format!("{seed}~history.jsonl"))).unwrap();
    for i in 0..n {
        let id = format!("{seed}-{i:05}");
        let quoted = |s: &str| s.replace(&format!("\"{seed}\""), &format!("\"{id}\""));
        std::fs::write(dir.join(format!("{id}.json")), quoted(&state)).unwrap();
        if with_log {
            std::fs::write(dir.join(format!("{id}~history.jsonl")), quoted(&log)).unwrap();
        }
    }
    if !with_log {
        std::fs::remove_file(dir.join(format!("{seed}~history.jsonl"))).unwrap();
    }
    let _ = std::fs::remove_file(dir.join("~index.jsonl"));
    let (adapter, addr) = common::procs::adapter(&p.dir, p.kernel_port, &[]);
    p.adapter = adapter;
    p.addr = addr;
}

#[test]
fn every_thread_is_listed_past_five_thousand_newest_first() {
    // Regression (issue 45, item 4): the listing capped directory entries before it filtered
    // for conversations, in readdir order: 106 of 5,102 threads were on no page.
    let mut p = start("threads-many", &[]);
    run(&p, "seed", "s1", "hello");
    clone_threads(&mut p, "seed", 5_101, true);
    run(&p, "newest", "n1", "the newest one");
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("/threads?limit=200&cursor={c}"),
            None => "/threads?limit=200".to_string(),
        };
        let page = get(p.addr, &q, &[]).json();
        seen.extend(
            page["threads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["threadId"].as_str().unwrap().to_string()),
        );
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5_103);
    assert_eq!(seen[0], "newest");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 5_103, "a thread on two pages");
}

#[test]
fn threads_without_a_conversation_file_expire_too() {
    // Regression (issue 45, item 9): threads with a state file and no conversation (an
    // upgraded server's, iac-code 0.16.0's, one cut by a crash) were never expired.
    let mut p = start("threads-state-only", &[]);
    run(&p, "plain", "p1", "hello");
    clone_threads(&mut p, "plain", 3, false);
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let (adapter, addr) =
        common::procs::adapter(&p.dir, p.kernel_port, &["--thread-retention", "2"]);
    p.adapter = adapter;
    p.addr = addr;
    let dir = p.dir.join("state/threads");
    let gone = wait_until(std::time::Duration::from_secs(20), || {
        !dir.join("plain.json").exists() && !dir.join("plain-00002.json").exists()
    });
    assert!(
        gone,
        "threads with only a state file were kept past their retention"
    );
}

#[test]
fn a_conversation_file_refused_for_what_it_is_answers_history_unreadable() {
    // Regression (issue 45, item 10): a symlink, a directory or an oversized file answered
    // 503 STATE_UNAVAILABLE (clients retry) instead of 500 HISTORY_UNREADABLE.
    let p = start("threads-refused", &[]);
    run(&p, "s", "s1", "hello");
    run(&p, "d", "d1", "hello");
    let dir = p.dir.join("state/threads");
    let real = dir.join("s~history.jsonl");
    let elsewhere = p.dir.join("elsewhere.jsonl");
    std::fs::rename(&real, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &real).unwrap();
    std::fs::remove_file(dir.join("d~history.jsonl")).unwrap();
    std::fs::create_dir(dir.join("d~history.jsonl")).unwrap();
    for t in ["s", "d"] {
        let r = get(p.addr, &format!("/threads/{t}/messages"), &[]);
        assert_eq!(r.status, 500, "{t}: {}", r.text());
        assert_eq!(r.error_code(), "HISTORY_UNREADABLE");
    }
}

#[test]
fn a_trimmed_conversation_does_not_take_its_dropped_messages_back() {
    // Regression (issue 45, item 10a): a client that restates its whole history (as
    // `HttpAgent` does) got the messages the bounds had dropped stored again as the newest.
    // Messages large enough that the log is compacted on the way: what it dropped is then
    // known by id only.
    let p = start("threads-trimmed", &["--history-max-messages", "4"]);
    let mut sent: Vec<Value> = Vec::new();
    let filler = "x".repeat(64 * 1024);
    for i in 1..=10 {
        sent.push(
            json!({"id": format!("u{i}"), "role": "user", "content": format!("turn {i} {filler}")}),
        );
        let mut b: Value = serde_json::from_slice(&p.body("t", &format!("r{i}"), "x")).unwrap();
        b["messages"] = json!(sent);
        let r = post_json(p.addr, "/", &[], &serde_json::to_vec(&b).unwrap());
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let m = messages(&p, "t", "");
    let users: Vec<&str> = m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["u9", "u10"]);
    assert_eq!(m["dropped"], 16);
}

fn patch_title(p: &Procs, thread: &str, body: &[u8], lang: &str) -> Resp {
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.write_all(&request(
        "PATCH",
        &format!("/threads/{thread}"),
        &[
            ("Content-Type", "application/json"),
            ("Accept-Language", lang),
        ],
        body,
    ))
    .unwrap();
    Reader::new(s).response(false).expect("an answer")
}

#[test]
fn a_renamed_thread_keeps_its_title_through_turns_and_restarts() {
    // Issue 47: `PATCH /threads/{id}` `{"title": …}` (bounded, no control characters); it
    // touches no run, and the title survives further turns and restarts.
    let mut p = start("threads-rename", &[]);
    run(&p, "t", "r1", "deploy the staging stack");
    let r = patch_title(&p, "t", br#"{"title":"Staging rollout"}"#, "en");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["title"], "Staging rollout");
    let _running = open_run(&p, "t", "r2", "wait 1");
    let during = patch_title(&p, "t", br#"{"title":"Staging rollout, day 2"}"#, "en");
    assert_eq!(
        during.status,
        200,
        "a rename waits for no run: {}",
        during.text()
    );
    drop(_running);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    run(&p, "t", "r3", "and production");
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let (adapter, addr) = common::procs::adapter(&p.dir, p.kernel_port, &[]);
    p.adapter = adapter;
    p.addr = addr;
    let list = get(p.addr, "/threads", &[]).json();
    assert_eq!(
        listed(&list, "t").unwrap()["title"],
        "Staging rollout, day 2",
        "{list}"
    );
    assert_eq!(
        get(p.addr, "/threads/t", &[]).json()["title"],
        "Staging rollout, day 2"
    );
    // Back to the first message's.
    let back = patch_title(&p, "t", br#"{"title":null}"#, "en");
    assert_eq!(back.json()["title"], "deploy the staging stack");
    // Refusals name the field, in the request's language; an unknown thread is a 404.
    let long = format!(r#"{{"title":"{}"}}"#, "x".repeat(201));
    for (body, field, code) in [
        (long.as_bytes(), "title", "INVALID_INPUT"),
        (
            br#"{"title":"a\u0007b"}"#.as_slice(),
            "title",
            "INVALID_INPUT",
        ),
        // A right-to-left override (issue 57, 4).
        (
            br#"{"title":"a\u202egnp.exe"}"#.as_slice(),
            "title",
            "INVALID_INPUT",
        ),
        (br#"{"title":7}"#.as_slice(), "title", "INVALID_INPUT"),
        (br#"{"name":"x"}"#.as_slice(), "name", "INVALID_INPUT"),
        (b"{nope".as_slice(), "", "INVALID_JSON"),
    ] {
        let mut seen = std::collections::HashSet::new();
        for lang in ["en", "zh", "es", "fr", "de", "ja", "pt"] {
            let r = patch_title(&p, "t", body, lang);
            assert_eq!(r.status, 400, "{}", r.text());
            assert_eq!(r.error_code(), code);
            let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
            assert!(msg.contains(field), "{lang}: {msg}");
            seen.insert(msg);
        }
        assert_eq!(seen.len(), 7, "one message per language");
    }
    let none = patch_title(&p, "nobody", br#"{"title":"x"}"#, "en");
    assert_eq!(none.error_code(), "THREAD_NOT_FOUND");
}

#[test]
fn threads_are_found_by_title_and_status_and_an_interrupted_one_says_what_it_waits_for() {
    // Issue 47: `q` and `status` filter the listing (with its pages); an interrupted thread
    // gives its pending interrupts whole, and a new message's 409 names them.
    let p = start("threads-find", &[]);
    for i in 0..5 {
        run(&p, &format!("plain{i}"), "r1", &format!("Plain chat {i}"));
    }
    let q = run(&p, "asks", "r1", "a question about Regions");
    let pending = interrupts(&q)[0]["id"].as_str().unwrap().to_string();
    let found = get(p.addr, "/threads?q=REGIONS", &[]).json();
    let ids: Vec<&str> = found["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["asks"]);
    // Under Unicode case folding (issue 57): `STRASSE` finds `Straße`.
    run(&p, "street", "r1", "Straße bauen");
    let found = get(p.addr, "/threads?q=STRASSE", &[]).json();
    assert_eq!(found["threads"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["threads"][0]["threadId"], "street");
    let waiting = get(p.addr, "/threads?status=interrupted", &[]).json();
    assert_eq!(waiting["threads"].as_array().unwrap().len(), 1, "{waiting}");
    let entry = &waiting["threads"][0];
    assert_eq!(entry["interrupts"][0]["id"], pending.as_str());
    assert_eq!(entry["interrupts"][0]["kind"], "ask_user_question");
    assert!(entry["interrupts"][0]["responseSchema"].is_object());
    assert!(
        !entry["interrupts"][0]["summary"]
            .as_str()
            .unwrap()
            .contains('\n')
    );
    let one = get(p.addr, "/threads/asks", &[]).json();
    assert_eq!(one["interrupts"], entry["interrupts"]);
    // Pages of a filtered listing.
    let page = get(p.addr, "/threads?q=plain&limit=2", &[]).json();
    assert_eq!(page["threads"].as_array().unwrap().len(), 2);
    let c = page["nextCursor"].as_str().unwrap().to_string();
    let rest = get(
        p.addr,
        &format!("/threads?q=plain&limit=10&cursor={c}"),
        &[],
    )
    .json();
    assert_eq!(rest["threads"].as_array().unwrap().len(), 3);
    assert!(
        rest["threads"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "idle")
    );
    // A new message instead of an answer: the 409 names what it waits for.
    let r = post_json(p.addr, "/", &[], &p.body("asks", "r2", "hello?"));
    assert_eq!(r.error_code(), "RESUME_REQUIRED");
    assert_eq!(r.json()["error"]["interruptIds"], json!([pending]));
    assert_eq!(r.json()["error"]["executionId"], one["executionId"]);
    for bad in ["/threads?status=busy", "/threads?q=", "/threads?q=a%07b"] {
        let r = get(p.addr, bad, &[]);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
}

/// A permission allowed on thread `thread`: the conversation the server then keeps.
fn permission_allowed(p: &Procs, thread: &str) -> Value {
    let first = run(p, thread, "p1", "permission please");
    let id = interrupts(&first)[0]["id"].as_str().unwrap().to_string();
    let body = json!({"threadId": thread, "runId": "p2", "state": {}, "tools": [], "context": [],
        "messages": [], "resume": [{"interruptId": id, "status": "resolved",
            "payload": {"decision": "allow_once"}}],
        "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "r",
            "cwd": p.dir.join("ws")}}});
    let r = post_json(p.addr, "/", &[], &serde_json::to_vec(&body).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    messages(p, thread, "")["messages"].clone()
}

#[test]
fn in_0_1_mode_the_text_after_a_permission_is_stored_as_its_own_message() {
    // Regression (issue 46.7): 0.1 mode keeps the kernel's message id across the resume, and
    // the stored conversation was one message "I'll create it.Created the file." above the
    // tool's result. It is stored as 1.0 mode stores it: text, tool call, result, text.
    let shape = |m: &Value| -> Vec<(String, String, usize)> {
        m.as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let calls = m["toolCalls"].as_array().map_or(0, Vec::len);
                let text = m["content"].as_str().unwrap_or("").to_string();
                (m["role"].as_str().unwrap().to_string(), text, calls)
            })
            .collect()
    };
    let mut old = start("threads-perm-01", &[]);
    let stored = permission_allowed(&old, "perm");
    let v1 = start("threads-perm-10", &["--agui-protocol", "1.0"]);
    assert_eq!(shape(&stored), shape(&permission_allowed(&v1, "perm")));
    let said: Vec<(String, String, usize)> = shape(&stored)
        .into_iter()
        .filter(|(role, ..)| role != "reasoning")
        .collect();
    let s = |x: &str| x.to_string();
    assert_eq!(
        said,
        [
            (s("user"), s("permission please"), 0),
            (s("assistant"), s("I'll create it."), 1),
            (s("tool"), s("Exit code: 0"), 0),
            (s("assistant"), s("Created the file."), 0),
        ]
    );
    // Named as 1.0 mode names it (the kernel's id and the run's suffix), so the ids stay
    // unique; and the log replays to the same conversation after a restart.
    let ids: Vec<&str> = stored
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids[1].starts_with(&format!("{}.", ids[0])), "{ids:?}");
    let _ = old.adapter.kill();
    let _ = old.adapter.wait();
    let (adapter, addr) = common::procs::adapter(&old.dir, old.kernel_port, &[]);
    old.adapter = adapter;
    old.addr = addr;
    assert_eq!(messages(&old, "perm", "")["messages"], stored);
}
