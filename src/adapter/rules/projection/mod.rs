//! A2A → AG-UI projection (reference §5.3–§5.9) as a deterministic state machine: one
//! `Mapper` per run, fed A2A objects, producing stamped AG-UI events. Time and generated ids
//! come from [`Env`]; nothing here does I/O.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::a2a::types::{A2aEvent, as_int, parts_text};
use crate::adapter::rules::env::Env;
use crate::agui::events::{Event, Stamped, Usage};
use crate::json;

/// Pipeline event types forwarded as `CUSTOM iac-code.pipeline.v1` (§5.6).
pub(crate) const PIPELINE_CUSTOM: &[&str] = &[
    "backup_blocked",
    "candidate_completed",
    "candidate_detail_shown",
    "candidate_failed",
    "candidate_interrupted",
    "candidate_restart_requested",
    "candidate_selected",
    "candidate_started",
    "candidate_step_failed",
    "cleanup_completed",
    "cleanup_failed",
    "cleanup_progress",
    "cleanup_started",
    "context_compacted",
    "context_compaction_failed",
    "context_compaction_started",
    "diagram_shown",
    "fields_marked_stale",
    "mcp_status",
    "pipeline_completed",
    "pipeline_error",
    "pipeline_resumed",
    "pipeline_started",
    "pipeline_warning",
    "rollback_completed",
    "rollback_triggered",
    "stack_current_changed",
    "stack_instances_progress",
    "stack_progress",
    "step_failed",
    "sub_pipeline_completed",
    "sub_pipeline_started",
    "sub_step_failed",
    "tool_progress",
];

fn non_empty(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn truthy(v: Option<&Value>) -> bool {
    crate::adapter::rules::interrupts::truthy(v)
}

pub struct Mapper<'e> {
    env: &'e dyn Env,
    run_id: String,
    pub(crate) pipeline_run_id: String,
    // The sets and maps are B-trees, not hashes: 24 bytes inline against 48, in a value that
    // lives on the heap as long as its stream (docs/performance.md), for a handful of ids.
    // text
    open_texts: Vec<String>,
    current: Option<String>,
    /// Per message, the running SHA-256 of its text so far (for the snapshot digest at its
    /// close): constant memory however long the answer grows.
    buffers: BTreeMap<String, TextHash>,
    pub(crate) text_emitted: bool,
    replay_checked: BTreeSet<String>,
    /// Durable digests of finalized text snapshots (persisted with the execution).
    pub(crate) text_digests: BTreeSet<String>,
    // reasoning and tools
    open_reasoning: BTreeSet<String>,
    open_tools: BTreeSet<String>,
    results_sent: BTreeSet<String>,
    // pipeline
    seen_events: BTreeSet<String>,
    pub(crate) last_sequence: i64,
    /// Durable open steps (persisted); `run_steps` are those opened in this run.
    pub(crate) open_steps: BTreeSet<String>,
    run_steps: BTreeSet<String>,
    // usage in first-seen order
    usage: Vec<Usage>,
    out: Vec<Stamped>,
    /// AG-UI 1.0: a suffix that makes the kernel's message ids this run's own. The kernel
    /// reuses one message id for a whole task, so a resume's answer would otherwise append to
    /// the interrupted run's message in the client (above the tool result).
    message_scope: Option<String>,
}

