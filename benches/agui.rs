//! Benchmark and load driver for iac-agui (`make bench`, `make load`). Runs the release
//! binary in front of the demo kernel in its own process and measures from the outside.
//!
//! `cargo bench --bench agui`          the benchmark table (and target/bench.json)
//! `cargo bench --bench agui -- load`  1 000 concurrent streams with heartbeat timing + a burst
//! `cargo bench --bench agui -- memory`  only the memory-per-stream rows (quick A/B)
//! `cargo bench --bench agui -- events`  only throughput, CPU per event, latency (quick A/B)
//! `cargo bench --bench agui -- otlp`  CPU per event with OTLP export to a dead collector vs off
//! `cargo bench --bench agui -- census`  the heap of 200 open streams by allocation site (heaptrack)
//!
//! Everything talks to 127.0.0.1 only and stops by itself.

use iac_agui::clock::{Clock as _, SystemClock};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

#[path = "agui/big.rs"]
mod big;
#[path = "agui/census.rs"]
mod census;
#[path = "agui/otlp.rs"]
mod otlp;
#[path = "agui/threads.rs"]
mod threads;

/// The binary measured: the shipped static build when `make bench` names it in
/// `IAC_AGUI_BENCH_BIN`, otherwise cargo's own release build of this bench.
fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        iac_agui::config::Environ::capture()
            .get("IAC_AGUI_BENCH_BIN")
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_iac-agui").to_string())
    })
}

/// Whether [`bin`] is the shipped static build (the size and idle targets are its).
fn shipped() -> bool {
    bin() != env!("CARGO_BIN_EXE_iac-agui")
}

struct Proc {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Proc {
    fn drop(&mut self) {
        // TERM drains; INT (a second, different signal: not coalesced) ends the drain.
        for sig in ["-TERM", "-INT"] {
            let _ = Command::new("kill")
                .args([sig, &self.child.id().to_string()])
                .status();
        }
        let _ = self.child.wait();
    }
}

/// Start a process and wait for its "listening on http://ADDR" line.
fn spawn(args: &[&str], env: &[(&str, String)]) -> Proc {
    let mut child = Command::new(bin())
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start iac-agui");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("a ready line").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest
                .trim()
                .trim_end_matches('/')
                .parse()
                .expect("an address");
        }
    };
    // The server's own warnings are part of the result: show them.
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            eprintln!("[iac-agui] {l}");
        }
    });
    Proc { child, addr }
}

fn kernel() -> Proc {
    spawn(&["--demo-kernel-only", "0"], &[])
}

