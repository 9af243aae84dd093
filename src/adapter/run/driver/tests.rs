//! The run driver against an in-memory kernel and store: no sockets, a fixed clock and
//! counting ids. Each kernel answer is scripted; every call the driver makes is recorded.

use crate::principal::ThreadKey;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::a2a::A2aError;
use crate::a2a::client::{EventStream, Restore};
use crate::a2a::types::Payload;
use crate::adapter::AguiBackend;
use crate::adapter::rules::admission;
use crate::adapter::rules::env::TestEnv;
use crate::adapter::state::shared::Shared;
use crate::adapter::state::threads::{Registry, ThreadStore};
use crate::adapter::state::upstream::{Kernel, Upstream};
use crate::app::{Backend, RunRequest, RunStream};
use crate::config::AguiProtocol;
use crate::i18n::Lang;
use crate::server::job::{ConnId, Inbox, Reply, new_job};
use crate::store::document::ThreadDoc;
use crate::store::files::StoreError;
use crate::sync::lock;

const THREAD: &str = "th-unit";

/// What the fake kernel answers to one call.
enum Answer {
    Stream(Vec<Value>),
    Json(Value),
    Restore(Restore),
    Pipeline(Option<Value>),
    Down,
}

#[derive(Default)]
struct FakeKernel {
    script: Mutex<VecDeque<(&'static str, Answer)>>,
    calls: Mutex<Vec<(String, Value)>>,
    /// Runs once, when the first `SendStreamingMessage` arrives.
    on_first_send: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

struct FakeSession(Arc<FakeKernel>);

impl Kernel for Arc<FakeKernel> {
    fn session(&self) -> Box<dyn Upstream> {
        Box::new(FakeSession(self.clone()))
    }
}

fn payload(v: &Value) -> Payload {
    Payload::from_value(json!({"result": v, "id": "x", "jsonrpc": "2.0"}))
}

impl FakeSession {
    /// Record the call and take the next scripted answer, which must be for this method.
    fn next(&self, method: &str, arg: Value) -> Answer {
        lock(&self.0.calls).push((method.to_string(), arg));
        match lock(&self.0.script).pop_front() {
            Some((m, a)) if m == method => a,
            Some((m, a)) => {
                lock(&self.0.script).push_front((m, a));
                Answer::Down
            }
            None => Answer::Down,
        }
    }

    fn stream(&self, method: &str, arg: Value) -> Result<EventStream, A2aError> {
        match self.next(method, arg) {
            Answer::Stream(frames) => Ok(EventStream::from_payloads(
                frames.iter().map(payload).collect(),
            )),
            Answer::Json(v) => Ok(EventStream::from_payloads(vec![Payload::from_value(v)])),
            _ => Err(A2aError::Unavailable("scripted failure".into())),
        }
    }

    fn rpc(&self, method: &str, arg: Value) -> Result<Payload, A2aError> {
        match self.next(method, arg) {
            Answer::Json(v) => Ok(Payload::from_value(v)),
            _ => Err(A2aError::Unavailable("scripted failure".into())),
        }
    }
}

impl Upstream for FakeSession {
    fn send_streaming_message(&self, params: Value) -> Result<EventStream, A2aError> {
        if let Some(hook) = lock(&self.0.on_first_send).take() {
            hook();
        }
        self.stream("SendStreamingMessage", params)
    }
    fn send_message(&self, params: Value) -> Result<Payload, A2aError> {
        self.rpc("SendMessage", params)
    }
    fn get_task(&self, task_id: &str) -> Result<Payload, A2aError> {
        self.rpc("GetTask", json!(task_id))
    }
    fn cancel_task(&self, task_id: &str) -> Result<Payload, A2aError> {
        self.rpc("CancelTask", json!(task_id))
    }
    fn subscribe(&self, task_id: &str) -> Result<EventStream, A2aError> {
        self.stream("SubscribeToTask", json!(task_id))
    }
    fn ensure_restored(
        &self,
        _cwd: Option<&str>,
        session_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Result<Restore, A2aError> {
        match self.next("ensure_restored", json!([session_id, task_id])) {
            Answer::Restore(r) => Ok(r),
            _ => Err(A2aError::Unavailable("scripted failure".into())),
        }
    }
    fn pipeline_state(&self, task_id: &str, after: i64) -> Result<Option<Value>, A2aError> {
        match self.next("pipeline_state", json!([task_id, after])) {
            Answer::Pipeline(p) => Ok(p),
            _ => Err(A2aError::Unavailable("scripted failure".into())),
        }
    }
    fn aborter(&self) -> Box<dyn FnOnce() + Send> {
        Box::new(|| {})
    }
}

/// Thread documents in memory; saves fail while `fail` is set. Conversations in `files`.
#[derive(Default)]
struct MemStore {
    docs: Mutex<HashMap<ThreadKey, ThreadDoc>>,
    fail: std::sync::atomic::AtomicBool,
    #[cfg(feature = "threads")]
    files: Arc<crate::store::conversations::mem::MemFiles>,
}

impl ThreadStore for MemStore {
    fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        Ok(lock(&self.docs).get(key).cloned())
    }
    fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Io(std::io::Error::other("disk full (test)")));
        }
        let key = ThreadKey::new(&doc.owner, &doc.thread_id);
        lock(&self.docs).insert(key, doc.clone());
        Ok(())
    }
}

