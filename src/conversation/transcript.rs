//! A thread's conversation as AG-UI 1.0 `Message` objects: what a stock client
//! (`@ag-ui/client` 1.0 `HttpAgent`, its `defaultApplyEvents`) builds from the stream, kept by
//! the server so that a new tab, a new device or a client that lost its copy gets it back.
//!
//! Pure: a run's events recorded (`Ops`) and applied with the client's rules
//! (`Transcript::apply`), and the bounds. The whole-file form of earlier versions
//! (`<stem>~history.json`, `Transcript::from_bytes`) is read once and migrated to the log
//! (`super::log`).

use serde_json::{Map, Value, json};

use crate::agui::events::Event;

/// The file format's version; a newer one is refused (contained to its thread).
pub const SCHEMA_VERSION: u64 = 1;

/// The id of the marker that stands for dropped messages (the first message when any were).
pub const TRIMMED_ID: &str = "iac-agui-history-trimmed";

/// Why a transcript file is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConversationError {
    Json(String),
    /// Written by a newer iac-agui.
    Future(u64),
    /// Another thread's, or not a transcript at all.
    Foreign(&'static str),
}

impl std::fmt::Display for ConversationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConversationError::Json(e) => write!(f, "the history file is not JSON: {e}"),
            ConversationError::Future(v) => write!(
                f,
                "the history file has schema version {v}, newer than this iac-agui reads"
            ),
            ConversationError::Foreign(why) => write!(f, "the history file is refused: {why}"),
        }
    }
}

impl std::error::Error for ConversationError {}

/// The bounds of one thread's transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_messages: usize,
    pub max_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_messages: super::limits::HISTORY_MAX_MESSAGES,
            max_bytes: super::limits::HISTORY_MAX_BYTES,
        }
    }
}

/// A thread's stored conversation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transcript {
    pub thread_id: String,
    /// Unix milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
    /// Messages dropped from the front by the bounds, all told.
    pub dropped: u64,
    /// The ids of the most recently dropped messages (at most `limits::HISTORY_DROPPED_IDS`):
    /// a client that restates its whole history sends them again, and they must not come
    /// back as new.
    pub dropped_ids: std::collections::VecDeque<String>,
    /// The title a person gave the thread (`PATCH /threads/{id}`), in place of the one its
    /// first user message gives.
    pub renamed: Option<String>,
    pub messages: Vec<Value>,
}

pub(super) fn is_message(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        o.get("id")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
            && o.get("role").and_then(Value::as_str).is_some()
    })
}

impl Transcript {
    pub fn new(thread_id: &str, now_ms: u64) -> Transcript {
        Transcript {
            thread_id: thread_id.to_string(),
            created_at: now_ms,
            updated_at: now_ms,
            dropped: 0,
            dropped_ids: Default::default(),
            renamed: None,
            messages: Vec::new(),
        }
    }

    /// Read a file for `thread_id`: strict, so a damaged or foreign file is refused whole.
    pub fn from_bytes(bytes: &[u8], thread_id: &str) -> Result<Transcript, ConversationError> {
        let t = Transcript::read(bytes)?;
        if t.thread_id != thread_id {
            return Err(ConversationError::Foreign("another thread's"));
        }
        Ok(t)
    }

