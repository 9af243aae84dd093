//! The built-in demo kernel: a scripted A2A 1.0 server on its own loopback port.
//!
//! It speaks the real kernel's conventions as captured in `tests/fixtures/a2a/`: JSON-RPC on
//! `POST /`, `data: …\r\n\r\n` SSE frames wrapped as `{"result":…,"id":…,"jsonrpc":"2.0"}`,
//! proto-JSON (every number inside metadata is a double, `1.0`), `<taskId>-message` text
//! ids, an ordinary turn that ends in `input-required` after an `assistantFinal` status,
//! pipeline envelopes and the extension endpoints. `iac-agui --demo` runs it so a newcomer
//! sees complete AG-UI sessions with no LLM; the integration tests use it as their upstream.
//!
//! The script is chosen by keywords in the user's message (see `scripts::KEYWORDS`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::ids;
use crate::server::http::{self, ChunkedDecoder, Framing};

#[macro_use]
mod json;
mod faults;
mod frames;
mod resume;
mod rpc;
mod scripts;
mod server;
mod tasks;

use faults::*;
use frames::*;
use resume::*;
use rpc::*;
use scripts::*;
use server::*;
use tasks::*;

pub(crate) use scripts::listed_keywords;

use crate::sync::lock;

/// Demo kernel settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Required bearer token (`None`: no auth).
    pub token: Option<String>,
    /// Delay between scripted frames.
    pub frame_delay: Duration,
    /// Interval of the `slow` script's ticks.
    pub tick: Duration,
    /// How long a cancelled task takes to stop, like the real kernel under load: `CancelTask`
    /// answers only then, and a task started on the same context meanwhile fails after its
    /// first text (zero: stops at once).
    pub cancel_linger: Duration,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            token: None,
            frame_delay: Duration::from_millis(40),
            tick: Duration::from_millis(300),
            cancel_linger: Duration::ZERO,
        }
    }
}

/// What is waiting for the user.
#[derive(Debug, Clone)]
struct Pending {
    input: Value,
    kind: &'static str,
}

struct Task {
    id: String,
    context_id: String,
    session_id: String,
    script: Script,
    state: &'static str,
    last_message: Option<Value>,
    history: Vec<Value>,
    pending: Option<Pending>,
    answered: Vec<String>,
    /// The task has a producer running (a stream is open).
    live: bool,
    cancel: Arc<AtomicBool>,
    subscribers: Vec<SyncSender<Value>>,
    pipeline_events: Vec<Value>,
    pipeline_seq: u64,
    cwd: Option<String>,
}

struct Shared {
    cfg: DemoConfig,
    tasks: Mutex<HashMap<String, Task>>,
    sessions: Mutex<HashMap<String, String>>,
    connections: AtomicUsize,
    stop: AtomicBool,
    /// Contexts whose cancelled task is still stopping, until when.
    stopping: Mutex<HashMap<String, std::time::Instant>>,
}

/// A running demo kernel.
pub struct DemoKernel {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl DemoKernel {
    /// Start on `127.0.0.1:0`.
    pub fn start(cfg: DemoConfig) -> io::Result<DemoKernel> {
        DemoKernel::start_on(0, cfg)
    }

    /// Start on `127.0.0.1:port`.
    pub(crate) fn start_on(port: u16, cfg: DemoConfig) -> io::Result<DemoKernel> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        rustix::net::listen(&listener, crate::limits::LISTEN_BACKLOG)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            tasks: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            stopping: Mutex::new(HashMap::new()),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("demo-kernel".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(DemoKernel { addr, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Task ids the kernel has seen (tests).
    pub fn task_ids(&self) -> Vec<String> {
        lock(&self.shared.tasks).keys().cloned().collect()
    }

    /// A task's normalised state name, e.g. `TASK_STATE_CANCELED` (tests).
    pub fn task_state(&self, id: &str) -> Option<String> {
        lock(&self.shared.tasks)
            .get(id)
            .map(|t| t.state.to_string())
    }

    /// Connections being served right now (tests check for leaks).
    pub fn open_connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Drop for DemoKernel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in lock(&self.shared.tasks).values() {
            t.cancel.store(true, Ordering::SeqCst);
        }
        // Unblock accept().
        let _ = TcpStream::connect(self.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_micros() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_997_807_849_123);
        assert_eq!(rfc3339_micros(t), "2026-11-30T00:16:47.849123Z");
        assert_eq!(
            rfc3339_micros(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn numbers_become_doubles() {
        let v = doubles(json!({"a": 1, "b": [2, 2.5], "c": "3"}));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"a":1.0,"b":[2.0,2.5],"c":"3"}"#
        );
    }

    #[test]
    fn every_keyword_of_the_table_chooses_its_script() {
        for k in KEYWORDS {
            assert_eq!(choose(k.typed, None), k.script, "{}", k.typed);
        }
    }

    /// The keywords README's table of demo scripts lists (its first column), in order.
    fn readme_keywords(readme: &str) -> Vec<&str> {
        let at = readme
            .find("| Message | What the demo kernel does |")
            .expect("README's table of demo scripts");
        readme[at..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cell = l.split('|').nth(1).unwrap_or("").trim();
                cell.strip_prefix('`')
                    .and_then(|c| c.split('`').next())
                    .unwrap_or(cell)
            })
            .collect()
    }

    /// The keywords of the console's message placeholder (`try: a, b, …`), in order.
    fn placeholder_keywords(page: &str) -> Vec<&str> {
        let at = page
            .find("placeholder=\"Message (try: ")
            .expect("the placeholder");
        let rest = &page[at + "placeholder=\"Message (try: ".len()..];
        rest[..rest.find(")\"").expect("its end")]
            .split(", ")
            .collect()
    }

    // Regression (issue 57 item 9): the start-up line and the console's placeholder left out
    // `select`, `candidates` and `confirm`, and listed keywords README did not.
    #[test]
    fn readme_the_console_and_the_start_up_line_list_the_tables_keywords() {
        let listed = listed_keywords();
        assert!(listed.contains(&"select") && listed.contains(&"pipeline confirm"));
        let readme = include_str!("../../../README.md");
        assert_eq!(readme_keywords(readme), listed, "README.md");
        let page = include_str!("../../console.html");
        assert_eq!(placeholder_keywords(page), listed, "src/console.html");
    }

    #[test]
    fn script_keywords() {
        assert_eq!(choose("hello", None), Script::Plain);
        assert_eq!(choose("please ask a QUESTION", None), Script::Question);
        assert_eq!(choose("hi", Some("pipeline")), Script::Pipeline);
        assert_eq!(choose("select a vswitch", None), Script::Select);
        assert_eq!(
            choose("pipeline: select a vswitch", None),
            Script::PipelineSelect
        );
        assert_eq!(choose("pipeline candidates", None), Script::Candidates);
        assert_eq!(choose("flood 42", None), Script::Flood(42));
        assert_eq!(choose("pace 10 500", None), Script::Pace(10, 500));
        assert_eq!(choose("fault-die now", None), Script::Fault(Fault::Die));
    }
}