fn state_dir(tag: &str) -> String {
    let d = std::env::temp_dir().join(format!("iac-agui-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("ws")).unwrap();
    d.to_string_lossy().into_owned()
}

fn adapter(kernel: &Proc, extra: &[&str], dir: &str) -> Proc {
    let url = format!("http://{}/", kernel.addr);
    let mut args = vec!["--port", "0", "--a2a-url", &url];
    args.extend_from_slice(extra);
    spawn(
        &args,
        &[
            ("IAC_CODE_AGUI_STATE_DIR", format!("{dir}/state")),
            ("IAC_CODE_AGUI_ALLOWED_CWDS", dir.to_string()),
        ],
    )
}

/// RSS per thread of `n` threads with the workers' stack size, each blocked on a channel
/// (this process's own RSS before and after; the threads then end).
fn bare_thread_kib(n: usize) -> f64 {
    let me = std::process::id();
    let before = rss_kib(me);
    let (hold, wait) = std::sync::mpsc::channel::<()>();
    let wait = std::sync::Arc::new(std::sync::Mutex::new(wait));
    let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (wait, ready_tx) = (wait.clone(), ready_tx.clone());
            std::thread::Builder::new()
                .stack_size(1024 * 1024)
                .spawn(move || {
                    let _ = ready_tx.send(());
                    // Blocked until the sender goes (each takes the lock in turn, then waits).
                    let _ = wait.lock().map(|w| w.recv());
                })
                .unwrap()
        })
        .collect();
    for _ in 0..n {
        let _ = ready.recv();
    }
    std::thread::sleep(Duration::from_millis(200));
    let with = rss_kib(me);
    drop(hold);
    for t in threads {
        let _ = t.join();
    }
    with.saturating_sub(before) as f64 / n as f64
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `Key: N kB` line of `/proc/PID/status` (0 when absent).
fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn run_body(dir: &str, thread: &str, text: &str) -> Vec<u8> {
    format!(
        r#"{{"threadId":"{thread}","runId":"r-{thread}","state":{{}},"tools":[],"context":[],"messages":[{{"id":"m","role":"user","content":"{text}"}}],"forwardedProps":{{"iacCode":{{"schemaVersion":1,"rosInvocationId":"ros","cwd":"{dir}/ws"}}}}}}"#
    )
    .into_bytes()
}

fn post(addr: SocketAddr, path: &str, body: &[u8], extra: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    s
}

/// Read an SSE response, calling `on_data` with each `data:` payload (decoded chunks).
fn read_sse(s: &mut TcpStream, mut on_data: impl FnMut(&[u8], Instant)) -> u16 {
    let mut buf = Vec::with_capacity(1 << 16);
    let mut tmp = vec![0u8; 1 << 16];
    let status;
    loop {
        let n = s.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return 0;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            status = std::str::from_utf8(&buf[9..12])
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            buf.drain(..i + 4);
            break;
        }
    }
    if status != 200 {
        return status;
    }
    // Chunked body; inside, SSE blocks separated by blank lines. Both are cut with cursors
    // and drained once per read: a reader that moved the rest of its buffer per event (as
    // this one did until issue 26's seventh step) is slower than the server it measures.
    let mut sse = Vec::with_capacity(1 << 16);
    loop {
        let (mut at, mut last_chunk) = (0, false);
        while let Some(i) = find(&buf[at..], b"\r\n") {
            let size = std::str::from_utf8(&buf[at..at + i])
                .ok()
                .and_then(|v| usize::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0);
            if size == 0 {
                // The events of the chunks before it in this read are still to be handed on.
                last_chunk = true;
                break;
            }
            let start = at + i + 2;
            if buf.len() < start + size + 2 {
                break;
            }
            sse.extend_from_slice(&buf[start..start + size]);
            at = start + size + 2;
        }
        buf.drain(..at);
        let now = SystemClock.now();
        let mut from = 0;
        while let Some(j) = find(&sse[from..], b"\n\n") {
            on_data(&sse[from..from + j], now);
            from += j + 2;
        }
        sse.drain(..from);
        if last_chunk {
            return status;
        }
        let n = s.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return status;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// Where `needle` (two bytes) first is in `hay`.
fn find(hay: &[u8], needle: &[u8; 2]) -> Option<usize> {
    hay.windows(2).position(|w| w == needle)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Events per second through the adapter for one flood run, and adapter CPU per event.
fn flood_through(adapter: &Proc, dir: &str, n: u64, tag: &str) -> (f64, f64) {
    let pid = adapter.child.id();
    let cpu0 = cpu_seconds(pid);
    let mut s = post(
        adapter.addr,
        "/",
        &run_body(dir, tag, &format!("flood {n}")),
        "",
    );
    let (mut count, mut first, mut last) = (0u64, None, None);
    read_sse(&mut s, |d, at| {
        if d.windows(20).any(|w| w == b"TEXT_MESSAGE_CONTENT") {
            count += 1;
            first.get_or_insert(at);
            last = Some(at);
        }
    });
    let secs = last.unwrap().duration_since(first.unwrap()).as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    (count as f64 / secs, cpu / count as f64)
}

/// `iac_agui_upstream_frames_total` by its `read` label: template, delta, shallow, deep.
fn frame_reads(addr: SocketAddr) -> [u64; 4] {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    ["template", "delta", "shallow", "deep"].map(|read| {
        let name = format!("iac_agui_upstream_frames_total{{read=\"{read}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the adapter's /metrics"))
    })
}

/// Events per second reading the kernel's stream directly (the limit).
fn flood_direct(kernel: &Proc, n: u64) -> f64 {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"1","method":"SendStreamingMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"text":"flood {n}"}}],"metadata":{{"iac_code":{{}}}},"contextId":"ctx-direct"}},"configuration":{{}}}}}}"#
    );
    let mut s = post(kernel.addr, "/", body.as_bytes(), "A2A-Version: 1.0\r\n");
    let (mut count, mut first, mut last) = (0u64, None, None);
    read_sse_crlf(&mut s, |at, _| {
        count += 1;
        first.get_or_insert(at);
        last = Some(at);
    });
    count as f64 / last.unwrap().duration_since(first.unwrap()).as_secs_f64()
}

fn read_sse_crlf(s: &mut TcpStream, mut on_event: impl FnMut(Instant, &[u8])) {
    let mut tmp = vec![0u8; 1 << 16];
    let mut carry = Vec::new();
    loop {
        let n = s.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return;
        }
        carry.extend_from_slice(&tmp[..n]);
        let now = SystemClock.now();
        let mut start = 0;
        while let Some(i) = carry[start..].windows(4).position(|w| w == b"\r\n\r\n") {
            on_event(now, &carry[start..start + i]);
            start += i + 4;
        }
        carry.drain(..start);
    }
}

