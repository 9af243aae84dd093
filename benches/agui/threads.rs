//! Stored conversations at scale (issue 43, issue 45 items 4–5): a listing page's latency
//! with 10 and 20 000 threads of one caller and with 4 KiB and 4 MiB conversations, and the
//! bytes a turn writes with a 4 KiB and a 4 MiB conversation. The threads are made by one
//! real turn each, then copied on disk (the index journal removed, so the first listing
//! finds them by the directory scan), as an upgraded or restored server would hold them.

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use super::{Add, Proc, adapter, median, post, read_sse, run_body, state_dir};

fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let status = std::str::from_utf8(out.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (status, out)
}

fn turn(a: &Proc, dir: &str, thread: &str, run: &str, text: &str) {
    let body = String::from_utf8(run_body(dir, thread, text))
        .unwrap()
        .replace(&format!("\"r-{thread}\""), &format!("\"{run}\""))
        .replace("\"id\":\"m\"", &format!("\"id\":\"m-{run}\""));
    let mut s = post(a.addr, "/", body.as_bytes(), "");
    assert_eq!(read_sse(&mut s, |_, _| {}), 200, "a turn on {thread}");
}

/// `n` threads: `seed` run once, then copied.
fn seed(k: &Proc, dir: &str, n: usize, text: &str) {
    let a = adapter(k, &[], dir);
    turn(&a, dir, "seed", "s1", text);
    drop(a);
    let threads = std::path::Path::new(dir).join("state/threads");
    let state = std::fs::read_to_string(threads.join("seed.json")).unwrap();
    let log = std::fs::read(threads.join("seed~history.jsonl")).unwrap();
    let quoted = |b: &[u8], id: &str| -> Vec<u8> {
        String::from_utf8_lossy(b)
            .replacen("\"seed\"", &format!("\"{id}\""), 1)
            .into_bytes()
    };
    for i in 1..n {
        let id = format!("t{i:05}");
        std::fs::write(
            threads.join(format!("{id}.json")),
            state.replace("\"seed\"", &format!("\"{id}\"")),
        )
        .unwrap();
        std::fs::write(
            threads.join(format!("{id}~history.jsonl")),
            quoted(&log, &id),
        )
        .unwrap();
    }
    let _ = std::fs::remove_file(threads.join("~index.jsonl"));
}

/// Median µs of `GET /threads?limit=50` (after a first listing that reads the index).
fn list_latency(a: &Proc) -> f64 {
    let (status, _) = get(a.addr, "/threads?limit=50");
    assert_eq!(status, 200);
    let times: Vec<f64> = (0..40)
        .map(|_| {
            let t = SystemClock.now();
            let (status, body) = get(a.addr, "/threads?limit=50");
            assert_eq!(status, 200);
            assert!(body.windows(9).any(|w| w == b"threadId\""));
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(times)
}

/// Bytes the adapter wrote (`/proc/PID/io` `wchar`: files and sockets; a plain turn's stream
/// is about 1 KiB) per turn on `thread`, the median of 8 turns.
fn bytes_per_turn(a: &Proc, dir: &str, thread: &str) -> f64 {
    let wchar = || -> f64 {
        std::fs::read_to_string(format!("/proc/{}/io", a.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("wchar: "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0.0)
    };
    let per: Vec<f64> = (0..8)
        .map(|i| {
            let before = wchar();
            turn(a, dir, thread, &format!("b{i}"), "hello");
            wchar() - before
        })
        .collect();
    median(per)
}

pub(super) fn figures(k: &Proc, add: &mut Add<'_>) {
    let small = "hello";
    // About 4 MiB of conversation: one large message (the bound is 4 MiB of JSON).
    let large = "x".repeat(4 * 1024 * 1024 - 64 * 1024);
    let mut lat = Vec::new();
    let mut written = Vec::new();
    for (n, text, label) in [
        (10, small, "10 threads, 4 KiB"),
        (20_000, small, "20 000 threads, 4 KiB"),
        (10, large.as_str(), "10 threads, 4 MiB"),
    ] {
        let dir = state_dir(&format!("threads-{n}-{}", text.len()));
        seed(k, &dir, n, text);
        let a = adapter(k, &[], &dir);
        let t0 = SystemClock.now();
        let (status, _) = get(a.addr, "/threads?limit=1");
        assert_eq!(status, 200);
        let first = t0.elapsed().as_secs_f64() * 1e3;
        let us = list_latency(&a);
        add(
            &format!("list page, {label} (µs)"),
            format!("{us:.0}"),
            "same with 10 or 20 000 threads, 4 KiB or 4 MiB",
            None,
            us,
        );
        add(
            &format!("first listing after start, {label} (ms)"),
            format!("{first:.0}"),
            "reads the index once",
            None,
            first,
        );
        lat.push(us);
        // A turn's end appends its records whatever the thread count or transcript size.
        let b = bytes_per_turn(&a, &dir, "seed");
        add(
            &format!("bytes written per turn, {label}"),
            format!("{b:.0}"),
            "the same for 10 or 20 000 threads, 4 KiB or 4 MiB",
            None,
            b,
        );
        written.push(b);
        drop(a);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let spread =
        lat.iter().cloned().fold(0.0, f64::max) / lat.iter().cloned().fold(f64::MAX, f64::min);
    add(
        "list page: slowest / fastest of the three",
        format!("{spread:.2}"),
        "< 3",
        Some(spread < 3.0),
        spread,
    );
    // Whole-file rewrites would make the 4 MiB row a thousand times the 4 KiB one.
    let spread = written.iter().cloned().fold(0.0, f64::max)
        / written.iter().cloned().fold(f64::MAX, f64::min);
    add(
        "bytes written per turn: most / fewest of the three",
        format!("{spread:.2}"),
        "< 1.5",
        Some(spread < 1.5),
        spread,
    );
}