    /// Read a file, whichever thread it names.
    pub fn read(bytes: &[u8]) -> Result<Transcript, ConversationError> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| ConversationError::Json(e.to_string()))?;
        let o = v
            .as_object()
            .ok_or(ConversationError::Foreign("not an object"))?;
        match o.get("schemaVersion").and_then(Value::as_u64) {
            Some(SCHEMA_VERSION) => {}
            Some(n) if n > SCHEMA_VERSION => return Err(ConversationError::Future(n)),
            _ => return Err(ConversationError::Foreign("no known schemaVersion")),
        }
        let Some(thread_id) = o.get("threadId").and_then(Value::as_str) else {
            return Err(ConversationError::Foreign("no threadId"));
        };
        let num = |k: &str| o.get(k).and_then(Value::as_u64);
        let (Some(created_at), Some(updated_at), Some(dropped)) =
            (num("createdAt"), num("updatedAt"), num("dropped"))
        else {
            return Err(ConversationError::Foreign("a count or time is missing"));
        };
        let messages = match o.get("messages") {
            Some(Value::Array(m)) if m.iter().all(is_message) => m.clone(),
            _ => {
                return Err(ConversationError::Foreign(
                    "messages must be AG-UI messages",
                ));
            }
        };
        Ok(Transcript {
            thread_id: thread_id.to_string(),
            created_at,
            updated_at,
            dropped,
            dropped_ids: Default::default(),
            renamed: None,
            messages,
        })
    }

    /// The whole-file form of schema version 1 (what earlier versions wrote; tests and the
    /// fuzz target's round trip).
    pub fn to_bytes(&self) -> Vec<u8> {
        let v = json!({
            "schemaVersion": SCHEMA_VERSION,
            "threadId": self.thread_id,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "dropped": self.dropped,
            "messages": self.messages,
        });
        let mut out = serde_json::to_vec(&v).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// The title a person gave it, else the start of the first user message's text, for
    /// listings.
    pub fn title(&self) -> String {
        if let Some(t) = &self.renamed {
            return t.clone();
        }
        let text = self
            .messages
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => String::new(),
            })
            .unwrap_or_default();
        let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        match line.char_indices().nth(super::limits::HISTORY_TITLE_CHARS) {
            Some((i, _)) => format!("{}…", &line[..i]),
            None => line,
        }
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.messages.iter().position(|m| m["id"] == id)
    }

    /// The request's messages the transcript does not hold yet and never dropped, as the
    /// client's `RUN_STARTED` handling adds them (by id, in order); images kept as a
    /// reference only.
    pub fn add_input(&mut self, messages: &[Value]) {
        for m in messages.iter().filter(|m| is_message(m)) {
            let id = m["id"].as_str().unwrap_or_default();
            if self.position(id).is_none() && !self.dropped_ids.iter().any(|d| d == id) {
                self.messages.push(without_bytes(m));
            }
        }
    }

    /// The request's messages as a conversation keeps them: AG-UI messages only, images
    /// and files as references (their bytes are never stored).
    pub fn storable(messages: &[Value]) -> Vec<Value> {
        messages
            .iter()
            .filter(|m| is_message(m))
            .map(without_bytes)
            .collect()
    }

    /// Ids the conversation knows: the messages held, then those the bounds dropped
    /// (admission keeps only the request's new ones).
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.messages
            .iter()
            .filter_map(|m| m["id"].as_str())
            .chain(self.dropped_ids.iter().map(String::as_str))
    }

    /// Apply run `run_id`'s recorded events with the client's rules. A message the run opens
    /// under an id an earlier run used is a new one named as 1.0 mode names it
    /// (`agui::dialect::run_scope`): 0.1 mode keeps the kernel's id across a resume, and the text after a
    /// permission must not join the text before it, above the tool's result.
    pub fn apply(&mut self, ops: &Ops, run_id: &str) {
        let mut run = RunIds::default();
        for op in &ops.ops {
            self.apply_one(op, run_id, &mut run);
        }
    }

    fn apply_one(&mut self, op: &Op, run_id: &str, run: &mut RunIds) {
        match op {
            Op::Open { id, role } => {
                let mut id = run.named(id).to_string();
                if self.position(&id).is_some() && !run.made.contains(&id) {
                    let fresh = format!("{id}.{}", crate::agui::dialect::run_scope(run_id));
                    run.renamed.push((id, fresh.clone()));
                    id = fresh;
                }
                if self.position(&id).is_none() {
                    self.messages
                        .push(json!({"id": id, "role": role, "content": ""}));
                    run.made.push(id);
                }
            }
            Op::Append { id, delta } => {
                if let Some(i) = self.position(run.named(id))
                    && let Some(Value::String(c)) = self.messages[i].get_mut("content")
                {
                    c.push_str(delta);
                }
            }
            Op::ToolStart { id, name, parent } => {
                let parent = parent.as_deref().map(|p| run.named(p).to_string());
                if let Some(made) = self.tool_start(id, name, parent.as_deref()) {
                    run.made.push(made);
                }
            }
            Op::ToolArgs { id, delta } => {
                if let Some(f) = self.tool_call(id).and_then(|c| c.get_mut("function"))
                    && let Some(Value::String(a)) = f.get_mut("arguments")
                {
                    a.push_str(delta);
                }
            }
            Op::ToolResult { id, content } => {
                let msg = json!({"id": format!("tool-result-{id}"), "toolCallId": id,
                    "role": "tool", "content": content});
                let owner = self.messages.iter().position(|m| {
                    m["role"] == "assistant" && calls(m).iter().any(|c| c["id"] == **id)
                });
                match owner {
                    None => self.messages.push(msg),
                    Some(i) => {
                        let mut at = i + 1;
                        while at < self.messages.len() && self.messages[at]["role"] == "tool" {
                            at += 1;
                        }
                        self.messages.insert(at, msg);
                    }
                }
            }
            Op::Activity { id, kind, content } => {
                let msg = json!({"id": id, "role": "activity", "activityType": kind,
                    "content": content});
                match self.position(id) {
                    Some(i) => self.messages[i] = msg,
                    None => self.messages.push(msg),
                }
            }
        }
    }

    fn tool_call(&mut self, id: &str) -> Option<&mut Value> {
        self.messages
            .iter_mut()
            .filter_map(|m| m.get_mut("toolCalls").and_then(Value::as_array_mut))
            .flat_map(|calls| calls.iter_mut())
            .find(|c| c["id"] == id)
    }

    /// `TOOL_CALL_START`: the call goes into its parent assistant message (made when
    /// missing, named after the parent, or after the call when the parent id names
    /// another role's message). The id of the message made, if one was.
    fn tool_start(&mut self, id: &str, name: &str, parent: Option<&str>) -> Option<String> {
        if let Some(call) = self.tool_call(id) {
            call["function"]["name"] = json!(name);
            return None;
        }
        let mut made = None;
        let at = match parent.and_then(|p| self.position(p)) {
            Some(i) if self.messages[i]["role"] == "assistant" => i,
            found => {
                let mid = match (parent, found) {
                    (Some(p), None) => p,
                    _ => id,
                };
                self.messages
                    .push(json!({"id": mid, "role": "assistant", "toolCalls": []}));
                made = Some(mid.to_string());
                self.messages.len() - 1
            }
        };
        let call = json!({"id": id, "type": "function",
            "function": {"name": name, "arguments": ""}});
        let m = &mut self.messages[at];
        match m.get_mut("toolCalls").and_then(Value::as_array_mut) {
            Some(calls) => calls.push(call),
            None => m["toolCalls"] = json!([call]),
        }
        made
    }

    /// Drop the oldest messages beyond the bounds; a marker (a system message, first)
    /// says how many are gone.
    pub fn bound(&mut self, b: Bounds) {
        if self.messages.first().is_some_and(|m| m["id"] == TRIMMED_ID) {
            self.messages.remove(0);
        }
        let sizes: Vec<usize> = self.messages.iter().map(json_len).collect();
        let mut bytes: usize = sizes.iter().sum();
        let mut cut = 0;
        while cut < self.messages.len()
            && (self.messages.len() - cut > b.max_messages || bytes > b.max_bytes)
        {
            bytes -= sizes[cut];
            cut += 1;
        }
        for m in self.messages.drain(..cut) {
            if let Some(id) = m["id"].as_str() {
                self.dropped_ids.push_back(id.to_string());
            }
        }
        let mut id_bytes: usize = self.dropped_ids.iter().map(String::len).sum();
        while self.dropped_ids.len() > super::limits::HISTORY_DROPPED_IDS
            || id_bytes > super::limits::HISTORY_DROPPED_ID_BYTES
        {
            match self.dropped_ids.pop_front() {
                Some(old) => id_bytes -= old.len(),
                None => break,
            }
        }
        self.dropped = self.dropped.saturating_add(cut as u64);
        if self.dropped > 0 {
            self.messages.insert(
                0,
                json!({"id": TRIMMED_ID, "role": "system", "content":
                    format!("[{} earlier messages are no longer kept by the server]", self.dropped)}),
            );
        }
    }
}

