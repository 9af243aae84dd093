//! Hostile and sloppy clients: half-closes, connection churn without fd leaks, huge numbers,
//! floods of small requests.

use crate::common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use common::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_half_closed_client_still_gets_its_answer() {
    let s = Stack::new();
    let mut c = s.server.as_ref().unwrap().connect();
    c.write_all(&request("GET", "/health", &[], b"")).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.ends_with('}'));
}

#[test]
fn thousands_of_connect_disconnect_cycles_leak_nothing() {
    if !alone_in_a_process(
        module_path!(),
        "thousands_of_connect_disconnect_cycles_leak_nothing",
    ) {
        return;
    }
    let s = Stack::new();
    let addr = s.addr();
    // Warm up, then measure.
    for _ in 0..50 {
        drop(std::net::TcpStream::connect(addr).unwrap());
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = open_fds();
    for i in 0..3000 {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        match i % 3 {
            0 => {}
            1 => {
                let _ = c.write_all(b"GET /hea");
            }
            _ => {
                let _ = c.write_all(&request("GET", "/health", &[], b""));
                let mut b = [0u8; 16];
                let _ = c.read(&mut b);
            }
        }
    }
    // The loop notices each EOF; give it a moment, then compare.
    assert!(
        wait_until(Duration::from_secs(10), || open_fds() <= before + 2),
        "fds before {before}, after {}",
        open_fds()
    );
    assert_eq!(raw(addr, &request("GET", "/health", &[], b"")).status, 200);
}

#[test]
fn huge_numbers_and_strings_in_ignored_fields_are_fine() {
    let s = Stack::new();
    let mut b = s.body("t1", "r1", "hello");
    let big_int: serde_json::Value = serde_json::from_str(&"9".repeat(100_000)).unwrap();
    let big_float: serde_json::Value = serde_json::from_str("1e999999").unwrap();
    b["state"] = serde_json::json!({"i": big_int, "f": big_float, "s": "x".repeat(1 << 20)});
    let ev = s.run(&b);
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    // The digest (and so idempotency) covers them too.
    assert_eq!(s.post(&b).error_code(), "DUPLICATE_RUN_ID");
}

#[test]
fn many_small_requests_on_one_connection_and_in_parallel() {
    let s = Stack::new();
    let addr = s.addr();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut r = Reader::new(std::net::TcpStream::connect(addr).unwrap());
                for _ in 0..200 {
                    r.sock
                        .write_all(&request("GET", "/health", &[], b""))
                        .unwrap();
                    assert_eq!(r.response(false).unwrap().status, 200);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn stalled_large_uploads_cannot_take_the_servers_memory() {
    // Regression (red team): 64 connections each announcing 12 MiB and sending all but the
    // last byte took RSS from 5 to 775 MiB for the whole body timeout. With the body budget
    // (64 MiB) the ones past it get 503 before their body is read.
    let p = common::procs::start("hostile-uploads", &[]);
    let head = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 12582912\r\n\r\n";
    let chunk = vec![b' '; 1024 * 1024];
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..64 {
        let mut s = std::net::TcpStream::connect(p.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        // 12 MiB − 1 byte, unless the server answers (and closes) first.
        let mut sent = 0;
        let mut ok = true;
        for i in 0..12 {
            let n = if i == 11 {
                chunk.len() - 1
            } else {
                chunk.len()
            };
            if s.write_all(&chunk[..n]).is_err() {
                ok = false;
                break;
            }
            sent += n;
        }
        if !ok || sent < 12 * 1024 * 1024 - 1 {
            let resp = Reader::new(s)
                .response(false)
                .expect("an answer for a refused upload");
            assert_eq!(resp.status, 503);
            refused += 1;
            continue;
        }
        // All written: a refused one has its 503 waiting, an accepted one is silent.
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 1];
        match s.peek(&mut b) {
            Ok(_) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let resp = Reader::new(s).response(false).expect("the 503");
                assert_eq!(resp.status, 503, "{}", resp.text());
                refused += 1;
            }
            Err(_) => held.push(s),
        }
    }
    let rss_mib = rss_kib_of(p.adapter.id()) / 1024;
    assert!(rss_mib <= 256, "RSS {rss_mib} MiB with 64 stalled uploads");
    assert!(refused >= 50, "only {refused} of 64 refused");
    assert!(!held.is_empty(), "the budget admits some large bodies");
    let health = raw(
        p.addr,
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".as_slice(),
    );
    assert_eq!(health.status, 200);
    let run = post_json(p.addr, "/", &[], &p.body("t1", "r1", "hello"));
    assert_eq!(run.status, 200, "{}", run.text());
    assert_eq!(last(&sse_events(&run.body).0)["type"], "RUN_FINISHED");
    drop(held);
}
