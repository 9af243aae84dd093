//! Per-caller quotas and usage (issue 44, part 3), against the real binary and a demo kernel
//! process: concurrent runs and admissions per minute answered `429 RATE_LIMITED` with
//! `Retry-After` before the stream, a caller's own limits from its tokens-file line, usage
//! summed per caller from `RUN_FINISHED.usage` and kept across a restart, `GET /usage`
//! answering only the caller's own.
//! Every test names its callers with a tokens file (feature `identity`).

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use common::procs::{Procs, start};
use common::*;
use serde_json::Value;

fn sha(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A pair reading a tokens file of `lines` (alice's and bob's tokens are their names).
fn tokens_pair(name: &str, lines: &str, extra: &[&str]) -> Procs {
    let file = tempdir(&format!("{name}-tokens")).join("tokens");
    std::fs::write(&file, lines).unwrap();
    let arg = file.display().to_string();
    let mut args = vec!["--auth-tokens-file", arg.as_str()];
    args.extend_from_slice(extra);
    start(name, &args)
}

fn lines(alice_extra: &str) -> String {
    format!("alice {} {alice_extra}\nbob {}\n", sha("alice"), sha("bob"))
}

fn who(name: &str) -> String {
    format!("Bearer {name}")
}

fn post_as(addr: SocketAddr, name: &str, body: &[u8]) -> Resp {
    let auth = who(name);
    post_json(
        addr,
        "/",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        body,
    )
}

fn get_as(addr: SocketAddr, name: &str, path: &str) -> Resp {
    let auth = who(name);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&request("GET", path, &[("Authorization", &auth)], b""))
        .unwrap();
    Reader::new(s).response(false).expect("an answer")
}

/// A run left streaming (a `slow` script) until its reader is dropped.
fn open_slow(p: &Procs, name: &str, thread: &str) -> Reader {
    let auth = who(name);
    let mut sock = TcpStream::connect(p.addr).unwrap();
    sock.write_all(&request(
        "POST",
        "/",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        &p.body(thread, &format!("{thread}-r"), "slow please"),
    ))
    .unwrap();
    let mut r = Reader::new(sock);
    let (status, _) = r.head().expect("a head");
    assert_eq!(status, 200, "the slow run is admitted");
    r.chunk().expect("the stream begins");
    r
}

fn rate_limited(r: &Resp) -> u64 {
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.error_code(), "RATE_LIMITED");
    r.header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds")
}