impl<'e> Mapper<'e> {
    pub fn new(
        env: &'e dyn Env,
        thread_id: &str,
        run_id: &str,
        open_steps: BTreeSet<String>,
        text_digests: BTreeSet<String>,
    ) -> Mapper<'e> {
        Mapper {
            env,
            run_id: run_id.into(),
            pipeline_run_id: format!("pipeline-{thread_id}"),
            open_texts: Vec::new(),
            current: None,
            buffers: BTreeMap::new(),
            text_emitted: false,
            replay_checked: BTreeSet::new(),
            text_digests,
            open_reasoning: BTreeSet::new(),
            open_tools: BTreeSet::new(),
            results_sent: BTreeSet::new(),
            seen_events: BTreeSet::new(),
            last_sequence: 0,
            open_steps,
            run_steps: BTreeSet::new(),
            usage: Vec::new(),
            out: Vec::new(),
            message_scope: None,
        }
    }

    /// Text message ids of this run are the kernel's plus `.` and a digest of `run_id`
    /// (AG-UI 1.0 mode; 0.1 keeps the reference's ids).
    pub(crate) fn with_run_scoped_messages(mut self, run_id: &str) -> Mapper<'e> {
        self.message_scope = Some(crate::agui::dialect::run_scope(run_id));
        self
    }

    /// Events produced since the last call.
    pub fn take(&mut self) -> Vec<Stamped> {
        std::mem::take(&mut self.out)
    }

    /// Events produced since the last call, leaving their space for the next ones: a burst
    /// of deltas reuses one vector instead of one per event (see [`Mapper::release_spare`]).
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Stamped> {
        self.out.drain(..)
    }

    /// Whether events wait for `drain`.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Give back the space `drain` kept (before a read that may wait: an idle stream holds
    /// none).
    pub(crate) fn release_spare(&mut self) {
        crate::buffers::settle(&mut self.out, crate::buffers::Pace::Quiet, 0);
    }

    fn emit(&mut self, event: Event) {
        let ts = self.env.now_ms();
        self.out.push(Stamped { ts, event });
    }

    /// The usage aggregated so far.
    pub fn usage(&self) -> Vec<Usage> {
        self.usage.clone()
    }

    /// `map(obj, includePipeline, includeStatusText)` (§5.3).
    pub fn map(&mut self, ev: &A2aEvent, include_pipeline: bool, include_status_text: bool) {
        let empty = Map::new();
        let iac = ev.iac().unwrap_or(&empty);
        if include_pipeline {
            if let Some(Value::Array(events)) =
                iac.get("pipelineBatch").and_then(|b| b.get("events"))
            {
                for e in events {
                    if e.is_object() {
                        self.pipeline_envelope(e, false);
                    }
                }
            }
            if let Some(p) = iac.get("pipeline").filter(|p| p.is_object()) {
                self.pipeline_envelope(p, false);
            }
        }
        if let Some(t) = iac.get("thinking").and_then(Value::as_object) {
            self.thinking(t, None);
        }
        if let Some(t) = iac.get("tool").and_then(Value::as_object) {
            self.tool(t);
        }
        if let Some(u) = iac.get("usage").and_then(Value::as_object) {
            self.record_usage(u);
        }
        if let Some(a) = ev.artifact() {
            let mut v = Map::new();
            v.insert("schemaVersion".into(), json!(1));
            for (k, x) in a {
                v.insert(k.clone(), x.clone());
            }
            self.emit(Event::Custom {
                name: "iac-code.artifact.v1",
                value: Value::Object(v),
            });
        }
        if include_status_text {
            self.status_text(ev, iac);
        }
    }

    fn status_text(&mut self, ev: &A2aEvent, iac: &Map<String, Value>) {
        let mut text = Cow::Borrowed("");
        let mut message_id: Option<Cow<'_, str>> = None;
        if let Some(m) = ev.status_message()
            && matches!(m.role, None | Some("ROLE_AGENT" | "agent"))
        {
            text = m.text;
            message_id = m.message_id.map(Cow::Borrowed);
        }
        if text.is_empty()
            && !self.text_emitted
            && let Some(history) = ev.history()
        {
            let (t, id) = history_text(history);
            text = Cow::Owned(t);
            if message_id.is_none() {
                message_id = id.map(Cow::Owned);
            }
        }
        if text.is_empty() {
            return;
        }
        let final_repeat =
            iac.get("assistantFinal").and_then(|a| a.get("complete")) == Some(&Value::Bool(true));
        if final_repeat && self.text_emitted {
            return;
        }
        self.replayed_text(&text, message_id.as_deref());
    }

    /// Status text through the resume replay filter (§5.7).
    fn replayed_text(&mut self, text: &str, message_id: Option<&str>) {
        // Each delta of a message after its first is looked up, not copied (the hot path).
        let key = match message_id.or(self.current.as_deref()) {
            Some(k) if !self.replay_checked.contains(k) => k.to_string(),
            _ => return self.emit_text(text, message_id, false, true),
        };
        self.replay_checked.insert(key.clone());
        if self.text_digests.is_empty() {
            return self.emit_text(text, message_id, false, true);
        }
        let Some(prefix_len) = self.longest_known_prefix(text) else {
            return self.emit_text(text, message_id, false, true);
        };
        self.buffers.insert(key.clone(), TextHash::of(text));
        let suffix = &text[prefix_len..];
        if !suffix.is_empty() {
            self.emit_text(suffix, Some(&key), false, false);
        }
    }

    /// Byte length of the longest prefix (on code-point boundaries) whose SHA-256 is a known
    /// snapshot digest. One incremental hash pass: O(n).
    fn longest_known_prefix(&self, text: &str) -> Option<usize> {
        let mut h = Sha256::new();
        let mut best = None;
        let mut buf = [0u8; 4];
        let mut len = 0;
        for c in text.chars() {
            let b = c.encode_utf8(&mut buf);
            h.update(b.as_bytes());
            len += b.len();
            let d = crate::ids::hex(&h.clone().finalize());
            if self.text_digests.contains(&d) {
                best = Some(len);
            }
        }
        best
    }

    fn emit_text(
        &mut self,
        text: &str,
        message_id: Option<&str>,
        allow_parallel: bool,
        record: bool,
    ) {
        self.close_reasoning();
        let id = match message_id
            .map(|m| match &self.message_scope {
                Some(scope) => format!("{m}.{scope}"),
                None => m.to_string(),
            })
            .or_else(|| self.current.clone())
        {
            Some(id) => id,
            None => format!("assistant-{}", self.env.hex32()),
        };
        if !self.open_texts.contains(&id) {
            if !allow_parallel && let Some(cur) = self.current.clone() {
                self.close_text(&cur);
            }
            self.open_texts.push(id.clone());
            self.emit(Event::TextStart {
                message_id: id.clone(),
            });
        }
        // The same message as the last delta (the usual case): no new copies of its id.
        if self.current.as_deref() != Some(id.as_str()) {
            self.current = Some(id.clone());
        }
        if record {
            match self.buffers.get_mut(&id) {
                Some(b) => b.push(text),
                None => self.buffers.entry(id.clone()).or_default().push(text),
            }
        }
        self.emit(Event::TextContent {
            message_id: id,
            delta: text.to_string(),
        });
        self.text_emitted = true;
    }

    fn finalize_snapshot(&mut self, id: &str) {
        if let Some(b) = self.buffers.get(id).filter(|b| b.len > 0) {
            self.text_digests.insert(b.hex());
        }
    }

    /// Record every open message's snapshot digest (an interrupt is being committed).
    pub(crate) fn finalize_text_snapshots(&mut self) {
        for id in self.open_texts.clone() {
            self.finalize_snapshot(&id);
        }
    }

    fn close_text(&mut self, id: &str) {
        let Some(pos) = self.open_texts.iter().position(|x| x == id) else {
            return;
        };
        self.open_texts.remove(pos);
        self.finalize_snapshot(id);
        self.emit(Event::TextEnd {
            message_id: id.to_string(),
        });
        if self.current.as_deref() == Some(id) {
            // REC: the most recently opened remaining message (the reference picks arbitrarily).
            self.current = self.open_texts.last().cloned();
        }
    }

    fn close_reasoning(&mut self) {
        for id in std::mem::take(&mut self.open_reasoning) {
            self.emit(Event::ReasoningMessageEnd {
                message_id: id.clone(),
            });
            self.emit(Event::ReasoningEnd { message_id: id });
        }
    }

    fn thinking(&mut self, t: &Map<String, Value>, pipeline_message_id: Option<&str>) {
        if t.get("type").and_then(Value::as_str) != Some("raw_thinking") {
            return;
        }
        let Some(text) = non_empty(t.get("text")) else {
            return;
        };
        let base = pipeline_message_id
            .map(str::to_string)
            .or_else(|| self.current.clone())
            .unwrap_or_else(|| self.run_id.clone());
        let id = format!("reasoning-{base}");
        if self.open_reasoning.insert(id.clone()) {
            self.emit(Event::ReasoningStart {
                message_id: id.clone(),
            });
            self.emit(Event::ReasoningMessageStart {
                message_id: id.clone(),
            });
        }
        self.emit(Event::ReasoningContent {
            message_id: id,
            delta: text.to_string(),
        });
    }

    fn tool(&mut self, t: &Map<String, Value>) {
        let status = t.get("status").and_then(Value::as_str).unwrap_or("");
        let id = non_empty(t.get("toolUseId"))
            .map(str::to_string)
            .unwrap_or_else(|| format!("tool-{}", self.env.hex32()));
        let name = non_empty(t.get("name")).unwrap_or("tool").to_string();
        match status {
            "started" | "input_complete" => {
                if let Some(cur) = self.current.clone() {
                    self.finalize_snapshot(&cur);
                }
                if self.open_tools.insert(id.clone()) {
                    self.emit(Event::ToolStart {
                        tool_call_id: id.clone(),
                        name,
                        parent_message_id: self.current.clone(),
                    });
                }
                if status == "input_complete" {
                    let args = match t.get("toolInput") {
                        Some(v) if !v.is_null() => v.clone(),
                        _ => {
                            json!({"summary": t.get("inputSummary").cloned().unwrap_or(Value::Null)})
                        }
                    };
                    let delta = String::from_utf8(json::canonical(&args)).unwrap_or_default();
                    self.emit(Event::ToolArgs {
                        tool_call_id: id.clone(),
                        delta,
                    });
                    self.open_tools.remove(&id);
                    self.emit(Event::ToolEnd { tool_call_id: id });
                }
            }
            "completed" | "failed" if self.results_sent.insert(id.clone()) => {
                let content = match t.get("result") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => String::from_utf8(json::canonical(v)).unwrap_or_default(),
                    None => "null".into(),
                };
                self.emit(Event::ToolResult {
                    tool_call_id: id,
                    content,
                });
            }
            "progress" => {
                let mut v = Map::new();
                v.insert("schemaVersion".into(), json!(1));
                for (k, x) in t {
                    v.insert(k.clone(), x.clone());
                }
                self.emit(Event::Custom {
                    name: "iac-code.tool-progress.v1",
                    value: Value::Object(v),
                });
            }
            _ => {}
        }
    }

    /// A tool result for a question answered in a resume (§3.3 stage B): no START in this run.
    pub(crate) fn resolved_tool_result(&mut self, tool_call_id: &str, content: &str) {
        if self.results_sent.insert(tool_call_id.to_string()) {
            self.emit(Event::ToolResult {
                tool_call_id: tool_call_id.to_string(),
                content: content.to_string(),
            });
        }
    }

    /// Record a usage record; a malformed one (negative or non-integral counts) is ignored.
    fn record_usage(&mut self, u: &Map<String, Value>) {
        // None: a count that is there but not a non-negative integer.
        let count = |k: &str| -> Option<i64> {
            match u.get(k) {
                None | Some(Value::Null) => Some(0),
                Some(v) => as_int(v).filter(|n| *n >= 0),
            }
        };
        let (Some(i), Some(o), Some(t), Some(c)) = (
            count("inputTokens"),
            count("outputTokens"),
            count("totalTokens"),
            count("cachedInputTokens"),
        ) else {
            log::warn!("ignoring a malformed usage record from the kernel");
            return;
        };
        let provider = u
            .get("provider")
            .and_then(Value::as_str)
            .map(str::to_string);
        let model = u.get("model").and_then(Value::as_str).map(str::to_string);
        match self
            .usage
            .iter_mut()
            .find(|x| x.provider == provider && x.model == model)
        {
            Some(x) => {
                x.input_tokens += i;
                x.output_tokens += o;
                x.total_tokens += t;
                x.cached_input_tokens += c;
            }
            None => self.usage.push(Usage {
                provider,
                model,
                input_tokens: i,
                output_tokens: o,
                total_tokens: t,
                cached_input_tokens: c,
            }),
        }
    }

    fn pipeline_message_id(&self, env: &Map<String, Value>) -> String {
        let scope = non_empty(env.get("scope")).unwrap_or("pipeline");
        let mut parts: Vec<String> = Vec::new();
        for k in ["candidate", "candidateStep", "step"] {
            if let Some(o) = env.get(k).and_then(Value::as_object)
                && let Some(c) = non_empty(o.get("runId")).or_else(|| non_empty(o.get("id")))
                && !parts.iter().any(|p| p == c)
            {
                parts.push(c.to_string());
            }
        }
        let mut id = format!("pipeline-message:{}:{scope}", self.pipeline_run_id);
        for p in parts {
            id.push(':');
            id.push_str(&p);
        }
        id
    }

    /// A pipeline `tool_started`/`tool_result` as the equivalent `iac_code.tool` update.
    fn pipeline_tool(&mut self, data: &Map<String, Value>, status: &str, key: &str, from: &str) {
        let field = |k: &str| data.get(k).cloned().unwrap_or(Value::Null);
        let mut t = Map::new();
        t.insert("status".into(), status.into());
        t.insert("toolUseId".into(), field("toolUseId"));
        t.insert("name".into(), field("toolName"));
        t.insert(key.into(), field(from));
        self.tool(&t);
    }

    /// `(key, name)` of the step an envelope is about.
    fn step_key(env: &Map<String, Value>) -> Option<(String, String)> {
        let step = env
            .get("candidateStep")
            .filter(|v| truthy(Some(v)))
            .or_else(|| env.get("step"))
            .and_then(Value::as_object)?;
        let step_id = non_empty(step.get("id"))?;
        let cand = env.get("candidate").and_then(Value::as_object);
        let cid = cand
            .and_then(|c| non_empty(c.get("id")))
            .or_else(|| non_empty(env.get("subPipelineId")))
            .or_else(|| cand.and_then(|c| non_empty(c.get("runId"))));
        Some(match cid {
            Some(c) => {
                let key = format!("candidate:{c}:{step_id}");
                (key.clone(), key)
            }
            None => (format!("step:{step_id}"), step_id.to_string()),
        })
    }

    fn step_name(key: &str) -> String {
        key.strip_prefix("step:").unwrap_or(key).to_string()
    }

    fn pipeline_envelope(&mut self, env: &Value, recovery: bool) {
        let Some(o) = env.as_object() else { return };
        let event_id = non_empty(o.get("eventId")).map(str::to_string);
        let seq = o.get("sequence").and_then(as_int).unwrap_or(0);
        if let Some(id) = &event_id
            && self.seen_events.contains(id)
        {
            return;
        }
        // Recovery events with an eventId are not sequence-filtered (§5.8).
        let seq_filter = !recovery || event_id.is_none();
        if seq_filter && seq > 0 && seq <= self.last_sequence {
            return;
        }
        if let Some(id) = event_id {
            self.seen_events.insert(id);
        }
        self.last_sequence = self.last_sequence.max(seq);
        let event_type = o.get("eventType").and_then(Value::as_str).unwrap_or("");
        if let Some(data) = o.get("data").and_then(Value::as_object) {
            match event_type {
                "text_delta" => {
                    if let Some(t) = non_empty(data.get("text")) {
                        let id = self.pipeline_message_id(o);
                        self.emit_text(t, Some(&id), true, true);
                    }
                }
                "thinking_delta" => {
                    let id = self.pipeline_message_id(o);
                    self.thinking(data, Some(&id));
                }
                "tool_started" => self.pipeline_tool(data, "input_complete", "toolInput", "input"),
                "tool_result" => {
                    let failed = data.get("isError") == Some(&Value::Bool(true));
                    let status = if failed { "failed" } else { "completed" };
                    self.pipeline_tool(data, status, "result", "result");
                }
                "usage" => self.record_usage(data),
                _ => {}
            }
        }
        if let Some((key, name)) = Self::step_key(o) {
            match event_type {
                "step_started" | "candidate_step_started" | "input_received" => {
                    self.open_steps.insert(key.clone());
                    if self.run_steps.insert(key) {
                        self.emit(Event::StepStarted { name });
                    }
                }
                "step_completed"
                | "step_failed"
                | "candidate_step_completed"
                | "candidate_step_failed"
                    if self.open_steps.remove(&key) =>
                {
                    if self.run_steps.remove(&key) {
                        self.emit(Event::StepFinished { name });
                    } else {
                        // Completed before it was reopened in this run: a zero-length span.
                        let ts = self.env.now_ms();
                        self.out.push(Stamped {
                            ts,
                            event: Event::StepStarted { name: name.clone() },
                        });
                        self.out.push(Stamped {
                            ts,
                            event: Event::StepFinished { name },
                        });
                    }
                }
                _ => {}
            }
        }
        if PIPELINE_CUSTOM.contains(&event_type) {
            self.emit(Event::Custom {
                name: "iac-code.pipeline.v1",
                value: env.clone(),
            });
        }
    }

    /// Recovery from `GET /iac-code/pipeline/state` (§5.8).
    pub fn pipeline_recovery(&mut self, state: &Value) {
        let Some(snapshot) = state.get("snapshot").filter(|s| s.is_object()) else {
            return;
        };
        if let Some(id) = non_empty(snapshot.get("pipelineRunId")) {
            self.pipeline_run_id = id.to_string();
        }
        self.emit(Event::ActivitySnapshot {
            pipeline_run_id: self.pipeline_run_id.clone(),
            snapshot: snapshot.clone(),
        });
        if let Some(Value::Array(events)) = state.get("events") {
            for e in events {
                if e.is_object() {
                    self.pipeline_envelope(e, true);
                }
            }
        }
        if let Some(n) = snapshot.get("lastSequence").and_then(as_int) {
            self.last_sequence = self.last_sequence.max(n);
        }
    }

    /// STEP_STARTED for every durable open step, sorted (a resume continues its steps).
    pub fn reopen_pipeline_steps(&mut self) {
        for key in self.open_steps.clone() {
            if self.run_steps.insert(key.clone()) {
                self.emit(Event::StepStarted {
                    name: Self::step_name(&key),
                });
            }
        }
    }

    /// Close every open span (§5.9): reasoning, tools, texts, then this run's steps.
    pub fn close_all(&mut self) {
        self.close_reasoning();
        for id in std::mem::take(&mut self.open_tools) {
            self.emit(Event::ToolEnd { tool_call_id: id });
        }
        let mut texts = self.open_texts.clone();
        texts.sort();
        for id in texts {
            self.close_text(&id);
        }
        for key in std::mem::take(&mut self.run_steps) {
            self.emit(Event::StepFinished {
                name: Self::step_name(&key),
            });
        }
    }
}