struct Harness {
    kernel: Arc<FakeKernel>,
    store: Arc<MemStore>,
    backend: AguiBackend,
    cwd: String,
}

impl Harness {
    fn new() -> Harness {
        let mem = Arc::new(MemStore::default());
        Harness::with(mem.clone(), mem, None)
    }

    /// `mem` is where saved documents can be read back; `store` is what the registry uses;
    /// `kernel` replaces the plain fake (its scripted part given first).
    fn with(
        mem: Arc<MemStore>,
        store: Arc<dyn ThreadStore>,
        kernel: Option<(Arc<FakeKernel>, Arc<dyn Kernel>)>,
    ) -> Harness {
        Harness::speaking(mem, store, kernel, AguiProtocol::V0_1)
    }

    fn v1() -> Harness {
        let mem = Arc::new(MemStore::default());
        Harness::speaking(mem.clone(), mem, None, AguiProtocol::V1_0)
    }

    fn speaking(
        mem: Arc<MemStore>,
        store: Arc<dyn ThreadStore>,
        kernel: Option<(Arc<FakeKernel>, Arc<dyn Kernel>)>,
        protocol: AguiProtocol,
    ) -> Harness {
        let (fake, kernel): (Arc<FakeKernel>, Arc<dyn Kernel>) = kernel.unwrap_or_else(|| {
            let f = Arc::new(FakeKernel::default());
            (f.clone(), Arc::new(f))
        });
        let root = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        // The client is never called: `kernel` answers instead.
        let client = crate::a2a::client::A2aClient::new(crate::a2a::client::A2aConfig::new(
            "http://127.0.0.1:9/".into(),
            None,
        ));
        let registry = Registry::new(store);
        #[cfg(feature = "threads")]
        let registry = registry.with_conversations(mem.files.clone());
        let shared = Shared::new(
            registry,
            client,
            Arc::new(TestEnv::new(1_700_000_000_000)),
            vec![root.clone()],
            None,
            protocol,
        )
        .with_kernel(kernel);
        Harness {
            kernel: fake,
            store: mem,
            backend: AguiBackend {
                shared: Arc::new(shared),
            },
            cwd: root.to_string_lossy().into_owned(),
        }
    }

    /// The kernel streams `frames` for the next `SendStreamingMessage`.
    fn turn(&self, frames: Vec<Value>) {
        self.script(vec![("SendStreamingMessage", Answer::Stream(frames))]);
    }

