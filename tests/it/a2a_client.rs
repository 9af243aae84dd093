//! The A2A client against canned responses over real loopback sockets: every captured kernel
//! exchange in `tests/fixtures/a2a/` replays into the expected typed payloads.

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iac_agui::a2a::A2aError;
use iac_agui::a2a::client::{A2aClient, A2aConfig, Restore};
use iac_agui::a2a::types::{Kind, Payload, TaskState};
use serde_json::Value;

const FIX: &str = "tests/fixtures/a2a";

/// A canned HTTP responder: answers every connection with `status`, `content_type`, `body`,
/// optionally writing the body in small pieces. Records request heads and bodies.
struct Canned {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

fn canned(status: u16, content_type: &str, body: Vec<u8>, piece: usize) -> Canned {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let reqs = requests.clone();
    let ct = content_type.to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = Vec::new();
            let mut tmp = [0u8; 4096];
            // Read the head and a Content-Length body.
            loop {
                let n = s.read(&mut tmp).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&tmp[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
                    let cl = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= i + 4 + cl {
                        break;
                    }
                }
            }
            reqs.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf).into_owned());
            let chunked = ct.starts_with("text/event-stream");
            let mut head = format!("HTTP/1.1 {status} X\r\ncontent-type: {ct}\r\n");
            if chunked {
                head.push_str("transfer-encoding: chunked\r\n\r\n");
            } else {
                head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            }
            let _ = s.write_all(head.as_bytes());
            for p in body.chunks(piece.max(1)) {
                if chunked {
                    let _ = s.write_all(format!("{:x}\r\n", p.len()).as_bytes());
                    let _ = s.write_all(p);
                    let _ = s.write_all(b"\r\n");
                } else {
                    let _ = s.write_all(p);
                }
                let _ = s.flush();
            }
            if chunked {
                let _ = s.write_all(b"0\r\n\r\n");
            }
        }
    });
    Canned { url, requests }
}

fn client(url: &str) -> A2aClient {
    A2aClient::new(A2aConfig::new(url.to_string(), Some("testtoken".into())))
}

/// What an independent, line-based reading of a capture says the events are.
fn expected(sse: &[u8]) -> Vec<(Kind, Option<String>, Option<String>)> {
    let text = String::from_utf8(sse.to_vec()).unwrap();
    text.split("\r\n")
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| {
            let v: Value = serde_json::from_str(d).unwrap();
            let r = &v["result"];
            let (kind, obj) = if r["task"].is_object() {
                (Kind::Task, &r["task"])
            } else if r["statusUpdate"].is_object() {
                (Kind::StatusUpdate, &r["statusUpdate"])
            } else if r["artifactUpdate"].is_object() {
                (Kind::ArtifactUpdate, &r["artifactUpdate"])
            } else if r["message"].is_object() {
                (Kind::Message, &r["message"])
            } else {
                (Kind::Bare, r)
            };
            let tid = obj["taskId"]
                .as_str()
                .or(obj["id"].as_str())
                .map(str::to_string);
            let state = obj["status"]["state"]
                .as_str()
                .map(|s| TaskState::parse(s).as_str().to_string());
            (kind, tid, state)
        })
        .collect()
}

fn collect(url: &str) -> Result<Vec<Payload>, A2aError> {
    let s = client(url).session();
    let mut stream = s.send_streaming_message(serde_json::json!({}))?;
    let mut out = Vec::new();
    while let Some(p) = stream.next_payload()? {
        out.push(p);
    }
    Ok(out)
}

fn summary(ps: &[Payload]) -> Vec<(Kind, Option<String>, Option<String>)> {
    ps.iter()
        .map(|p| match p {
            Payload::Event(e) => (
                e.kind,
                e.task_id().map(str::to_string),
                e.state().map(|s| s.as_str().to_string()),
            ),
            Payload::Error(_) => panic!("unexpected error payload"),
        })
        .collect()
}

#[test]
fn every_captured_stream_replays_into_the_same_typed_events() {
    let mut n = 0;
    for entry in std::fs::read_dir(FIX).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".response.sse") {
            continue;
        }
        let sse = std::fs::read(&path).unwrap();
        let want = expected(&sse);
        assert!(!want.is_empty(), "{name}");
        for piece in [sse.len(), 7, 1000] {
            let srv = canned(200, "text/event-stream; charset=utf-8", sse.clone(), piece);
            let got = collect(&srv.url).unwrap();
            assert_eq!(summary(&got), want, "{name} piece {piece}");
        }
        n += 1;
    }
    assert!(n >= 14, "only {n} captured streams");
}