/// A caller's own `max_runs=1` (its tokens-file line) refuses its second concurrent run with
/// 429 before the stream, never another caller's; once its run ended it is admitted again.
#[test]
fn a_caller_over_its_concurrent_runs_gets_429_and_another_caller_does_not() {
    let p = tokens_pair(
        "quota-runs",
        &lines("max_runs=1"),
        &["--disconnect-grace", "0"],
    );
    let slow = open_slow(&p, "alice", "a1");
    let second = post_as(p.addr, "alice", &p.body("a2", "a2-r", "hello"));
    let after = rate_limited(&second);
    assert!((1..=60).contains(&after), "{after}");
    assert!(
        !p.dir
            .join("state/principals/alice/threads/a2.json")
            .exists(),
        "a refused run writes nothing"
    );
    // bob has no limit of his own and none is set by the options.
    for i in 0..3 {
        let r = post_as(
            p.addr,
            "bob",
            &p.body(&format!("b{i}"), &format!("b{i}-r"), "hello"),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let usage = get_as(p.addr, "alice", "/usage").json();
    assert_eq!(usage["running"], 1);
    assert_eq!(usage["quotas"]["maxRuns"], 1);
    drop(slow);
    assert!(
        wait_until(std::time::Duration::from_secs(20), || {
            post_as(p.addr, "alice", &p.body("a3", "a3-r", "hello")).status == 200
        }),
        "alice's next run is admitted once her run ended"
    );
}

/// `--caller-rate 2`: a caller's third admission within the minute is 429 with the seconds
/// until its bucket holds one again; another caller's bucket is its own.
#[test]
fn run_admissions_past_the_callers_rate_get_429_with_retry_after() {
    let p = tokens_pair("quota-rate", &lines(""), &["--caller-rate", "2"]);
    for i in 0..2 {
        let r = post_as(
            p.addr,
            "alice",
            &p.body(&format!("a{i}"), &format!("a{i}-r"), "hello"),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let after = rate_limited(&post_as(p.addr, "alice", &p.body("a9", "a9-r", "hello")));
    assert!(
        (20..=30).contains(&after),
        "2 per minute: one every 30 s ({after})"
    );
    let r = post_as(p.addr, "bob", &p.body("b", "b-r", "hello"));
    assert_eq!(r.status, 200, "bob's admissions are his own");
    let metrics = get_as(p.addr, "alice", "/metrics");
    // alice may not read /metrics (callers are told apart): the refusal is not hers to see.
    assert_eq!(metrics.status, 403);
}

/// A tokens-file line with a word that is no quota refuses its principal only (fail closed,
/// as for any bad line), and says which line.
#[test]
fn a_tokens_line_with_a_bad_quota_refuses_only_its_principal() {
    let p = tokens_pair("quota-badline", &lines("max_runs=lots"), &[]);
    let r = post_as(p.addr, "alice", &p.body("a", "a-r", "hello"));
    assert_eq!(r.status, 401);
    let r = post_as(p.addr, "bob", &p.body("b", "b-r", "hello"));
    assert_eq!(r.status, 200, "{}", r.text());
}

fn usage_of(events: &[Value]) -> (u64, u64) {
    let u = &last(events)["usage"];
    let n = |k: &str| {
        u.as_array()
            .map(|a| a.iter().map(|x| x[k].as_u64().unwrap_or(0)).sum())
            .or_else(|| u[k].as_u64())
            .unwrap_or(0)
    };
    (n("inputTokens"), n("outputTokens"))
}

/// Usage is the sum of what each run's `RUN_FINISHED.usage` said, per caller and day; a
/// caller sees only its own; it is kept across a restart (written by the flush, and at exit).
#[test]
fn usage_is_summed_per_caller_kept_across_a_restart_and_shown_only_to_its_caller() {
    let mut p = tokens_pair("quota-usage", &lines(""), &[]);
    let mut want = (0u64, 0u64);
    for i in 0..2 {
        let r = post_as(
            p.addr,
            "alice",
            &p.body(&format!("a{i}"), &format!("a{i}-r"), "hello"),
        );
        assert_eq!(r.status, 200);
        let (events, _) = sse_events(&r.body);
        let (i, o) = usage_of(&events);
        assert!(i > 0, "the demo reports usage: {:?}", last(&events));
        want.0 += i;
        want.1 += o;
    }
    let r = post_as(p.addr, "bob", &p.body("b", "b-r", "hello"));
    assert_eq!(r.status, 200);
    let check = |p: &Procs| {
        let a = get_as(p.addr, "alice", "/usage").json();
        assert_eq!(a["caller"], "alice");
        assert_eq!(a["total"]["runs"], 2, "{a}");
        assert_eq!(a["total"]["inputTokens"], want.0);
        assert_eq!(a["total"]["outputTokens"], want.1);
        let days = a["days"].as_array().unwrap();
        assert_eq!(days.len(), 1);
        assert_eq!(days[0]["runs"], 2);
        let b = get_as(p.addr, "bob", "/usage").json();
        assert_eq!(b["total"]["runs"], 1, "{b}");
    };
    check(&p);
    assert_eq!(
        get_as(p.addr, "carol", "/usage").status,
        401,
        "no usage without a caller"
    );
    let bad = get_as(p.addr, "alice", "/usage?days=0");
    assert_eq!(bad.status, 400);
    assert!(bad.error_message().contains("days"), "{}", bad.text());

    // A clean stop writes what the last flush period counted; the next process reads it.
    p.signal("TERM");
    let _ = p.adapter.wait();
    let file = p.dir.join("state/principals/alice/threads/~usage.json");
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode, 0o600);
    let tokens = p.dir.parent().unwrap().join(format!(
        "iac-agui-{}-quota-usage-tokens",
        std::process::id()
    ));
    let arg = tokens.join("tokens").display().to_string();
    let (adapter, addr) =
        common::procs::adapter(&p.dir, p.kernel_port, &["--auth-tokens-file", &arg]);
    p.adapter = adapter;
    p.addr = addr;
    check(&p);
    // And the listing of threads (feature `threads`) is not disturbed by the usage file
    // beside them.
    #[cfg(feature = "threads")]
    {
        let threads = get_as(p.addr, "alice", "/threads").json();
        assert_eq!(threads["threads"].as_array().unwrap().len(), 2, "{threads}");
    }
}