    fn script(&self, answers: Vec<(&'static str, Answer)>) {
        lock(&self.kernel.script).extend(answers);
    }

    fn calls(&self) -> Vec<String> {
        lock(&self.kernel.calls)
            .iter()
            .map(|(m, _)| m.clone())
            .collect()
    }

    fn call(&self, method: &str) -> Value {
        lock(&self.kernel.calls)
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, v)| v.clone())
            .unwrap_or(Value::Null)
    }

    fn doc(&self) -> ThreadDoc {
        lock(&self.store.docs)
            .get(&ThreadKey::shared(THREAD))
            .cloned()
            .unwrap()
    }

    fn body(&self, run: &str, text: &str, resume: Option<Value>) -> Value {
        let mut b = json!({"threadId": THREAD, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": format!("m-{run}"), "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "ros", "cwd": self.cwd}}});
        if let Some(r) = resume {
            b["messages"] = json!([]);
            b["resume"] = r;
        }
        b
    }

    /// Run one request through the backend; the events the driver sent, in order.
    fn run(&self, body: Value) -> Vec<Value> {
        let inbox = Inbox::new(Box::new(|| {}));
        let (job, outbox) = new_job(
            ConnId {
                slot: 0,
                generation: 0,
            },
            100_000,
            &inbox,
        );
        {
            let bytes = serde_json::to_vec(&body).unwrap();
            let req = RunRequest::parse(&bytes, Lang::En).unwrap();
            let mut stream = RunStream::new(
                &outbox,
                req.thread_id.clone(),
                req.run_id.clone(),
                req.payload_lang,
                self.backend.shared.env.clone(),
            );
            self.backend.run(Box::new(req), &mut stream);
        }
        let mut replies = Vec::new();
        job.drain(usize::MAX, usize::MAX, &mut replies);
        let mut events = Vec::new();
        for r in replies {
            match r {
                Reply::Event(data) => {
                    let text = String::from_utf8(data.to_vec()).unwrap();
                    let (id, json) = text.split_once('\n').unwrap();
                    assert_eq!(id, format!("id: {}", events.len()), "events are numbered");
                    let json = json.strip_prefix("data: ").unwrap().trim_end();
                    events.push(serde_json::from_str(json).unwrap());
                }
                Reply::Response(resp) => panic!(
                    "refused: {} {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                ),
                Reply::StartStream(_) | Reply::EndStream => {}
            }
        }
        events
    }
}

fn ctx() -> String {
    admission::context_id(THREAD)
}

fn task(state: &str) -> Value {
    json!({"task": {"id": "task-1", "contextId": ctx(), "status": {"state": state}}})
}

fn status(state: &str, iac: Value) -> Value {
    json!({"statusUpdate": {"taskId": "task-1", "contextId": ctx(), "status": {"state": state}, "metadata": {"iac_code": iac}}})
}

fn text(t: &str) -> Value {
    json!({"statusUpdate": {"taskId": "task-1", "contextId": ctx(), "status": {"state": "TASK_STATE_WORKING",
        "message": {"messageId": "task-1-1", "role": "ROLE_AGENT", "parts": [{"text": t}]}},
        "metadata": {"iac_code": {"iacCodeSessionId": "sess-1", "textDelta": true}}}})
}

fn permission(id: &str) -> Value {
    json!({"kind": "permission", "inputId": id, "requestTaskId": "task-1", "contextId": ctx(),
        "toolUseId": format!("tool-{id}"), "prompt": "Allow?", "required": true})
}

fn question(id: &str) -> Value {
    json!({"kind": "ask_user_question", "inputId": id, "requestTaskId": "task-1", "contextId": ctx(),
        "prompt": "Pick", "options": [{"id": "a", "label": "Alpha"}], "required": true, "toolUseId": format!("tool-{id}")})
}

/// The first frame of a permission-answer stream.
fn permission_received(id: &str) -> Value {
    status(
        "TASK_STATE_WORKING",
        json!({"inputReceived": {"kind": "permission", "inputId": id}}),
    )
}

fn snapshot(state: &str, iac: Value) -> Value {
    json!({"id": "task-1", "contextId": ctx(), "status": {"state": state}, "metadata": {"iac_code": iac}})
}