fn now_micros() -> u128 {
    SystemClock
        .wall()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

/// The kernel's send time stamped in a paced delta (`"N@micros"`), in µs since the epoch.
fn sent_micros(d: &[u8], key: &[u8]) -> Option<u128> {
    let p = d.windows(key.len()).position(|w| w == key)?;
    let rest = &d[p + key.len()..];
    let at = rest.iter().position(|&b| b == b'@')?;
    let end = rest[at + 1..]
        .iter()
        .position(|&b| !b.is_ascii_digit())
        .unwrap_or(0);
    std::str::from_utf8(&rest[at + 1..at + 1 + end])
        .ok()?
        .parse()
        .ok()
}

/// Upstream-send → client-receive latency (µs) at `rate` events/s, through the adapter.
fn paced_latency(adapter: &Proc, dir: &str, n: u64, rate: u64, tag: &str) -> (f64, f64) {
    let mut s = post(
        adapter.addr,
        "/",
        &run_body(dir, tag, &format!("pace {n} {rate}")),
        "",
    );
    let mut lat = Vec::new();
    read_sse(&mut s, |d, _| {
        let now = now_micros();
        if let Some(sent) = sent_micros(d, b"\"delta\":\"") {
            lat.push(now.saturating_sub(sent) as f64);
        }
    });
    (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99))
}

/// The same measure reading the kernel directly: the upstream's own floor.
fn paced_floor(kernel: &Proc, n: u64, rate: u64) -> (f64, f64) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"1","method":"SendStreamingMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"text":"pace {n} {rate}"}}],"metadata":{{"iac_code":{{}}}},"contextId":"ctx-floor"}},"configuration":{{}}}}}}"#
    );
    let mut s = post(kernel.addr, "/", body.as_bytes(), "A2A-Version: 1.0\r\n");
    let mut lat = Vec::new();
    read_sse_crlf(&mut s, |_, d| {
        let now = now_micros();
        if let Some(sent) = sent_micros(d, b"\"text\":\"") {
            lat.push(now.saturating_sub(sent) as f64);
        }
    });
    (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99))
}

/// The p99 (µs) of a timestamp sent at `rate` per second through `hops` threads in a chain,
/// each blocked in a loopback read until the one before writes: what thread hand-offs alone
/// cost on this machine. The paced floor is one hand-off (the kernel's pacer to the reader);
/// through iac-agui it is three (to the run's worker, to the loop, to the reader).
fn handoff_p99(rate: u64, n: usize, hops: usize) -> f64 {
    fn pair() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let _ = (a.set_nodelay(true), b.set_nodelay(true));
        (a, b)
    }
    let origin = SystemClock.now();
    let (mut first, mut rx) = pair();
    for _ in 1..hops {
        let (mut tx, next) = pair();
        let mut from = std::mem::replace(&mut rx, next);
        std::thread::spawn(move || {
            let mut b = [0u8; 8];
            while from.read_exact(&mut b).is_ok() && tx.write_all(&b).is_ok() {}
        });
    }
    let last = std::thread::spawn(move || {
        let (mut b, mut lat) = ([0u8; 8], Vec::new());
        while rx.read_exact(&mut b).is_ok() {
            let sent = u64::from_le_bytes(b) as f64;
            lat.push(origin.elapsed().as_nanos() as f64 / 1000.0 - sent / 1000.0);
        }
        lat
    });
    for _ in 0..n {
        std::thread::sleep(Duration::from_nanos(1_000_000_000 / rate));
        let t = origin.elapsed().as_nanos() as u64;
        let _ = first.write_all(&t.to_le_bytes());
    }
    drop(first);
    let mut lat = last.join().unwrap_or_default();
    percentile(&mut lat, 0.99)
}

/// Open `n` streaming runs; the streams and how many of them started (`RUN_STARTED` read).
fn open_streams(
    addr: SocketAddr,
    dir: &str,
    n: usize,
    text: &str,
    tag: &str,
) -> (Vec<TcpStream>, usize) {
    let mut out = Vec::with_capacity(n);
    let mut started = 0;
    for i in 0..n {
        let mut s = post(addr, "/", &run_body(dir, &format!("{tag}-{i}"), text), "");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(12).any(|w| w == b"RUN_STARTED\"") {
            let k = s.read(&mut buf).unwrap_or(0);
            if k == 0 {
                break;
            }
            got.extend_from_slice(&buf[..k]);
        }
        started += usize::from(got.windows(12).any(|w| w == b"RUN_STARTED\""));
        out.push(s);
    }
    (out, started)
}

