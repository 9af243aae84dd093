//! Per-caller identity and thread ownership (issue 39), against the real binary and a demo
//! kernel process: every route that names a thread or an execution, for the owner, another
//! principal and a request without identity, in each identity mode (tokens file, identity
//! header, single shared token); and the red-team attack (THREAD_BUSY ids → derived
//! rosInvocationId → replay/cancel) in the one mode where both callers are one principal.
//! The modes that tell callers apart need the `identity` feature; the single shared token is
//! the core's (its tests run in every build).

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use common::procs::{Procs, start_with_env};
use common::*;
use serde_json::{Value, json};

const CANCEL: &str = "/extensions/iac-code/v1/executions";

/// An identity mode: how to start the adapter and the headers of its callers.
struct Mode {
    name: &'static str,
    extra: Vec<String>,
    env: Vec<(&'static str, String)>,
    alice: Vec<(&'static str, String)>,
    /// Another principal (`None`: the mode has only one).
    bob: Option<Vec<(&'static str, String)>>,
    /// Requests with something, but no valid identity.
    strangers: Vec<Vec<(&'static str, String)>>,
}

fn sha(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn bearer(t: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {t}"))
}

#[cfg(feature = "identity")]
fn tokens_file_mode(dir: &std::path::Path) -> Mode {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        format!(
            "# name sha256(token)\nalice {}\nbob {}\n",
            sha("alice-token"),
            sha("bob-token")
        ),
    )
    .unwrap();
    Mode {
        name: "tokens-file",
        extra: vec!["--auth-tokens-file".into(), file.display().to_string()],
        env: vec![],
        alice: vec![bearer("alice-token")],
        bob: Some(vec![bearer("bob-token")]),
        strangers: vec![
            vec![],
            vec![bearer("carol-token")],
            vec![bearer(&sha("alice-token"))],
        ],
    }
}

#[cfg(feature = "identity")]
fn header_mode() -> Mode {
    let user = |u: &str| ("X-Forwarded-User", u.to_string());
    Mode {
        name: "identity-header",
        extra: vec!["--identity-header".into(), "X-Forwarded-User".into()],
        env: vec![],
        alice: vec![user("alice")],
        bob: Some(vec![user("bob")]),
        strangers: vec![vec![], vec![("X-Other-User", "alice".into())]],
    }
}

fn single_token_mode() -> Mode {
    Mode {
        name: "single-token",
        extra: vec![],
        env: vec![("IAC_CODE_AGUI_AUTH_TOKEN", "shared-token".into())],
        alice: vec![bearer("shared-token")],
        bob: None,
        strangers: vec![vec![], vec![bearer("other")]],
    }
}

fn start(mode: &Mode, name: &str, extra: &[&str]) -> Procs {
    let mut args: Vec<&str> = mode.extra.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let env: Vec<(&str, &str)> = mode.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    start_with_env(name, &args, &env)
}

/// The workspace `start(_, name, _)` makes, for `--default-cwd` (`tempdir`'s naming).
fn ws_of(name: &str) -> String {
    let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    tmp.join(format!("iac-agui-{}-{name}", std::process::id()))
        .join("ws")
        .display()
        .to_string()
}

fn headers<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    let mut v = vec![("Content-Type", "application/json")];
    v.extend(h.iter().map(|(k, x)| (*k, x.as_str())));
    v
}

/// A body-less request (the thread routes).
fn call(addr: SocketAddr, method: &str, path: &str, who: &[(&'static str, String)]) -> Resp {
    let h: Vec<(&str, &str)> = who.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&request(method, path, &h, b"")).unwrap();
    Reader::new(s).response(false).expect("an answer")
}

/// `PATCH /threads/{thread}` with a title.
fn rename(addr: SocketAddr, thread: &str, who: &[(&'static str, String)], title: &str) -> Resp {
    let body = serde_json::to_vec(&json!({ "title": title })).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&request(
        "PATCH",
        &format!("/threads/{thread}"),
        &headers(who),
        &body,
    ))
    .unwrap();
    Reader::new(s).response(false).expect("an answer")
}

fn post(addr: SocketAddr, path: &str, who: &[(&'static str, String)], body: &Value) -> Resp {
    post_json(
        addr,
        path,
        &headers(who),
        &serde_json::to_vec(body).unwrap(),
    )
}

fn run_body(p: &Procs, thread: &str, run: &str, text: &str) -> Value {
    serde_json::from_slice(&p.body(thread, run, text)).unwrap()
}

fn resume_body(p: &Procs, thread: &str, run: &str, interrupt: &str) -> Value {
    let mut b = run_body(p, thread, run, "x");
    b["messages"] = json!([]);
    b["resume"] = json!([{"interruptId": interrupt, "status": "resolved",
        "payload": {"selectedId": "cn-hangzhou"}}]);
    b
}

/// A finished run's events (the stream is checked).
fn run(p: &Procs, who: &[(&'static str, String)], body: &Value) -> Vec<Value> {
    let r = post(p.addr, "/", who, body);
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, _) = sse_events(&r.body);
    check_stream(&events).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    events
}

/// A run left streaming: its reader, once the session event arrived, and that event.
fn open(p: &Procs, who: &[(&'static str, String)], body: &Value) -> (Reader, Value) {
    let mut sock = TcpStream::connect(p.addr).unwrap();
    sock.write_all(&request(
        "POST",
        "/",
        &headers(who),
        &serde_json::to_vec(body).unwrap(),
    ))
    .unwrap();
    let mut r = Reader::new(sock);
    let (status, _) = r.head().expect("a head");
    assert_eq!(status, 200);
    let (_, session) = r.until_session();
    (r, session)
}

/// The rest of a stream's events.
fn rest(mut r: Reader) -> Vec<Value> {
    let mut raw = Vec::new();
    while let Some(c) = r.chunk() {
        if c.is_empty() {
            break;
        }
        raw.extend(c);
    }
    sse_events(&raw).0
}

fn interrupt_id(events: &[Value]) -> String {
    interrupts(events)[0]["id"].as_str().unwrap().to_string()
}

fn ids(thread: &str, run: &str, ros: &str) -> Value {
    json!({"threadId": thread, "runId": run, "rosInvocationId": ros})
}

/// What a caller sees of a response: status, and the body when it is not a stream.
fn seen(r: &Resp) -> (u16, String) {
    let body = if r.header("content-type") == Some("text/event-stream") {
        String::new()
    } else {
        r.text()
    };
    (r.status, body)
}

/// The owner's thread T (an interrupt pending) is, for anyone else, exactly a thread that
/// does not exist: resume, subscribe and cancel answer byte for byte alike.
fn others_see_nothing(mode: &Mode) {
    let p = start(mode, &format!("callers-{}", mode.name), &[]);
    let alice = &mode.alice;
    let first = run_as(alice, &p, "T", "r1", "question");
    let exec = session_event(&first)["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let ctx = session_event(&first)["contextId"].clone();
    let interrupt = interrupt_id(&first);

    for stranger in &mode.strangers {
        for (path, body) in [
            ("/".to_string(), run_body(&p, "T", "r9", "hello")),
            ("/".to_string(), resume_body(&p, "T", "r9", &interrupt)),
            (format!("{CANCEL}/{exec}/cancel"), ids("T", "r1", "r")),
            (format!("{CANCEL}/{exec}/subscribe"), ids("T", "r1", "r")),
        ] {
            let r = post(p.addr, &path, stranger, &body);
            assert_eq!(
                r.status,
                401,
                "{} {path} {stranger:?}: {}",
                mode.name,
                r.text()
            );
            assert_eq!(r.error_code(), "UNAUTHORIZED");
        }
    }

    if let Some(bob) = &mode.bob {
        // Each probe of alice's thread against the same probe of a thread nobody has.
        let probes = |thread: &str, exec: &str| {
            vec![
                post(p.addr, "/", bob, &resume_body(&p, thread, "rb", &interrupt)),
                post(
                    p.addr,
                    &format!("{CANCEL}/{exec}/cancel"),
                    bob,
                    &ids(thread, "r1", "r"),
                ),
                post(
                    p.addr,
                    &format!("{CANCEL}/{exec}/subscribe"),
                    bob,
                    &ids(thread, "r1", "r"),
                ),
                post(
                    p.addr,
                    &format!("{CANCEL}/{exec}/subscribe"),
                    bob,
                    &json!({"threadId": thread, "runId": "r1", "rosInvocationId": "r",
                        "afterSequence": 0}),
                ),
            ]
        };
        let thread_probes = |thread: &str| {
            vec![
                call(p.addr, "GET", &format!("/threads/{thread}/messages"), bob),
                call(p.addr, "GET", &format!("/threads/{thread}"), bob),
                rename(p.addr, thread, bob, "mine now"),
                call(p.addr, "DELETE", &format!("/threads/{thread}"), bob),
            ]
        };
        let mut theirs = probes("T", &exec);
        theirs.extend(thread_probes("T"));
        let mut nobodys = probes("nobody-has-this", "00000000-0000-4000-8000-000000000000");
        nobodys.extend(thread_probes("nobody-has-this"));
        #[cfg(feature = "threads")]
        for q in [
            "/threads",
            "/threads?q=question",
            "/threads?status=interrupted",
        ] {
            let listed = call(p.addr, "GET", q, bob).json();
            assert_eq!(
                listed["threads"],
                json!([]),
                "bob lists alice's threads ({q}): {listed}"
            );
        }
        for (a, b) in theirs.iter().zip(&nobodys) {
            let (a, b) = (seen(a), seen(b));
            assert_eq!(a, b, "{}: another principal learns something", mode.name);
            assert_ne!(a.0, 200);
        }
        // Bob's own thread T: a new conversation in a context of its own, with alice's
        // run id free to use.
        let his = run_as(bob, &p, "T", "r1", "hello");
        assert_eq!(last(&his)["type"], "RUN_FINISHED", "{his:?}");
        let his_ctx = session_event(&his)["contextId"].clone();
        assert_ne!(
            his_ctx, ctx,
            "two principals' thread T share a kernel context"
        );
        assert_ne!(session_event(&his)["executionId"].as_str(), Some(&*exec));
        #[cfg(feature = "threads")]
        {
            let theirs = call(p.addr, "GET", "/threads/T/messages", bob).json();
            assert_eq!(theirs["messages"][0]["content"], "hello", "{theirs}");
            assert_eq!(theirs["messages"].as_array().unwrap().len(), 2);
        }
    }

    // Nothing of the above touched alice's thread: her interrupt is still hers to answer.
    let answered = run(&p, alice, &resume_body(&p, "T", "r2", &interrupt));
    assert_eq!(last(&answered)["type"], "RUN_FINISHED", "{answered:?}");
    assert!(interrupts(&answered).is_empty(), "{answered:?}");
    assert_eq!(
        session_event(&answered)["executionId"].as_str(),
        Some(&*exec)
    );
    // The owner re-attaches to the finished run (a replay) and then deletes the thread.
    let ros = session_event(&answered)["rosInvocationId"]
        .as_str()
        .unwrap()
        .to_string();
    let replay = post(
        p.addr,
        &format!("{CANCEL}/{exec}/subscribe"),
        alice,
        &json!({"threadId": "T", "runId": "r2", "rosInvocationId": ros, "afterSequence": -1}),
    );
    assert_eq!(replay.status, 200, "{}: {}", mode.name, replay.text());
    #[cfg(feature = "threads")]
    {
        let gone = call(p.addr, "DELETE", "/threads/T", alice);
        assert_eq!(gone.status, 204, "{}: {}", mode.name, gone.text());
        let after = call(p.addr, "GET", "/threads/T/messages", alice);
        assert_eq!(after.error_code(), "THREAD_NOT_FOUND");
    }
}

/// THREAD_BUSY names the active run to its owner only; another principal's thread of the
/// same id is not busy at all; the owner can still cancel.
fn busy_names_ids_to_the_owner_only(mode: &Mode) {
    let p = start(mode, &format!("callers-busy-{}", mode.name), &[]);
    let alice = &mode.alice;
    let (stream, session) = open(&p, alice, &run_body(&p, "B", "b1", "wait 10"));
    let exec = session["executionId"].as_str().unwrap().to_string();
    let again = post(p.addr, "/", alice, &run_body(&p, "B", "b2", "hello"));
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.error_code(), "THREAD_BUSY");
    assert_eq!(again.json()["error"]["executionId"].as_str(), Some(&*exec));
    assert_eq!(again.json()["error"]["runId"], "b1");
    if let Some(bob) = &mode.bob {
        let his = run_as(bob, &p, "B", "b1", "hello");
        assert_eq!(last(&his)["type"], "RUN_FINISHED", "{his:?}");
        let cancel = post(
            p.addr,
            &format!("{CANCEL}/{exec}/cancel"),
            bob,
            &ids("B", "b1", "r"),
        );
        assert_eq!(cancel.status, 404, "{}", cancel.text());
    }
    let cancel = post(
        p.addr,
        &format!("{CANCEL}/{exec}/cancel"),
        alice,
        &ids("B", "b1", "r"),
    );
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    let events = rest(stream);
    assert_eq!(last(&events)["type"], "RUN_ERROR", "{events:?}");
    assert_eq!(last(&events)["code"], "CANCELLED");
}

/// `run` with the caller first (reads better in the flows).
fn run_as(
    who: &[(&'static str, String)],
    p: &Procs,
    thread: &str,
    id: &str,
    text: &str,
) -> Vec<Value> {
    run(p, who, &run_body(p, thread, id, text))
}

#[cfg(feature = "identity")]
#[test]
fn another_principal_sees_nothing_of_a_thread_with_the_tokens_file() {
    let dir = tempdir("callers-tokens");
    let mode = tokens_file_mode(&dir);
    others_see_nothing(&mode);
    busy_names_ids_to_the_owner_only(&mode);
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(feature = "identity")]
#[test]
fn another_principal_sees_nothing_of_a_thread_with_the_identity_header() {
    others_see_nothing(&header_mode());
    busy_names_ids_to_the_owner_only(&header_mode());
}

#[test]
fn without_a_token_nothing_is_reached_with_the_single_token() {
    others_see_nothing(&single_token_mode());
    busy_names_ids_to_the_owner_only(&single_token_mode());
}

/// The second red-team's attack, where it could work (one shared token, `--default-cwd`):
/// THREAD_BUSY gives the victim's executionId and runId; the supplied rosInvocationId was
/// `agui-default-` + sha256(threadId)[:16]. With it the attacker replayed or cancelled the
/// victim's run. Now the id is keyed with the server's secret: both fail as for a stranger.
#[test]
fn thread_busy_ids_and_a_derived_ros_id_neither_replay_nor_cancel_a_run() {
    let mode = single_token_mode();
    let p = start(
        &mode,
        "callers-redteam",
        &["--default-cwd", &ws_of("callers-redteam")],
    );
    let who = &mode.alice;
    let stock = |thread: &str, run: &str, text: &str| {
        json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": run, "role": "user", "content": text}], "forwardedProps": {}})
    };
    let (victim, session) = open(&p, who, &stock("victim", "v1", "wait 3"));
    let busy = post(p.addr, "/", who, &stock("victim", "a1", "hello"));
    assert_eq!(busy.error_code(), "THREAD_BUSY");
    let exec = busy.json()["error"]["executionId"]
        .as_str()
        .unwrap()
        .to_string();
    let run_id = busy.json()["error"]["runId"].as_str().unwrap().to_string();
    let derived = format!("agui-default-{}", &sha("victim")[..16]);
    let replay = post(
        p.addr,
        &format!("{CANCEL}/{exec}/subscribe"),
        who,
        &json!({"threadId": "victim", "runId": run_id, "rosInvocationId": derived,
            "afterSequence": -1}),
    );
    assert_ne!(replay.status, 200, "replayed: {}", replay.text());
    let cancel = post(
        p.addr,
        &format!("{CANCEL}/{exec}/cancel"),
        who,
        &ids("victim", &run_id, &derived),
    );
    assert_eq!(cancel.status, 404, "{}", cancel.text());
    let events = rest(victim);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_ne!(
        session["rosInvocationId"], derived,
        "the supplied id is derivable"
    );
}

/// A named principal's thread file sits under `principals/`, in a file 0.16.0 reads as its
/// own (a state directory of the reference's shape); the shared principal's stay where they
/// were; the server key is owner-only and survives a restart, so a thread's supplied
/// rosInvocationId does too.
#[cfg(feature = "identity")]
#[test]
fn principals_threads_live_apart_and_the_server_key_survives_a_restart() {
    let dir = tempdir("callers-files-tokens");
    let mode = tokens_file_mode(&dir);
    let ws = ws_of("callers-files");
    let mut p = start(&mode, "callers-files", &["--default-cwd", &ws]);
    let stock = |thread: &str, run: &str, text: &str| {
        json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": run, "role": "user", "content": text}], "forwardedProps": {}})
    };
    let first = run(&p, &mode.alice, &stock("f", "f1", "question"));
    let interrupt = interrupt_id(&first);
    let state = p.dir.join("state");
    let file = state.join("principals/alice/threads/f.json");
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(doc["threadId"], "f");
    assert_eq!(doc["schemaVersion"], 1);
    assert!(
        doc.get("owner").is_none(),
        "the file is the reference's shape"
    );
    assert!(!state.join("threads/f.json").exists());
    let mode_of = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode_of(&state.join("server.key")), 0o600);
    assert_eq!(mode_of(&state.join("principals/alice")), 0o700);
    assert_eq!(
        std::fs::read_to_string(state.join("principals/alice/principal")).unwrap(),
        "alice"
    );
    let key = std::fs::read(state.join("server.key")).unwrap();

    // Restart on the same state: the key is the same, and the pending interrupt is answered
    // with the same supplied rosInvocationId.
    let _ = p.adapter.kill();
    let _ = p.adapter.wait();
    let mut args: Vec<&str> = mode.extra.iter().map(String::as_str).collect();
    args.extend(["--default-cwd", &ws]);
    let (adapter, addr) = common::procs::adapter(&p.dir, p.kernel_port, &args);
    p.adapter = adapter;
    p.addr = addr;
    assert_eq!(std::fs::read(state.join("server.key")).unwrap(), key);
    let mut resume = stock("f", "f2", "x");
    resume["messages"] = json!([]);
    resume["resume"] = json!([{"interruptId": interrupt, "status": "resolved",
        "payload": {"selectedId": "cn-hangzhou"}}]);
    let answered = run(&p, &mode.alice, &resume);
    assert_eq!(last(&answered)["type"], "RUN_FINISHED", "{answered:?}");
    assert_eq!(
        session_event(&answered)["rosInvocationId"],
        session_event(&first)["rosInvocationId"]
    );
    drop(p);
    let _ = std::fs::remove_dir_all(dir);
}

/// An identity header that cannot name a caller is a 400 that names the header, in the
/// request's language; with no header at all, 401.
#[cfg(feature = "identity")]
#[test]
fn a_bad_identity_header_is_a_400_naming_it() {
    let mode = header_mode();
    let p = start(&mode, "callers-badheader", &[]);
    for (value, lang) in [("al ice", "en"), ("a\tb", "de"), (&*"x".repeat(300), "ja")] {
        let r = post(
            p.addr,
            "/",
            &[
                ("X-Forwarded-User", value.to_string()),
                ("Accept-Language", lang.to_string()),
            ],
            &run_body(&p, "t", "r", "hello"),
        );
        refused_naming(&r, 400, "INVALID_INPUT", "x-forwarded-user");
    }
    let r = post(p.addr, "/", &[], &run_body(&p, "t", "r", "hello"));
    assert_eq!(r.status, 401);
}

#[cfg(feature = "identity")]
/// A server reading a tokens file of its own that holds `lines` (its log kept); the file's
/// directory goes with it.
struct TokensServer {
    p: Procs,
    log: common::procs::Log,
    file: std::path::PathBuf,
}

#[cfg(feature = "identity")]
impl Drop for TokensServer {
    fn drop(&mut self) {
        if let Some(dir) = self.file.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(feature = "identity")]
fn tokens_server(name: &str, lines: &str) -> TokensServer {
    let file = tempdir(&format!("{name}-tokens")).join("tokens");
    std::fs::write(&file, lines).unwrap();
    let arg = file.display().to_string();
    let (p, log) = common::procs::start_logged(name, &["--auth-tokens-file", &arg], &[]);
    TokensServer { p, log, file }
}

/// The status of `GET /capabilities` with a bearer token.
fn capabilities(addr: SocketAddr, tok: &str) -> u16 {
    call(addr, "GET", "/capabilities", &[bearer(tok)]).status
}

/// The tokens file is read again when it changes and on SIGHUP, which no longer drains the
/// server.
#[cfg(feature = "identity")]
#[test]
fn the_tokens_file_is_reread_on_change_and_on_sighup() {
    let t = tokens_server("callers-reload", &format!("alice {}\n", sha("alice-token")));
    let (p, file) = (&t.p, &t.file);
    let capabilities = |tok: &str| capabilities(p.addr, tok);
    assert_eq!(capabilities("alice-token"), 200);
    assert_eq!(capabilities("bob-token"), 401);
    std::fs::write(
        file,
        format!("alice {}\nbob {}\n", sha("alice-token"), sha("bob-token")),
    )
    .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || capabilities(
            "bob-token"
        ) == 200),
        "bob's new line was not picked up"
    );
    // SIGHUP re-reads (alice removed) and the server goes on serving.
    std::fs::write(file, format!("bob {}\n", sha("bob-token"))).unwrap();
    p.signal("HUP");
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        capabilities("alice-token") == 401
    }));
    assert_eq!(capabilities("bob-token"), 200);
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.write_all(&request("GET", "/health", &[], b"")).unwrap();
    let h = Reader::new(s).response(false).unwrap();
    assert_eq!(h.status, 200, "SIGHUP drained the server: {}", h.text());
}

/// Identity settings that cannot be safe refuse to start, naming why.
#[cfg(feature = "identity")]
#[test]
fn unsafe_identity_settings_refuse_to_start() {
    let dir = tempdir("callers-refuse");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "").unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_iac-agui"))
            .args(["--demo", "--port", "0", "--idle-shutdown", "1"])
            .args(args)
            .envs(env.iter().copied())
            .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let t = tokens.display().to_string();
    let (ok, err) = run(
        &["--auth-tokens-file", &t, "--identity-header", "X-User"],
        &[],
    );
    assert!(!ok && err.contains("cannot be combined"), "{err}");
    let (ok, err) = run(
        &["--auth-tokens-file", &t],
        &[("IAC_CODE_AGUI_AUTH_TOKEN", "x")],
    );
    assert!(!ok && err.contains("cannot be combined"), "{err}");
    let (ok, err) = run(&["--identity-header", "Authorization"], &[]);
    assert!(!ok && err.contains("--identity-header"), "{err}");
    let (ok, err) = run(&["--host", "0.0.0.0", "--identity-header", "X-User"], &[]);
    assert!(!ok && err.contains("--trust-identity-header"), "{err}");
    let (ok, err) = run(
        &["--host", "0.0.0.0", "--identity-header", "X-User"],
        &[("IAC_CODE_AGUI_AUTH_TOKEN", "proxy")],
    );
    assert!(ok, "the shared token proves the proxy: {err}");
    let missing = dir.join("nope").display().to_string();
    let (ok, err) = run(&["--auth-tokens-file", &missing], &[]);
    assert!(!ok && err.contains("cannot read"), "{err}");
    // A file too large to be a tokens file cannot be used: no start.
    std::fs::write(&tokens, "#".repeat(2 << 20)).unwrap();
    let (ok, err) = run(&["--auth-tokens-file", &t], &[]);
    assert!(!ok && err.contains("larger than"), "{err}");
    // A bad line refuses its principal, at start-up as on a reload: the server starts.
    std::fs::write(&tokens, format!("alice {}\nbob 1234\n", sha("a"))).unwrap();
    let (ok, err) = run(&["--auth-tokens-file", &t], &[]);
    assert!(ok && err.contains("line 2") && err.contains("bob"), "{err}");
    let (ok, err) = run(&["--metrics-principals", "ops"], &[]);
    assert!(!ok && err.contains("not told apart"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `r` is a `status` `code` refusal whose message names `header`.
fn refused_naming(r: &common::Resp, status: u16, code: &str, header: &str) {
    assert_eq!(
        (r.status, r.error_code()),
        (status, code.into()),
        "{}",
        r.text()
    );
    assert!(r.error_message().contains(header), "{}", r.text());
}

#[cfg(feature = "identity")]
/// `/health` as seen by a probe: status and body, or `None` when no answer came within
/// `within` (the loop is stuck).
fn health_within(addr: SocketAddr, within: std::time::Duration) -> Option<(u16, Value)> {
    use std::io::Read;
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(within)).unwrap();
    s.write_all(&request("GET", "/health", &[], b"")).ok()?;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    // `Connection: close` is not asked for: read until the body is complete.
    loop {
        let n = s.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, body)) = text.split_once("\r\n\r\n")
            && let Ok(v) = serde_json::from_str::<Value>(body)
        {
            let status = head.split(' ').nth(1)?.parse().ok()?;
            return Some((status, v));
        }
    }
}

#[cfg(feature = "identity")]
fn health(addr: SocketAddr) -> (u16, Value) {
    health_within(addr, std::time::Duration::from_secs(10)).expect("/health answers")
}

/// Issue 45, 11: a proxy that appends its identity header (or its `Authorization`) after
/// the client's let the client's first copy win: alice's threads, read with her name first.
/// Now a second copy of either is a 400 naming it, in every mode that reads it.
#[cfg(feature = "identity")]
#[test]
fn a_second_copy_of_an_identity_header_or_authorization_is_a_400_naming_it() {
    let mode = header_mode();
    let p = start(&mode, "callers-twice-header", &[]);
    run_as(&mode.alice, &p, "hers", "h1", "hello");
    let user = |u: &str| ("X-Forwarded-User", u.to_string());
    for (who, lang) in [
        (vec![user("alice"), user("mallory")], "en"),
        (vec![user("mallory"), user("alice")], "de"),
        (vec![user("alice"), user("alice")], "ja"),
    ] {
        let mut with_lang = who.clone();
        with_lang.push(("Accept-Language", lang.to_string()));
        let mut tried = vec![
            call(p.addr, "GET", "/capabilities", &with_lang),
            post(p.addr, "/", &with_lang, &run_body(&p, "hers", "h2", "x")),
        ];
        if cfg!(feature = "threads") {
            tried.push(call(p.addr, "GET", "/threads", &with_lang));
            tried.push(call(p.addr, "GET", "/threads/hers/messages", &with_lang));
        }
        for r in tried {
            refused_naming(&r, 400, "INVALID_INPUT", "x-forwarded-user");
            assert!(!r.text().contains("hers"), "{}", r.text());
        }
    }
    drop(p);

    let dir = tempdir("callers-twice-tokens");
    authorization_twice_is_a_400(&tokens_file_mode(&dir), "alice-token", "bob-token");
    let _ = std::fs::remove_dir_all(dir);
}

/// Issue 45, 11 with the one shared token: a second `Authorization` is a 400 naming it.
#[test]
fn a_second_copy_of_authorization_is_a_400_naming_it_with_the_single_token() {
    authorization_twice_is_a_400(&single_token_mode(), "shared-token", "other");
}

/// `Authorization` twice, in either order or the same twice, is a 400 naming it (the thread
/// routes, `/capabilities`); once, `first` is let in.
fn authorization_twice_is_a_400(mode: &Mode, first: &str, second: &str) {
    let p = start(mode, &format!("callers-twice-{}", mode.name), &[]);
    for who in [
        vec![bearer(first), bearer(second)],
        vec![bearer(second), bearer(first)],
        vec![bearer(first), bearer(first)],
    ] {
        let r = call(p.addr, "GET", "/threads", &who);
        refused_naming(&r, 400, "INVALID_INPUT", "authorization");
        let r = call(p.addr, "GET", "/capabilities", &who);
        assert_eq!(r.status, 400, "{}: {who:?}: {}", mode.name, r.text());
    }
    assert_eq!(capabilities(p.addr, first), 200);
}

/// Issue 46, 12: a request without the identity header was answered as a token problem.
#[cfg(feature = "identity")]
#[test]
fn a_request_without_the_identity_header_is_told_which_header_is_missing() {
    let mode = header_mode();
    let p = start(&mode, "callers-noheader", &[]);
    let mut paths = vec!["/capabilities"];
    if cfg!(feature = "threads") {
        paths.push("/threads");
    }
    for (lang, path) in ["en", "fr", "zh"]
        .into_iter()
        .flat_map(|l| paths.iter().map(move |p| (l, p)))
    {
        let r = call(
            p.addr,
            "GET",
            path,
            &[("Accept-Language", lang.to_string())],
        );
        refused_naming(&r, 401, "UNAUTHORIZED", "x-forwarded-user");
    }
}

/// Issue 45, 12: an edit that removed bob's line and added one bad line was refused whole
/// (bob's revoked token went on working), and a deleted file changed nothing. Now a line
/// that is gone is gone at the next read; a bad line refuses its own principal (logged by
/// number, never with its hash); a missing file refuses everyone and `/health` says so.
#[cfg(feature = "identity")]
#[test]
fn a_revoked_line_is_gone_at_once_and_a_bad_line_refuses_only_its_principal() {
    let line = |who: &str| format!("{who} {}\n", sha(&format!("{who}-token")));
    let all = format!("{}{}{}", line("alice"), line("bob"), line("carol"));
    let t = tokens_server("callers-revoke", &all);
    let (p, log, file) = (&t.p, &t.log, &t.file);
    let ok = |who: &str| capabilities(p.addr, &format!("{who}-token")) == 200;
    assert!(ok("alice") && ok("bob") && ok("carol"));
    // Bob's line removed; carol's second line broken; a line that names nobody.
    let dave = sha("dave-token");
    std::fs::write(
        file,
        format!(
            "{}{}carol 12345\nda\u{1}ve {dave}\n",
            line("alice"),
            line("carol")
        ),
    )
    .unwrap();
    let ten = std::time::Duration::from_secs(10);
    assert!(
        wait_until(ten, || !ok("bob")),
        "bob's revoked token still works"
    );
    assert!(ok("alice"), "alice lost her access to others' lines");
    assert!(!ok("carol"), "carol's broken line let her in");
    assert!(!ok("dave"));
    assert_eq!(health(p.addr).0, 200, "one bad line is not an outage");
    let logged = |what: &str| {
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    assert!(wait_until(ten, || logged("line 3") == 1 && logged("line 4") == 1));
    let text = log.lock().unwrap().join("\n");
    for who in ["alice", "bob", "carol", "dave"] {
        assert!(
            !text.contains(&sha(&format!("{who}-token"))),
            "a hash in the log"
        );
    }

    // Deleted: everyone is refused, `/health` says why, logged once.
    std::fs::remove_file(file).unwrap();
    assert!(
        wait_until(ten, || !ok("alice")),
        "a deleted file let alice in"
    );
    let (status, body) = health(p.addr);
    assert_eq!((status, &body["reason"]), (503, &json!("tokens")), "{body}");
    // The log is read from the server's output by a thread of the test: it may come a
    // moment after the refusal it explains.
    assert!(
        wait_until(ten, || logged("cannot be used") >= 1),
        "a deleted file is not logged"
    );
    std::fs::write(file, &all).unwrap();
    assert!(wait_until(ten, || ok("bob") && ok("carol")));
    assert_eq!(health(p.addr).0, 200);
    assert_eq!(
        logged("cannot be used"),
        1,
        "logged once, not at every look"
    );
}

/// Issue 45, 13: a tokens file saved with a byte-order mark renamed its first principal
/// (`\u{feff}alice`): her token worked and all her threads vanished from her view.
#[cfg(feature = "identity")]
#[test]
fn a_tokens_file_saved_with_a_byte_order_mark_keeps_the_first_callers_threads() {
    let alice = format!("alice {}\n", sha("alice-token"));
    let t = tokens_server("callers-bom", &alice);
    let (p, file) = (&t.p, &t.file);
    let who = vec![bearer("alice-token")];
    run_as(&who, p, "mine", "m1", "hello");
    std::fs::write(file, format!("\u{feff}{alice}bob {}\n", sha("bob-token"))).unwrap();
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        capabilities(p.addr, "bob-token") == 200
    }));
    // Still her thread: its run id is taken.
    let again = post(p.addr, "/", &who, &run_body(p, "mine", "m1", "hello"));
    assert_eq!(again.status, 409, "a principal without her thread");
    assert_eq!(again.error_code(), "DUPLICATE_RUN_ID", "{}", again.text());
    #[cfg(feature = "threads")]
    {
        let listed = call(p.addr, "GET", "/threads", &who);
        assert_eq!(listed.status, 200, "{}", listed.text());
        assert_eq!(
            listed.json()["threads"][0]["threadId"],
            "mine",
            "{}",
            listed.text()
        );
    }
}

/// Issue 45, 14: with per-caller identity any caller read `/metrics`, whose thread counts and
/// history bytes move with other callers' private threads. Now it needs the metrics token
/// or a listed principal (403 for other callers, 401 for strangers).
#[cfg(feature = "identity")]
#[test]
fn metrics_need_their_own_credential_once_callers_are_told_apart() {
    let metrics = |addr: SocketAddr, who: &[(&'static str, String)]| {
        let r = call(addr, "GET", "/metrics", who);
        if r.status == 200 {
            assert!(r.text().contains("iac_agui_runs_active"), "{}", r.text());
            #[cfg(feature = "threads")]
            assert!(r.text().contains("iac_agui_threads"), "{}", r.text());
        }
        let code = if r.status == 200 {
            String::new()
        } else {
            r.error_code()
        };
        (r.status, code)
    };
    let dir = tempdir("callers-metrics-tokens");
    let mode = tokens_file_mode(&dir);
    let p = start(&mode, "callers-metrics-none", &[]);
    assert_eq!(metrics(p.addr, &mode.alice), (403, "FORBIDDEN".into()));
    assert_eq!(metrics(p.addr, &[]), (401, "UNAUTHORIZED".into()));
    drop(p);

    let scrape = ("IAC_CODE_AGUI_METRICS_TOKEN", "scrape-token".to_string());
    for mut mode in [tokens_file_mode(&dir), header_mode()] {
        mode.env.push(scrape.clone());
        let p = start(
            &mode,
            &format!("callers-metrics-{}", mode.name),
            &["--metrics-principals", "ops,bob"],
        );
        assert_eq!(
            metrics(p.addr, &[bearer("scrape-token")]).0,
            200,
            "{}",
            mode.name
        );
        assert_eq!(
            metrics(p.addr, mode.bob.as_ref().unwrap()).0,
            200,
            "{}",
            mode.name
        );
        assert_eq!(metrics(p.addr, &mode.alice).0, 403, "{}", mode.name);
        assert_eq!(metrics(p.addr, &[bearer("wrong")]).0, 401, "{}", mode.name);
        let twice = [bearer("scrape-token"), bearer("scrape-token")];
        assert_eq!(metrics(p.addr, &twice).0, 400, "{}", mode.name);
        // The scrape token is for /metrics alone.
        assert_eq!(capabilities(p.addr, "scrape-token"), 401, "{}", mode.name);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// One shared caller keeps the one token for `/metrics` too.
#[test]
fn metrics_take_the_shared_token_with_one_shared_caller() {
    let mode = single_token_mode();
    let p = start(&mode, "callers-metrics-single", &[]);
    assert_eq!(metrics(p.addr, &mode.alice).0, 200);
    assert_eq!(metrics(p.addr, &[]).0, 401);
}

/// `GET /metrics` as `who`: the status, and the error code of a refusal.
fn metrics(addr: SocketAddr, who: &[(&'static str, String)]) -> (u16, String) {
    let r = call(addr, "GET", "/metrics", who);
    if r.status == 200 {
        assert!(r.text().contains("iac_agui_threads"), "{}", r.text());
    }
    let code = if r.status == 200 {
        String::new()
    } else {
        r.error_code()
    };
    (r.status, code)
}

/// Issue 45, 15: `Host: localhost..` is not a loopback name (421) on every route of the
/// identity modes, whatever its spelling, alone or after a good request on the connection;
/// `/health` alone answers any Host (probes).
#[cfg(feature = "identity")]
#[test]
fn host_names_with_empty_labels_are_421_in_the_per_caller_modes() {
    let dir = tempdir("callers-hosts-tokens");
    for mode in [header_mode(), tokens_file_mode(&dir)] {
        let p = start(&mode, &format!("callers-hosts-{}", mode.name), &[]);
        let port = p.addr.port();
        let who: Vec<(&str, &str)> = mode.alice.iter().map(|(k, v)| (*k, v.as_str())).collect();
        fn with_host<'a>(who: &[(&'a str, &'a str)], host: &'a str) -> Vec<(&'a str, &'a str)> {
            let mut h = who.to_vec();
            h.push(("Host", host));
            h
        }
        let good = request("GET", "/capabilities", &with_host(&who, "localhost."), b"");
        assert_eq!(common::raw(p.addr, &good).status, 200, "{}", mode.name);
        for host in [
            "localhost..".to_string(),
            "LOCALHOST..".into(),
            format!("localhost..:{port}"),
            "localhost...".into(),
            "127.0.0.1..".into(),
            "..localhost".into(),
            "local..host".into(),
        ] {
            let h = with_host(&who, &host);
            let mut h_json = h.clone();
            h_json.push(("Content-Type", "application/json"));
            for bytes in [
                request("GET", "/capabilities", &h, b""),
                request("GET", "/threads", &h, b""),
                request("GET", "/metrics", &h, b""),
                request("DELETE", "/threads/t", &h, b""),
                request("POST", "/", &h_json, &run_body_bytes(&p)),
                String::from_utf8(request("GET", "/capabilities", &h, b""))
                    .unwrap()
                    .replacen("HTTP/1.1", "HTTP/1.0", 1)
                    .into_bytes(),
            ] {
                let r = common::raw(p.addr, &bytes);
                assert_eq!(r.status, 421, "{} {host}: {}", mode.name, r.text());
                assert_eq!(r.error_code(), "HOST_NOT_ALLOWED");
            }
            // On a connection whose first request was answered.
            let mut s = TcpStream::connect(p.addr).unwrap();
            let mut both = good.clone();
            both.extend(request("GET", "/threads", &h, b""));
            s.write_all(&both).unwrap();
            let mut r = Reader::new(s);
            assert_eq!(r.response(false).unwrap().status, 200);
            assert_eq!(r.response(false).unwrap().status, 421, "{host}");
            let probe = request("GET", "/health", &[("Host", &host)], b"");
            assert_eq!(common::raw(p.addr, &probe).status, 200, "{host}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(feature = "identity")]
fn run_body_bytes(p: &Procs) -> Vec<u8> {
    p.body("t", "r", "hello")
}

/// Issue 43: the loop stat'ed and read the tokens file on its own tick, so a file whose read
/// blocks (a FIFO with no writer; a hung network mount) stopped every connection. Now the
/// watcher thread reads it: `/health` keeps answering within 100 ms, and once the read has
/// not finished in time the file counts as unreadable (everyone refused, `/health` 503).
#[cfg(feature = "identity")]
#[test]
fn a_tokens_file_whose_read_blocks_never_stalls_the_loop() {
    let t = tokens_server("callers-fifo", &format!("alice {}\n", sha("alice-token")));
    let (p, file) = (&t.p, &t.file);
    let dir = file.parent().unwrap();
    assert_eq!(capabilities(p.addr, "alice-token"), 200);
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::rename(&fifo, file).unwrap();
    // Each probe gets a few tries at the 100 ms (the machine is shared); one that gets no
    // answer at all within 5 s is a loop stuck on the file.
    let fast = std::time::Duration::from_millis(100);
    let stuck = std::time::Duration::from_secs(5);
    let clock = iac_agui::clock::SystemClock;
    use iac_agui::clock::Clock as _;
    let probe = || {
        let mut last = None;
        for _ in 0..3 {
            let t0 = clock.now();
            let answer = health_within(p.addr, stuck).expect("the loop answers /health");
            if clock.now() - t0 <= fast {
                return answer;
            }
            last = Some(clock.now() - t0);
        }
        panic!("/health took {last:?}, three times in a row");
    };
    assert!(
        wait_until(std::time::Duration::from_secs(30), || {
            let (status, body) = probe();
            status == 503 && body["reason"] == "tokens"
        }),
        "a file that cannot be read left the tokens in use"
    );
    assert_eq!(capabilities(p.addr, "alice-token"), 401);
    p.signal("HUP");
    assert_eq!(probe().0, 503);
    // A file put in the FIFO's place is read, though the FIFO's read still hangs.
    std::fs::remove_file(file).unwrap();
    std::fs::write(file, format!("alice {}\n", sha("alice-token"))).unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(10), || probe().0 == 200),
        "the watcher stays stuck on the FIFO"
    );
    assert_eq!(capabilities(p.addr, "alice-token"), 200);
}