fn rpc_result(v: Value) -> Value {
    json!({"result": v, "id": "x", "jsonrpc": "2.0"})
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn last(events: &[Value]) -> &Value {
    events.last().unwrap()
}

fn interrupt_ids(events: &[Value]) -> Vec<String> {
    last(events)["outcome"]["interrupts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A first run that stops at `input`.
fn interrupted_first_run(h: &Harness, input: Value) {
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        status(
            "TASK_STATE_INPUT_REQUIRED",
            json!({"iacCodeSessionId": "sess-1", "input": input}),
        ),
    ]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(last(&ev)["outcome"]["type"], "interrupt");
}

/// The calls a resume makes before it delivers answers.
fn resume_preamble(iac: Value) -> Vec<(&'static str, Answer)> {
    vec![
        ("ensure_restored", Answer::Restore(Restore::Current)),
        (
            "GetTask",
            Answer::Json(rpc_result(
                json!({"task": snapshot("TASK_STATE_INPUT_REQUIRED", iac)}),
            )),
        ),
        ("pipeline_state", Answer::Pipeline(None)),
    ]
}

#[test]
fn a_new_turn_streams_text_and_retires_its_execution() {
    let h = Harness::new();
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        text("Hello"),
        status(
            "TASK_STATE_COMPLETED",
            json!({"iacCodeSessionId": "sess-1"}),
        ),
    ]);
    let ev = h.run(h.body("r1", "hi", None));
    assert_eq!(
        types(&ev),
        [
            "RUN_STARTED",
            "CUSTOM",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(ev[1]["value"]["taskId"], "task-1");
    assert_eq!(ev[1]["value"]["sessionId"], "sess-1");
    assert_eq!(ev[3]["delta"], "Hello");
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    let sent = h.call("SendStreamingMessage");
    assert_eq!(sent["message"]["messageId"], "m-r1");
    assert_eq!(sent["message"]["contextId"], ctx());
    assert!(sent["message"].get("taskId").is_none());
    let doc = h.doc();
    assert!(doc.terminal.contains(&doc.execution.execution_id));
    assert_eq!(doc.execution.task_id, None);
    assert_eq!(doc.session_id.as_deref(), Some("sess-1"));
    assert_eq!(h.calls(), ["SendStreamingMessage"]);
}

/// Issue 36 (1.0 request rules): `context[]` reaches the model, as a text part after the
/// user's (the kernel joins text parts into the user turn); not in 0.1 mode (the reference
/// ignores it), and not on a message the kernel reads as a command.
#[test]
fn context_reaches_the_kernel_as_a_text_part_after_the_message_in_1_0_mode() {
    let plain = || {
        (
            "SendStreamingMessage",
            Answer::Stream(vec![
                task("TASK_STATE_SUBMITTED"),
                text("Hello"),
                status(
                    "TASK_STATE_COMPLETED",
                    json!({"iacCodeSessionId": "sess-1"}),
                ),
            ]),
        )
    };
    let context = json!([
        {"description": "Selected stack", "value": "vpc-prod"},
        {"description": "Region", "value": "cn-hangzhou"}
    ]);
    let h = Harness::v1();
    h.script(vec![plain()]);
    let mut b = h.body("r1", "hi", None);
    b["context"] = context.clone();
    let ev = h.run(b);
    assert_eq!(last(&ev)["outcome"]["type"], "success");
    let parts = h.call("SendStreamingMessage")["message"]["parts"].clone();
    assert_eq!(
        parts,
        json!([{"text": "hi"}, {"text": "Context from the application (not typed by the user):\n- Selected stack: vpc-prod\n- Region: cn-hangzhou"}])
    );
    let old = Harness::new();
    old.script(vec![plain()]);
    let mut b = old.body("r1", "hi", None);
    b["context"] = context.clone();
    old.run(b);
    assert_eq!(
        old.call("SendStreamingMessage")["message"]["parts"],
        json!([{"text": "hi"}])
    );
    let cmd = Harness::v1();
    cmd.script(vec![plain()]);
    let mut b = cmd.body("r1", "/deploy now", None);
    b["context"] = context;
    let ev = cmd.run(b);
    assert_eq!(
        cmd.call("SendStreamingMessage")["message"]["parts"],
        json!([{"text": "/deploy now"}])
    );
    let notice = ev
        .iter()
        .find(|e| e["name"] == "iac-code.input.skipped.v1")
        .unwrap();
    assert_eq!(
        notice["value"]["skipped"][1],
        json!({"part": 1, "type": "context", "reason": "context-on-command"})
    );
}

#[test]
fn an_interrupt_is_persisted_before_it_is_announced() {
    let h = Harness::new();
    interrupted_first_run(&h, permission("p1"));
    let doc = h.doc();
    assert_eq!(doc.execution.task_id.as_deref(), Some("task-1"));
    assert_eq!(doc.execution.pending.len(), 1);
    assert_eq!(doc.execution.pending[0].0, "p1");
    assert!(!doc.terminal.contains(&doc.execution.execution_id));
}

#[test]
fn a_resume_delivers_the_permission_and_follows_the_turn() {
    let h = Harness::new();
    interrupted_first_run(&h, permission("p1"));
    let mut script =
        resume_preamble(json!({"iacCodeSessionId": "sess-1", "input": permission("p1")}));
    script.push((
        "SendStreamingMessage",
        Answer::Stream(vec![
            permission_received("p1"),
            status(
                "TASK_STATE_WORKING",
                json!({"tool": {"status": "completed", "toolUseId": "tool-p1", "result": "done"}, "iacCodeSessionId": "sess-1"}),
            ),
            status("TASK_STATE_COMPLETED", json!({"iacCodeSessionId": "sess-1"})),
        ]),
    ));
    h.script(script);
    let resume =
        json!([{"interruptId": "p1", "status": "resolved", "payload": {"decision": "allow_once"}}]);
    let ev = h.run(h.body("r2", "", Some(resume)));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
    assert!(ev.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"));
    assert_eq!(
        h.calls()[1..],
        [
            "ensure_restored",
            "GetTask",
            "pipeline_state",
            "SendStreamingMessage"
        ]
    );
    let sent = &lock(&h.kernel.calls)[4].1;
    assert_eq!(sent["message"]["taskId"], "task-1");
    assert_eq!(
        sent["message"]["parts"][0]["data"],
        json!({"schemaVersion": 1, "kind": "permission", "requestTaskId": "task-1", "inputId": "p1", "toolUseId": "tool-p1", "decision": "allow_once"})
    );
    let doc = h.doc();
    assert!(doc.execution.pending.is_empty());
    assert!(
        doc.applied
            .contains_key(&(doc.execution.execution_id.clone(), "p1".to_string()))
    );
}

#[test]
fn a_mixed_resume_whose_first_answer_repeats_the_permission_ends_in_success() {
    let h = Harness::new();
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        status(
            "TASK_STATE_INPUT_REQUIRED",
            json!({"iacCodeSessionId": "sess-1", "input": question("q1"), "pendingPermissions": [permission("p1")]}),
        ),
    ]);
    let ev = h.run(h.body("r1", "go", None));
    assert_eq!(interrupt_ids(&ev), ["q1", "p1"]);
    let mut script = resume_preamble(
        json!({"iacCodeSessionId": "sess-1", "input": question("q1"), "pendingPermissions": [permission("p1")]}),
    );
    let repeat = |state: &str| {
        status(
            state,
            json!({"iacCodeSessionId": "sess-1", "pendingPermissions": [permission("p1")]}),
        )
    };
    script.push((
        "SendStreamingMessage",
        Answer::Stream(vec![
            status(
                "TASK_STATE_WORKING",
                json!({"inputReceived": {"inputId": "q1"}}),
            ),
            repeat("TASK_STATE_INPUT_REQUIRED"),
        ]),
    ));
    script.push((
        "SendStreamingMessage",
        Answer::Stream(vec![
            permission_received("p1"),
            status(
                "TASK_STATE_COMPLETED",
                json!({"iacCodeSessionId": "sess-1"}),
            ),
        ]),
    ));
    h.script(script);
    let both = json!([
        {"interruptId": "q1", "status": "resolved", "payload": {"selectedId": "a"}},
        {"interruptId": "p1", "status": "resolved", "payload": {"decision": "allow_once"}},
    ]);
    let ev = h.run(h.body("r2", "", Some(both)));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{:?}", last(&ev));
    assert!(h.doc().execution.pending.is_empty());
}

#[test]
fn new_interrupts_found_by_the_snapshot_end_the_resume_listing_all() {
    let h = Harness::new();
    interrupted_first_run(&h, question("q1"));
    h.script(resume_preamble(
        json!({"iacCodeSessionId": "sess-1", "input": permission("p1")}),
    ));
    let resume =
        json!([{"interruptId": "q1", "status": "resolved", "payload": {"selectedId": "a"}}]);
    let ev = h.run(h.body("r2", "", Some(resume)));
    assert_eq!(interrupt_ids(&ev), ["q1", "p1"]);
    // Nothing was delivered: the client has to see the new interrupt first.
    assert_eq!(
        h.calls(),
        [
            "SendStreamingMessage",
            "ensure_restored",
            "GetTask",
            "pipeline_state"
        ]
    );
}

#[cfg(feature = "threads")]
mod conversation;
mod endings;
mod stops;

/// Regression (outside review of issue 36, fault 6): a panic inside a run became its one
/// `RUN_ERROR`, but the thread stayed held by the dead run, so every later turn got
/// `409 THREAD_BUSY` until a restart. Now the run fails closed and frees its thread.
#[test]
fn a_run_that_panics_frees_its_thread_for_the_next_turn() {
    let h = Harness::new();
    *lock(&h.kernel.on_first_send) = Some(Box::new(|| panic!("scripted panic inside a run")));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        h.run(h.body("r1", "hi", None))
    }));
    assert!(panicked.is_err(), "the scripted panic reached the run");
    let doc = h.doc();
    assert!(
        doc.terminal.contains(&doc.execution.execution_id),
        "retired"
    );
    h.turn(vec![
        task("TASK_STATE_SUBMITTED"),
        text("Hello again"),
        status("TASK_STATE_COMPLETED", json!({})),
    ]);
    let ev = h.run(h.body("r2", "again", None));
    assert_eq!(last(&ev)["outcome"]["type"], "success", "{ev:?}");
}