/// `memory`: only the per-stream memory rows (after a short flood, so the heap has the same
/// history); `events`: only throughput, CPU and latency. Both for quick A/B runs; they write
/// nothing.
fn bench(memory: bool, events: bool) {
    let mut table: Vec<(String, String, String)> = Vec::new();
    let mut json = serde_json::Map::new();
    let mut add = |name: &str, value: String, target: &str, met: Option<bool>, raw: f64| {
        let verdict = match met {
            Some(true) => format!("{target} — met"),
            Some(false) => format!("{target} — NOT met"),
            None => target.to_string(),
        };
        println!("{name:<48} {value:>16}   {verdict}");
        table.push((name.into(), value, verdict));
        json.insert(name.into(), serde_json::json!(raw));
    };
    println!(
        "binary: {} ({})",
        bin(),
        if shipped() {
            "the shipped static build"
        } else {
            "cargo's release build"
        }
    );
    println!("{:<48} {:>16}   target", "measure", "median");
    let k = kernel();
    let dir = state_dir("main");
    if !memory && !events {
        figures_before_memory(&k, &mut add);
    }
    let a = adapter(
        &k,
        &["--max-runs", "1000", "--max-connections", "4096"],
        &dir,
    );
    std::thread::sleep(Duration::from_millis(300));
    let idle = rss_kib(a.child.id());
    add(
        "idle RSS (KiB)",
        idle.to_string(),
        "< 4 MiB",
        Some(idle < 4096),
        idle as f64,
    );
    if memory {
        flood_through(&a, &dir, 20_000, "warm");
    } else {
        figures_of_events(&k, &a, &dir, &mut add);
    }
    if events {
        return;
    }
    memory_figures(&a, &dir, &mut add);
    if memory {
        return;
    }
    drop(a);
    threads::figures(&k, &mut add);
    big::figures(&k, &mut add);
    otlp::figures(&k, &mut add);
    json.insert("binary".into(), serde_json::json!(bin()));
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench.json");
    let _ = std::fs::write(
        &out,
        serde_json::to_vec_pretty(&serde_json::Value::Object(json)).unwrap(),
    );
    println!("\nwritten: target/bench.json ({} measures)", table.len());
}

type Add<'a> = dyn FnMut(&str, String, &str, Option<bool>, f64) + 'a;

/// Binary size and start-up.
fn figures_before_memory(k: &Proc, add: &mut Add<'_>) {
    let size = std::fs::metadata(bin()).map(|m| m.len()).unwrap_or(0);
    // The bound is the shipped static binary's (make dist-check); cargo's dynamic build is
    // only shown.
    let (name, target, met) = if shipped() {
        (
            "shipped static binary size (MiB)",
            "< 4 MiB",
            Some(size < 4 << 20),
        )
    } else {
        (
            "cargo's release binary size (MiB)",
            "(the bound is the static build's)",
            None,
        )
    };
    add(
        name,
        format!("{:.2}", size as f64 / 1048576.0),
        target,
        met,
        size as f64,
    );

    // Start-up: exec to /health answering.
    let mut starts = Vec::new();
    for i in 0..5 {
        let d = state_dir(&format!("start{i}"));
        let t0 = SystemClock.now();
        let a = adapter(k, &[], &d);
        loop {
            if let Ok(mut s) = TcpStream::connect(a.addr) {
                let _ = s.write_all(
                    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                );
                let mut r = String::new();
                let _ = s.read_to_string(&mut r);
                if r.starts_with("HTTP/1.1 200") {
                    break;
                }
            }
        }
        starts.push(t0.elapsed().as_secs_f64() * 1000.0);
        drop(a);
    }
    let start_ms = median(starts);
    add(
        "exec → /health ready (ms)",
        format!("{start_ms:.1}"),
        "< 20 ms",
        Some(start_ms < 20.0),
        start_ms,
    );
}