/// The message ids one run's ops made, and the ones it renamed (`Transcript::apply`).
#[derive(Default)]
struct RunIds {
    made: Vec<String>,
    renamed: Vec<(String, String)>,
}

impl RunIds {
    fn named<'a>(&'a self, id: &'a str) -> &'a str {
        self.renamed
            .iter()
            .find(|(from, _)| from == id)
            .map_or(id, |(_, to)| to.as_str())
    }
}

/// The length of `v` as compact JSON, counted without building it.
pub(super) fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

fn calls(m: &Value) -> &[Value] {
    m.get("toolCalls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A message without image or file bytes: a `binary`/`image` part keeps its type, mime type
/// and URL or id, and its inline data becomes a placeholder.
fn without_bytes(m: &Value) -> Value {
    let mut m = m.clone();
    if let Some(Value::Array(parts)) = m.get_mut("content") {
        for p in parts.iter_mut() {
            strip(p);
        }
    }
    m
}

fn strip(p: &mut Value) {
    let Some(o) = p.as_object_mut() else {
        return;
    };
    if o.get("data").is_some_and(Value::is_string) {
        o.insert("data".into(), json!("[not kept]"));
    }
    if let Some(Value::Object(src)) = o.get_mut("source") {
        strip_source(src);
    }
}

fn strip_source(src: &mut Map<String, Value>) {
    if src.get("type").and_then(Value::as_str) == Some("data") || src.contains_key("value") {
        src.insert("value".into(), json!("[not kept]"));
    }
    if src.get("data").is_some_and(Value::is_string) {
        src.insert("data".into(), json!("[not kept]"));
    }
}

/// What a run's events do to the conversation, compacted (consecutive deltas of one
/// message or call are one string): only these are kept during the run, not the events.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Open {
        id: String,
        role: &'static str,
    },
    Append {
        id: String,
        delta: String,
    },
    ToolStart {
        id: String,
        name: String,
        parent: Option<String>,
    },
    ToolArgs {
        id: String,
        delta: String,
    },
    ToolResult {
        id: String,
        content: String,
    },
    Activity {
        id: String,
        kind: &'static str,
        content: Value,
    },
}