#[test]
fn line_ending_and_comment_variants_parse_identically() {
    let sse = std::fs::read(Path::new(FIX).join("permission_turn.00.response.sse")).unwrap();
    let want = expected(&sse);
    let text = String::from_utf8(sse).unwrap();
    let lf = text.replace("\r\n", "\n");
    let cr = text.replace("\r\n", "\r");
    let pings = text.replace(
        "\r\n\r\n",
        "\r\n\r\n: ping - 2026-11-30 00:17:09.129089+00:00\r\n\r\n",
    );
    for variant in [lf, cr, pings] {
        let srv = canned(200, "text/event-stream", variant.into_bytes(), 13);
        assert_eq!(summary(&collect(&srv.url).unwrap()), want);
    }
}

#[test]
fn the_plain_turn_has_the_documented_shape() {
    let sse = std::fs::read(Path::new(FIX).join("plain.00.response.sse")).unwrap();
    let srv = canned(200, "text/event-stream; charset=utf-8", sse, 4096);
    let got = collect(&srv.url).unwrap();
    let states: Vec<TaskState> = got
        .iter()
        .map(|p| match p {
            Payload::Event(e) => e.state().unwrap(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(states.first(), Some(&TaskState::Submitted));
    assert_eq!(states.last(), Some(&TaskState::InputRequired));
    let Payload::Event(last) = got.last().unwrap() else {
        panic!()
    };
    assert_eq!(
        last.session_id(),
        Some("6576e6e4-7bdf-4ce7-a510-30b23fe4ed61")
    );
    // The request carried the protocol headers.
    let req = srv.requests.lock().unwrap()[0].to_lowercase();
    assert!(req.contains("a2a-version: 1.0"));
    assert!(req.contains("authorization: bearer testtoken"));
    assert!(req.contains("\"method\":\"sendstreamingmessage\""));
}

#[test]
fn json_answers_to_streaming_calls_are_one_payload() {
    for f in ["errors.02", "errors.03", "permission_subscribe_after.00"] {
        let body = std::fs::read(Path::new(FIX).join(format!("{f}.response.json"))).unwrap();
        let srv = canned(200, "application/json", body, 4096);
        let got = collect(&srv.url).unwrap();
        assert_eq!(got.len(), 1, "{f}");
        let Payload::Error(e) = &got[0] else {
            panic!("{f} must be an RPC error, never a task")
        };
        assert_eq!(e.code, Some(-32001));
    }
}

#[test]
fn rpc_results_and_errors() {
    let body = std::fs::read(Path::new(FIX).join("cancel.01.response.json")).unwrap();
    let srv = canned(200, "application/json", body, 4096);
    let p = client(&srv.url).session().cancel_task("x").unwrap();
    let Payload::Event(e) = p else { panic!() };
    assert_eq!(e.state(), Some(TaskState::Canceled));
    for f in ["cancel.03", "errors.00", "errors.01"] {
        let body = std::fs::read(Path::new(FIX).join(format!("{f}.response.json"))).unwrap();
        let srv = canned(200, "application/json", body, 4096);
        let p = client(&srv.url).session().get_task("x").unwrap();
        assert!(matches!(p, Payload::Error(_)), "{f}");
    }
    let body =
        std::fs::read(Path::new(FIX).join("sendmessage_nonstream.00.response.json")).unwrap();
    let srv = canned(200, "application/json", body, 4096);
    let p = client(&srv.url)
        .session()
        .send_message(serde_json::json!({}))
        .unwrap();
    let Payload::Event(e) = p else { panic!() };
    assert_eq!(e.kind, Kind::Task);
}

#[test]
fn http_errors_and_garbage_are_unavailable() {
    let srv = canned(
        401,
        "application/json",
        br#"{"error":"Unauthorized"}"#.to_vec(),
        4096,
    );
    assert!(matches!(collect(&srv.url), Err(A2aError::Unavailable(_))));
    let srv = canned(500, "text/plain", b"boom".to_vec(), 4096);
    assert!(matches!(
        client(&srv.url).session().get_task("x"),
        Err(A2aError::Unavailable(_))
    ));
    let srv = canned(200, "text/html", b"<html>".to_vec(), 4096);
    assert!(matches!(collect(&srv.url), Err(A2aError::Unavailable(_))));
    let srv = canned(200, "application/json", b"not json".to_vec(), 4096);
    assert!(matches!(
        client(&srv.url).session().get_task("x"),
        Err(A2aError::Unavailable(_))
    ));
    let srv = canned(
        200,
        "text/event-stream",
        b"data: {oops\r\n\r\n".to_vec(),
        4096,
    );
    assert!(matches!(collect(&srv.url), Err(A2aError::Protocol(_))));
}

#[test]
fn oversized_event_is_a_protocol_error() {
    let mut body = b"data: \"".to_vec();
    body.extend(std::iter::repeat_n(b'a', 64 * 1024));
    body.extend_from_slice(b"\"\r\n\r\n");
    let srv = canned(200, "text/event-stream", body, 8192);
    let mut cfg = A2aConfig::new(srv.url.clone(), None);
    cfg.max_event_bytes = 16 * 1024;
    let s = A2aClient::new(cfg).session();
    let mut st = s.send_streaming_message(serde_json::json!({})).unwrap();
    assert!(matches!(st.next_payload(), Err(A2aError::Protocol(_))));
}

#[test]
fn extension_endpoints_map_statuses() {
    let s = |status, body: &str| canned(status, "application/json", body.as_bytes().to_vec(), 4096);
    let cases: Vec<(Canned, Result<Restore, ()>)> = vec![
        (s(200, r#"{"status":"current"}"#), Ok(Restore::Current)),
        (s(200, r#"{"status":"restored"}"#), Ok(Restore::Restored)),
        (s(404, r#"{"status":"not_found"}"#), Ok(Restore::NotFound)),
        (
            s(
                409,
                r#"{"error":{"code":"SESSION_BACKUP_NOT_READY","retryable":true,"message":"wait"}}"#,
            ),
            Ok(Restore::NotReady(Some("wait".into()))),
        ),
        (
            s(
                409,
                r#"{"error":{"code":"SESSION_BACKUP_NOT_READY","retryable":true}}"#,
            ),
            Ok(Restore::NotReady(None)),
        ),
        (s(409, r#"{"error":{"code":"OTHER"}}"#), Err(())),
        // The driver asks GetTask whether the task is gone (then EXECUTION_LOST).
        (
            s(400, r#"{"error":"Invalid session restore request."}"#),
            Ok(Restore::Invalid),
        ),
        (
            s(503, r#"{"error":"Unable to restore the A2A session."}"#),
            Err(()),
        ),
        (s(200, r#"{"status":"weird"}"#), Err(())),
    ];
    for (srv, want) in cases {
        let got = client(&srv.url)
            .session()
            .ensure_restored(Some("/w"), Some("s"), Some("t"))
            .map_err(|_| ());
        assert_eq!(got, want);
        let req = srv.requests.lock().unwrap()[0].clone();
        assert!(
            req.starts_with("POST /iac-code/session/ensure-restored "),
            "{req}"
        );
        assert!(
            req.ends_with(r#"{"cwd":"/w","sessionId":"s","taskId":"t"}"#),
            "{req}"
        );
    }
    let body = std::fs::read(Path::new(FIX).join("pipeline_ask_prepare.01.response.json")).unwrap();
    let srv = canned(200, "application/json", body, 4096);
    let st = client(&srv.url)
        .session()
        .pipeline_state("a b", 3)
        .unwrap()
        .unwrap();
    assert!(st["snapshot"].is_object());
    assert!(
        srv.requests.lock().unwrap()[0]
            .starts_with("GET /iac-code/pipeline/state?taskId=a%20b&afterSequence=3 ")
    );
    let srv = s(404, r#"{"error":"A2A pipeline state not found"}"#);
    assert_eq!(
        client(&srv.url).session().pipeline_state("t", 0).unwrap(),
        None
    );
    let srv = s(400, r#"{"error":"x"}"#);
    assert!(client(&srv.url).session().pipeline_state("t", 0).is_err());
}

#[test]
fn a_hung_upstream_is_detected_within_the_idle_timeout() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s); // accept, never answer
        }
    });
    let mut cfg = A2aConfig::new(url, None);
    cfg.idle_timeout = Duration::from_millis(300);
    let start = SystemClock.now();
    let r = A2aClient::new(cfg)
        .session()
        .send_streaming_message(serde_json::json!({}));
    assert!(matches!(r, Err(A2aError::Unavailable(_))));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn aborting_a_session_unblocks_a_read_at_once() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
            held.push(s); // headers, then silence
        }
    });
    let session = client(&url).session();
    let abort = session.aborter();
    let mut st = session
        .send_streaming_message(serde_json::json!({}))
        .unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        abort();
    });
    let start = SystemClock.now();
    assert!(st.next_payload().is_err());
    assert!(start.elapsed() < Duration::from_secs(5));
    t.join().unwrap();
}
