//! Hostile and sloppy clients: half-closes, connection churn without fd leaks, huge numbers,
//! floods of small requests.

mod common;

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