/// A run's recorded conversation changes, holding at most `cap` bytes of text: a run's text
/// stays in memory until its end, so it is bounded like the conversation it goes into (the
/// rest of a longer text is cut, marked).
#[derive(Debug, Clone, PartialEq)]
pub struct Ops {
    ops: Vec<Op>,
    bytes: usize,
    cap: usize,
    cut: bool,
}

impl Default for Ops {
    fn default() -> Ops {
        Ops::with_cap(super::limits::HISTORY_MAX_BYTES)
    }
}

/// The activity type of a pipeline's snapshot message.
const PIPELINE_ACTIVITY: &str = "iac-code.pipeline.v1";

/// What replaces text past the cap (once per run).
pub const CUT_MARK: &str = " […]";

impl Ops {
    pub fn with_cap(cap: usize) -> Ops {
        Ops {
            ops: Vec::new(),
            bytes: 0,
            cap,
            cut: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The ops as the log keeps them: one array per op, its tag first.
    pub(crate) fn to_json(&self) -> Value {
        let ops = self.ops.iter().map(|op| match op {
            Op::Open { id, role } => json!(["open", id, role]),
            Op::Append { id, delta } => json!(["text", id, delta]),
            Op::ToolStart { id, name, parent } => json!(["tool", id, name, parent]),
            Op::ToolArgs { id, delta } => json!(["args", id, delta]),
            Op::ToolResult { id, content } => json!(["result", id, content]),
            Op::Activity { id, kind, content } => json!(["activity", id, kind, content]),
        });
        Value::Array(ops.collect())
    }

    /// Read back what `to_json` wrote; `None` for anything else (a damaged log).
    pub(crate) fn from_json(v: &Value) -> Option<Ops> {
        let s = |v: &Value| v.as_str().map(str::to_string);
        let mut ops = Vec::new();
        for op in v.as_array()? {
            let a = op.as_array()?;
            let (tag, id) = (a.first()?.as_str()?, s(a.get(1)?)?);
            let op = match (tag, a.len()) {
                ("open", 3) => Op::Open {
                    id,
                    role: match a[2].as_str()? {
                        "assistant" => "assistant",
                        "reasoning" => "reasoning",
                        _ => return None,
                    },
                },
                ("text", 3) => Op::Append {
                    id,
                    delta: s(&a[2])?,
                },
                ("tool", 4) => Op::ToolStart {
                    id,
                    name: s(&a[2])?,
                    parent: match &a[3] {
                        Value::Null => None,
                        p => Some(s(p)?),
                    },
                },
                ("args", 3) => Op::ToolArgs {
                    id,
                    delta: s(&a[2])?,
                },
                ("result", 3) => Op::ToolResult {
                    id,
                    content: s(&a[2])?,
                },
                ("activity", 4) if a[2] == PIPELINE_ACTIVITY => Op::Activity {
                    id,
                    kind: PIPELINE_ACTIVITY,
                    content: a[3].clone(),
                },
                _ => return None,
            };
            ops.push(op);
        }
        Some(Ops {
            ops,
            ..Ops::default()
        })
    }

    /// `text` as far as the cap allows, and whether it was cut there (then nothing more is
    /// kept). Borrowed: a delta is copied once, into its message's text.
    fn within_cap<'t>(&mut self, text: &'t str) -> Option<(&'t str, bool)> {
        if self.cut {
            return None;
        }
        let room = self.cap.saturating_sub(self.bytes);
        if text.len() <= room {
            self.bytes += text.len();
            return Some((text, false));
        }
        self.cut = true;
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes = self.cap;
        Some((&text[..end], true))
    }

    /// Append `delta` to message `id`'s text (`tool`: to call `id`'s arguments): to the last
    /// op when it is that one's, else in a new op.
    fn append(&mut self, delta: &str, id: &str, tool: bool) {
        let Some((part, cut)) = self.within_cap(delta) else {
            return;
        };
        let mark = if cut { CUT_MARK } else { "" };
        match self.ops.last_mut() {
            Some(Op::Append { id: i, delta: d }) if !tool && i == id => {
                d.push_str(part);
                d.push_str(mark);
                return;
            }
            Some(Op::ToolArgs { id: i, delta: d }) if tool && i == id => {
                d.push_str(part);
                d.push_str(mark);
                return;
            }
            _ => {}
        }
        let mut text = String::with_capacity(part.len() + mark.len());
        text.push_str(part);
        text.push_str(mark);
        let id = id.to_string();
        self.ops.push(if tool {
            Op::ToolArgs { id, delta: text }
        } else {
            Op::Append { id, delta: text }
        });
    }

    /// Record one event of the run (events that change no message are ignored).
    pub(crate) fn record(&mut self, e: &Event) {
        let op = match e {
            Event::TextStart { message_id } => Op::Open {
                id: message_id.clone(),
                role: "assistant",
            },
            Event::ReasoningMessageStart { message_id } => Op::Open {
                id: message_id.clone(),
                role: "reasoning",
            },
            Event::TextContent { message_id, delta }
            | Event::ReasoningContent { message_id, delta } => {
                return self.append(delta, message_id, false);
            }
            Event::ToolStart {
                tool_call_id,
                name,
                parent_message_id,
            } => Op::ToolStart {
                id: tool_call_id.clone(),
                name: name.clone(),
                parent: parent_message_id.clone(),
            },
            Event::ToolArgs {
                tool_call_id,
                delta,
            } => {
                return self.append(delta, tool_call_id, true);
            }
            Event::ToolResult {
                tool_call_id,
                content,
            } => Op::ToolResult {
                id: tool_call_id.clone(),
                content: match self.within_cap(content) {
                    Some((part, cut)) => format!("{part}{}", if cut { CUT_MARK } else { "" }),
                    None => CUT_MARK.trim().into(),
                },
            },
            Event::ActivitySnapshot {
                pipeline_run_id,
                snapshot,
            } => Op::Activity {
                id: format!("pipeline:{pipeline_run_id}"),
                kind: PIPELINE_ACTIVITY,
                content: json!({"schemaVersion": 1, "pipelineRunId": pipeline_run_id,
                    "snapshot": snapshot}),
            },
            _ => return,
        };
        self.ops.push(op);
    }
}

#[cfg(test)]
mod tests;