fn is_agent(m: &Map<String, Value>) -> bool {
    matches!(
        m.get("role").and_then(Value::as_str),
        Some("ROLE_AGENT" | "agent")
    )
}

/// The last contiguous block of agent messages in a task history: its text and the last
/// message id (§5.3 step 7).
fn history_text(history: &[Value]) -> (String, Option<String>) {
    let mut end = history.len();
    while end > 0 {
        match history[end - 1].as_object() {
            Some(m) if !is_agent(m) => end -= 1,
            _ => break,
        }
    }
    let mut start = end;
    while start > 0 {
        match history[start - 1].as_object() {
            Some(m) if is_agent(m) => start -= 1,
            _ => break,
        }
    }
    let mut text = String::new();
    let mut id = None;
    for m in history[start..end].iter().filter_map(Value::as_object) {
        text.push_str(&parts_text(m.get("parts")));
        if let Some(i) = non_empty(m.get("messageId")) {
            id = Some(i.to_string());
        }
    }
    (text, id)
}

#[cfg(test)]
mod tests;

/// The SHA-256 of a growing text, without the text.
#[derive(Clone, Default)]
struct TextHash {
    hasher: Sha256,
    len: usize,
}

impl TextHash {
    fn of(text: &str) -> TextHash {
        let mut h = TextHash::default();
        h.push(text);
        h
    }

    fn push(&mut self, text: &str) {
        self.hasher.update(text.as_bytes());
        self.len += text.len();
    }

    fn hex(&self) -> String {
        crate::ids::hex(&self.hasher.clone().finalize())
    }
}