/// Throughput, CPU per event, paced latency.
fn figures_of_events(k: &Proc, a: &Proc, dir: &str, add: &mut Add<'_>) {
    // Long enough that start-up and the final frames do not weigh on the rate.
    let n = 200_000;
    let direct = median((0..3).map(|_| flood_direct(k, n)).collect());
    let mut thr = Vec::new();
    let mut cpu = Vec::new();
    let reads_before = frame_reads(a.addr);
    for i in 0..3 {
        let (t, c) = flood_through(a, dir, n, &format!("flood{i}"));
        thr.push(t);
        cpu.push(c);
    }
    let reads = frame_reads(a.addr);
    let [template, delta, shallow, deep] = [0, 1, 2, 3].map(|i| reads[i] - reads_before[i]);
    let all = (template + delta + shallow + deep).max(1) as f64;
    let delta_share = (template + delta) as f64 / all;
    let template_share = template as f64 / (template + delta).max(1) as f64;
    let (through, per_event) = (median(thr), median(cpu));
    add(
        "direct read of the flood upstream (events/s)",
        format!("{direct:.0}"),
        "the limit",
        None,
        direct,
    );
    add(
        "direct read ≥ 500 000 events/s (the source is not the bottleneck)",
        format!("{direct:.0}"),
        "≥ 500 000",
        Some(direct >= 500_000.0),
        direct,
    );
    add(
        "through iac-agui (events/s)",
        format!("{through:.0}"),
        "",
        None,
        through,
    );
    add(
        "through iac-agui as a fraction of the direct read",
        format!("{:.1} %", 100.0 * through / direct),
        "≥ 80 %",
        Some(through / direct >= 0.8),
        through / direct,
    );
    add(
        "adapter CPU per event (µs, user + system)",
        format!("{:.2}", per_event * 1e6),
        "≤ 1 µs",
        Some(per_event * 1e6 <= 1.0),
        per_event * 1e6,
    );
    // The figures above hold only while the floods' frames take the delta path, and mostly
    // its `Template` check (docs/performance.md: without it 2.8–3.35 µs per event against
    // 1.55–1.75). Counted by the server, not timed: a bypass fails here on any machine.
    add(
        "delta path share (template + delta reads / frames)",
        format!("{:.1} %", 100.0 * delta_share),
        "≥ 95 %",
        Some(delta_share >= 0.95),
        delta_share,
    );
    add(
        "  of which the Template check (of delta-shaped frames)",
        format!("{:.1} %", 100.0 * template_share),
        "≥ 25 %",
        Some(template_share >= 0.25),
        template_share,
    );
    assert!(
        delta_share >= 0.95,
        "the delta path was bypassed: {template} template + {delta} delta reads of {all} \
         frames of the floods (expected ≥ 95 %); the CPU per event figure above is not the \
         design's"
    );
    assert!(
        template_share >= 0.25,
        "the Template check was bypassed: {template} of {} delta-shaped frames (expected ≥ 25 %)",
        template + delta
    );

    for rate in [200u64, 1000] {
        let mut p50s = Vec::new();
        let mut p99s = Vec::new();
        for i in 0..3 {
            let (p50, p99) = paced_latency(a, dir, rate * 2, rate, &format!("pace{rate}-{i}"));
            p50s.push(p50);
            p99s.push(p99);
        }
        let (p50, p99) = (median(p50s), median(p99s));
        let floors: Vec<(f64, f64)> = (0..3).map(|_| paced_floor(k, rate * 2, rate)).collect();
        let floor50 = median(floors.iter().map(|f| f.0).collect());
        let floor99 = median(floors.iter().map(|f| f.1).collect());
        add(
            &format!("latency at {rate} ev/s p50 / upstream floor (µs)"),
            format!("{p50:.0} / {floor50:.0}"),
            "",
            None,
            p50,
        );
        add(
            &format!("latency at {rate} ev/s p99 / upstream floor (µs)"),
            format!("{p99:.0} / {floor99:.0}"),
            "",
            None,
            p99,
        );
        let added = p99 - floor99;
        // Issue 37's targets: 0.1 ms at 200 ev/s, 0.05 ms at 1 000.
        let bound = if rate == 200 { 100.0 } else { 50.0 };
        add(
            &format!("p99 added over the floor at {rate} ev/s (µs)"),
            format!("{added:.0}"),
            if rate == 200 {
                "≤ 100 µs"
            } else {
                "≤ 50 µs"
            },
            Some(added <= bound),
            added,
        );
        // What two more thread hand-offs add on this machine, nothing else done: the part
        // of the row above that this design (a worker, then the loop) cannot go below.
        let n = (rate * 2) as usize;
        let handoffs = median(
            (0..3)
                .map(|_| handoff_p99(rate, n, 3) - handoff_p99(rate, n, 1))
                .collect(),
        );
        add(
            &format!("  of which two thread hand-offs alone at {rate} ev/s (µs)"),
            format!("{handoffs:.0}"),
            "this machine's floor",
            None,
            handoffs,
        );
    }
}

/// RSS per open stream, its split by mapping, the concurrency bound.
fn memory_figures(a: &Proc, dir: &str, add: &mut Add<'_>) {
    for streams in [100usize, 1000] {
        let base = rss_kib(a.child.id());
        let base_split = census::split(a.child.id());
        let (open, started) =
            open_streams(a.addr, dir, streams, "wait 30", &format!("rss{streams}"));
        std::thread::sleep(Duration::from_millis(500));
        let with = rss_kib(a.child.id());
        let per = (with.saturating_sub(base)) as f64 / streams as f64;
        let with_split = census::split(a.child.id());
        let each = |f: fn(&census::Split) -> u64| {
            f(&with_split).saturating_sub(f(&base_split)) as f64 / streams as f64
        };
        add(
            &format!("RSS with {streams} open streams (KiB)"),
            with.to_string(),
            "",
            None,
            with as f64,
        );
        add(
            &format!("RSS per stream at {streams} (KiB)"),
            format!("{per:.1}"),
            // The target is set at 1 000, where the fixed part no longer weighs.
            if streams == 1000 {
                "≤ 16 KiB"
            } else {
                "(≤ 16 KiB at 1 000)"
            },
            (streams == 1000).then_some(per <= 16.0),
            per,
        );
        if streams == 1000 {
            for (part, kib) in [
                ("thread stacks", each(census::Split::stacks)),
                ("heap", each(|s| s.heap)),
                ("binary pages", each(|s| s.file)),
            ] {
                add(
                    &format!("  of which {part} at {streams} (KiB per stream)"),
                    format!("{kib:.1}"),
                    "",
                    None,
                    kib,
                );
            }
            // The run's worker is the deepest it has ever been: the read → parse → project
            // path, with admission, requests and state writes on call threads.
            let mut each = with_split.each_stack.clone();
            each.sort_unstable();
            let median = each.get(each.len() / 2).copied().unwrap_or(0);
            add(
                "  one worker's stack, resident (KiB, median)",
                median.to_string(),
                "≤ 12 KiB (3 pages)",
                Some(median <= 12),
                median as f64,
            );
            // Whole pages, so not noise: 16 KiB is the driver's `#[inline(never)]` frames
            // gone, 28 KiB the call threads bypassed (docs/performance.md). Measured on the
            // shipped build only; cargo's release build lays out its frames otherwise.
            assert!(
                !shipped() || median <= 12,
                "a worker's resident stack is {median} KiB, above 12: the call threads or the \
                 driver's #[inline(never)] frames were bypassed (16 KiB without the frames, 28 \
                 without the call threads)"
            );
            // The floor of a thread per run (the design card's blocking workers): what a bare
            // thread with the worker's stack size holds while it waits, nothing else done.
            let floor = bare_thread_kib(streams);
            add(
                "  a bare waiting thread, this machine's floor (KiB)",
                format!("{floor:.1}"),
                "the design's floor",
                None,
                floor,
            );
            add(
                "concurrent streaming runs held",
                started.to_string(),
                "1 000, no regression",
                Some(started == streams),
                started as f64,
            );
            // Beyond the cap: a clear 503, never a hang.
            let mut s = post(a.addr, "/", &run_body(dir, "over-cap", "hello"), "");
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut r = vec![0u8; 4096];
            let k = s.read(&mut r).unwrap_or(0);
            let ok = r[..k].starts_with(b"HTTP/1.1 503")
                && r[..k].windows(11).any(|w| w == b"SERVER_BUSY");
            add(
                "run 1001 over --max-runs 1000",
                if ok {
                    "503 SERVER_BUSY".into()
                } else {
                    "unexpected".into()
                },
                "a clear 503",
                Some(ok),
                f64::from(u8::from(ok)),
            );
        }
        drop(open);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// 1 000 concurrent streams, heartbeats every second, each stream's largest silence measured;
/// then a burst of admissions. Bounded: about a minute.
fn load() {
    let k = kernel();
    let dir = state_dir("load");
    let a = adapter(
        &k,
        &["--heartbeat-interval", "1", "--max-runs", "2000"],
        &dir,
    );
    let n = 1000usize;
    let idle = rss_kib(a.child.id());
    let errors = Arc::new(AtomicUsize::new(0));
    let worst_gap = Arc::new(Mutex::new(0f64));
    let heartbeats = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let mut joins = Vec::new();
    let t0 = SystemClock.now();
    for i in 0..n {
        let (addr, dir) = (a.addr, dir.clone());
        let (errors, worst_gap, heartbeats, finished) = (
            errors.clone(),
            worst_gap.clone(),
            heartbeats.clone(),
            finished.clone(),
        );
        joins.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut s = post(
                        addr,
                        "/",
                        &run_body(&dir, &format!("load-{i}"), "wait 8"),
                        "",
                    );
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    let mut last: Option<Instant> = None;
                    let mut gap = 0f64;
                    let mut terminal = false;
                    let status = read_sse(&mut s, |d, at| {
                        if let Some(l) = last {
                            gap = gap.max(at.duration_since(l).as_secs_f64());
                        }
                        last = Some(at);
                        if d == b": heartbeat" {
                            heartbeats.fetch_add(1, Ordering::Relaxed);
                        }
                        if d.windows(12).any(|w| w == b"RUN_FINISHED") {
                            terminal = true;
                        }
                    });
                    if status != 200 || !terminal {
                        errors.fetch_add(1, Ordering::Relaxed);
                    } else {
                        finished.fetch_add(1, Ordering::Relaxed);
                    }
                    let mut w = worst_gap.lock().unwrap();
                    *w = w.max(gap);
                })
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_secs(4));
    let held = rss_kib(a.child.id());
    // A client thread that panicked (say, a reset connection) is a failed stream.
    for j in joins {
        if j.join().is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    // A burst of admissions on fresh threads.
    let burst = 500;
    let burst_errors = Arc::new(AtomicUsize::new(0));
    let t1 = SystemClock.now();
    let joins: Vec<_> = (0..burst)
        .map(|i| {
            let (addr, dir, errs) = (a.addr, dir.clone(), burst_errors.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut s = post(
                        addr,
                        "/",
                        &run_body(&dir, &format!("burst-{i}"), "hello"),
                        "",
                    );
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    let mut ok = false;
                    let st = read_sse(&mut s, |d, _| {
                        ok |= d.windows(12).any(|w| w == b"RUN_FINISHED")
                    });
                    if st != 200 || !ok {
                        errs.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .unwrap()
        })
        .collect();
    for j in joins {
        if j.join().is_err() {
            burst_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    let burst_secs = t1.elapsed().as_secs_f64();
    let gap = *worst_gap.lock().unwrap();
    println!(
        "streams held                 {n} (finished {}, errors {})",
        finished.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    );
    println!(
        "heartbeats received          {} (interval 1 s)",
        heartbeats.load(Ordering::Relaxed)
    );
    println!("largest silence on a stream  {gap:.2} s");
    println!(
        "RSS idle / with {n} streams  {idle} KiB / {held} KiB ({:.1} KiB per stream)",
        (held.saturating_sub(idle)) as f64 / n as f64
    );
    println!("wall time                    {elapsed:.1} s");
    println!(
        "admission burst              {burst} runs in {burst_secs:.1} s, errors {}",
        burst_errors.load(Ordering::Relaxed)
    );
    drop(a);
    let (lost, duplicated, broken) = reattach_all(&k, n);
    println!(
        "re-attached streams          {n}: {lost} events lost, {duplicated} duplicated, {broken} broken"
    );
    let failed = errors.load(Ordering::Relaxed)
        + burst_errors.load(Ordering::Relaxed)
        + lost
        + duplicated
        + broken;
    let on_time = gap < 1.6;
    println!(
        "load: {} passed, {} failed",
        usize::from(failed == 0 && on_time),
        usize::from(failed != 0 || !on_time)
    );
    if failed != 0 || !on_time {
        std::process::exit(1);
    }
}

/// The id and JSON of one SSE block (`id: N\ndata: …`).
fn id_and_data(block: &[u8]) -> Option<(u64, &[u8])> {
    let text = std::str::from_utf8(block).ok()?;
    let (id_line, data) = text.split_once('\n')?;
    let id = id_line.strip_prefix("id: ")?.parse().ok()?;
    Some((id, data.strip_prefix("data: ")?.as_bytes()))
}

/// `n` paced streams, each dropped after a few events and re-attached with `Last-Event-ID`
/// (the adapter keeps runs for a disconnect grace). Returns (lost, duplicated, broken):
/// events missing from or repeated in the two halves, and streams without exactly one
/// terminal event.
fn reattach_all(k: &Proc, n: usize) -> (usize, usize, usize) {
    let dir = state_dir("reattach");
    let a = adapter(k, &["--disconnect-grace", "30", "--max-runs", "2000"], &dir);
    let lost = Arc::new(AtomicUsize::new(0));
    let dup = Arc::new(AtomicUsize::new(0));
    let broken = Arc::new(AtomicUsize::new(0));
    let joins: Vec<_> =
        (0..n)
            .map(|i| {
                let (addr, dir) = (a.addr, dir.clone());
                let (lost, dup, broken) = (lost.clone(), dup.clone(), broken.clone());
                std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let thread = format!("re-{i}");
                    let mut s = post(addr, "/", &run_body(&dir, &thread, "pace 30 10"), "");
                    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    let mut ids: Vec<u64> = Vec::new();
                    let mut exec = String::new();
                    let s2 = s.try_clone().unwrap();
                    // Read until the session event plus a few more, then drop the connection.
                    let _ = read_sse(&mut s, |d, _| {
                        if ids.len() >= 6 && !exec.is_empty() {
                            let _ = s2.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        let Some((id, data)) = id_and_data(d) else { return };
                        ids.push(id);
                        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data)
                            && v["name"] == "iac-code.session.v1"
                        {
                            exec = v["value"]["executionId"].as_str().unwrap_or("").into();
                        }
                    });
                    let body = format!(
                        r#"{{"threadId":"{thread}","runId":"r-{thread}","rosInvocationId":"ros"}}"#
                    );
                    let last = ids.last().copied().unwrap_or(0);
                    let mut r = post(
                        addr,
                        &format!("/extensions/iac-code/v1/executions/{exec}/subscribe"),
                        body.as_bytes(),
                        &format!("Last-Event-ID: {last}\r\n"),
                    );
                    r.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    let mut terminals = 0;
                    let st = read_sse(&mut r, |d, _| {
                        if let Some((id, data)) = id_and_data(d) {
                            ids.push(id);
                            if data.windows(12).any(|w| w == b"RUN_FINISHED")
                                || data.windows(9).any(|w| w == b"RUN_ERROR")
                            {
                                terminals += 1;
                            }
                        }
                    });
                    let max = ids.iter().copied().max().unwrap_or(0);
                    let mut seen = vec![0u32; max as usize + 1];
                    for id in &ids {
                        seen[*id as usize] += 1;
                    }
                    lost.fetch_add(seen.iter().filter(|c| **c == 0).count(), Ordering::Relaxed);
                    dup.fetch_add(
                        seen.iter().map(|c| c.saturating_sub(1) as usize).sum(),
                        Ordering::Relaxed,
                    );
                    if st != 200 || terminals != 1 {
                        broken.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .unwrap()
            })
            .collect();
    for j in joins {
        if j.join().is_err() {
            broken.fetch_add(1, Ordering::Relaxed);
        }
    }
    (
        lost.load(Ordering::Relaxed),
        dup.load(Ordering::Relaxed),
        broken.load(Ordering::Relaxed),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs this binary without `--bench`: a debug build measures
    // nothing useful (and must not overwrite target/bench.json), so it only checks it builds.
    if !args.iter().any(|a| a == "--bench") {
        println!("benches/agui.rs: measurements run with `make bench` and `make load`");
        return;
    }
    if args.iter().any(|a| a == "load") {
        load()
    } else if args.iter().any(|a| a == "census") {
        census::heap_census()
    } else if args.iter().any(|a| a == "big") {
        let mut add = |name: &str, value: String, target: &str, _: Option<bool>, _: f64| {
            println!("{name:<48} {value:>16}   {target}");
        };
        big::figures(&kernel(), &mut add)
    } else if args.iter().any(|a| a == "otlp") {
        let mut add = |name: &str, value: String, target: &str, _: Option<bool>, _: f64| {
            println!("{name:<48} {value:>16}   {target}");
        };
        otlp::figures(&kernel(), &mut add)
    } else if args.iter().any(|a| a == "threads") {
        // Only the stored-conversation rows (they write nothing).
        let mut missed = Vec::new();
        let mut add = |name: &str, value: String, target: &str, met: Option<bool>, _: f64| {
            println!("{name:<48} {value:>16}   {target}");
            if met == Some(false) {
                missed.push(name.to_string());
            }
        };
        threads::figures(&kernel(), &mut add);
        // A listing or a turn's end that grows with the threads or the transcript fails loudly.
        assert!(missed.is_empty(), "targets not met: {missed:?}");
    } else {
        let has = |m: &str| args.iter().any(|a| a == m);
        bench(has("memory"), has("events"))
    }
}
