//! AG-UI events and their exact JSON (reference §5.1): compact, declared field order
//! (`type`, `timestamp`, then the event's fields), absent optional fields omitted (never
//! `null`), `RUN_ERROR`'s `threadId`/`runId` after `message`/`code`/`usage`.

use serde_json::Value;

use crate::errors::Code;
use crate::json::write_str;

/// Aggregated token usage for one (provider, model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub total_tokens: i64,
    pub cached_input_tokens: i64,
}

/// A run's token usage: its terminal event's `usage` entries summed (a run may report
/// several models). Its span notes it, the decisions' record and a caller's usage count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub cached_input_tokens: u64,
}

impl RunUsage {
    /// The entries of a terminal event, summed; a negative count counts as none.
    pub fn of(usage: &[Usage]) -> RunUsage {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        usage.iter().fold(RunUsage::default(), |mut a, u| {
            a.input_tokens += n(u.input_tokens);
            a.output_tokens += n(u.output_tokens);
            a.total_tokens += n(u.total_tokens);
            a.cached_input_tokens += n(u.cached_input_tokens);
            a
        })
    }
}

/// How a run finished successfully.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Success,
    /// Interrupt objects, already built (§5.12).
    Interrupt(Vec<Value>),
    /// AG-UI 1.0 only: the run was cancelled.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    RunStarted {
        thread_id: String,
        run_id: String,
        parent_run_id: Option<String>,
        protocol_version: Option<&'static str>,
    },
    RunFinished {
        thread_id: String,
        run_id: String,
        outcome: Outcome,
        usage: Vec<Usage>,
    },
    RunError {
        message: String,
        code: Code,
        usage: Vec<Usage>,
        thread_id: String,
        run_id: String,
        /// Write `threadId`/`runId` (AG-UI 0.1, as the reference does); the 1.0
        /// `RunErrorEvent` has no such fields and strict clients reject them.
        ids: bool,
    },
    TextStart {
        message_id: String,
    },
    TextContent {
        message_id: String,
        delta: String,
    },
    TextEnd {
        message_id: String,
    },
    ReasoningStart {
        message_id: String,
    },
    ReasoningMessageStart {
        message_id: String,
    },
    ReasoningContent {
        message_id: String,
        delta: String,
    },
    ReasoningMessageEnd {
        message_id: String,
    },
    ReasoningEnd {
        message_id: String,
    },
    ToolStart {
        tool_call_id: String,
        name: String,
        parent_message_id: Option<String>,
    },
    ToolArgs {
        tool_call_id: String,
        delta: String,
    },
    ToolEnd {
        tool_call_id: String,
    },
    ToolResult {
        tool_call_id: String,
        content: String,
    },
    StepStarted {
        name: String,
    },
    StepFinished {
        name: String,
    },
    ActivitySnapshot {
        pipeline_run_id: String,
        snapshot: Value,
    },
    Custom {
        name: &'static str,
        value: Value,
    },
    /// AG-UI 1.0 only: the whole conversation, when the request restated less of it than
    /// the server keeps (a fresh tab, another device).
    MessagesSnapshot {
        messages: Vec<Value>,
    },
}

impl Event {
    /// `RUN_ERROR`, the one way every path builds it (the run's end, a subscriber's, a
    /// worker's abnormal end). `ids`: carry threadId/runId (AG-UI 0.1; the 1.0 event has
    /// none).
    pub(crate) fn run_error(
        code: Code,
        message: impl Into<String>,
        thread_id: &str,
        run_id: &str,
        usage: Vec<Usage>,
        ids: bool,
    ) -> Event {
        Event::RunError {
            message: message.into(),
            code,
            usage,
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            ids,
        }
    }

    /// The event's large text, if it has one (a delta, a tool's arguments or result).
    fn large_text(&self) -> Option<&str> {
        match self {
            Event::TextContent { delta, .. }
            | Event::ReasoningContent { delta, .. }
            | Event::ToolArgs { delta, .. } => Some(delta),
            Event::ToolResult { content, .. } => Some(content),
            _ => None,
        }
    }

    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "RUN_STARTED",
            Event::RunFinished { .. } => "RUN_FINISHED",
            Event::RunError { .. } => "RUN_ERROR",
            Event::TextStart { .. } => "TEXT_MESSAGE_START",
            Event::TextContent { .. } => "TEXT_MESSAGE_CONTENT",
            Event::TextEnd { .. } => "TEXT_MESSAGE_END",
            Event::ReasoningStart { .. } => "REASONING_START",
            Event::ReasoningMessageStart { .. } => "REASONING_MESSAGE_START",
            Event::ReasoningContent { .. } => "REASONING_MESSAGE_CONTENT",
            Event::ReasoningMessageEnd { .. } => "REASONING_MESSAGE_END",
            Event::ReasoningEnd { .. } => "REASONING_END",
            Event::ToolStart { .. } => "TOOL_CALL_START",
            Event::ToolArgs { .. } => "TOOL_CALL_ARGS",
            Event::ToolEnd { .. } => "TOOL_CALL_END",
            Event::ToolResult { .. } => "TOOL_CALL_RESULT",
            Event::StepStarted { .. } => "STEP_STARTED",
            Event::StepFinished { .. } => "STEP_FINISHED",
            Event::ActivitySnapshot { .. } => "ACTIVITY_SNAPSHOT",
            Event::Custom { .. } => "CUSTOM",
            Event::MessagesSnapshot { .. } => "MESSAGES_SNAPSHOT",
        }
    }
}

/// An event with the time it was created (Unix milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    pub(crate) ts: u64,
    pub(crate) event: Event,
}

struct W<'a> {
    out: &'a mut Vec<u8>,
}

impl W<'_> {
    fn key(&mut self, k: &str) {
        self.out.push(b',');
        write_str(k, self.out);
        self.out.push(b':');
    }
    fn s(&mut self, k: &str, v: &str) {
        self.key(k);
        write_str(v, self.out);
    }
    fn opt(&mut self, k: &str, v: &Option<String>) {
        if let Some(v) = v {
            self.s(k, v);
        }
    }
    fn v(&mut self, k: &str, v: &Value) {
        self.key(k);
        let _ = serde_json::to_writer(&mut *self.out, v);
    }
    fn usage(&mut self, usage: &[Usage]) {
        if usage.is_empty() {
            return;
        }
        self.key("usage");
        self.out.push(b'[');
        for (i, u) in usage.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out.push(b'{');
            let mut first = true;
            let mut field = |out: &mut Vec<u8>, k: &str| {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_str(k, out);
                out.push(b':');
            };
            if let Some(p) = &u.provider {
                field(self.out, "provider");
                write_str(p, self.out);
            }
            if let Some(m) = &u.model {
                field(self.out, "model");
                write_str(m, self.out);
            }
            for (k, n) in [
                ("inputTokens", u.input_tokens),
                ("outputTokens", u.output_tokens),
                ("totalTokens", u.total_tokens),
                ("cachedInputTokens", u.cached_input_tokens),
            ] {
                field(self.out, k);
                crate::json::write_i64(self.out, n);
            }
            self.out.push(b'}');
        }
        self.out.push(b']');
    }
}

impl Stamped {
    /// The event framed for SSE with its id, `id: <id>\ndata: <json>\n\n`, in one
    /// allocation.
    pub(crate) fn to_sse(&self, id: u64) -> Vec<u8> {
        let mut out = self.sse_frame(id);
        // The frame lives on in the run's replay log: a grown buffer's spare half goes
        // (a shrink in place, no copy); a text delta's frame fits the first guess.
        if out.capacity() - out.len() > 64 {
            out.shrink_to_fit();
        }
        out
    }

    /// A first guess at the framed event's size: a large text is written into room made for
    /// it (escapes included), never into a buffer doubled while it is written, which would
    /// hold up to twice its size, then a copy (issue 45, fault 1).
    fn sse_capacity(&self) -> usize {
        let text = self.event.large_text().map_or(0, str::len);
        176 + text + text / 8
    }

    fn sse_frame(&self, id: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.sse_capacity());
        frame_head(&mut out, id);
        self.write_json(&mut out);
        out.extend_from_slice(b"\n\n");
        out
    }

    /// The event's compact JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.write_json(&mut out);
        out
    }

    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(self.event.type_name().as_bytes());
        out.extend_from_slice(b"\",\"timestamp\":");
        crate::json::write_u64(out, self.ts);
        let mut w = W { out };
        match &self.event {
            Event::RunStarted {
                thread_id,
                run_id,
                parent_run_id,
                protocol_version,
            } => {
                w.s("threadId", thread_id);
                w.s("runId", run_id);
                w.opt("parentRunId", parent_run_id);
                if let Some(p) = protocol_version {
                    w.s("protocolVersion", p);
                }
            }
            Event::RunFinished {
                thread_id,
                run_id,
                outcome,
                usage,
            } => {
                w.s("threadId", thread_id);
                w.s("runId", run_id);
                w.key("outcome");
                match outcome {
                    Outcome::Success => w.out.extend_from_slice(b"{\"type\":\"success\"}"),
                    Outcome::Cancelled => w.out.extend_from_slice(b"{\"type\":\"cancelled\"}"),
                    Outcome::Interrupt(list) => {
                        w.out
                            .extend_from_slice(b"{\"type\":\"interrupt\",\"interrupts\":");
                        let _ = serde_json::to_writer(&mut *w.out, list);
                        w.out.push(b'}');
                    }
                }
                w.usage(usage);
            }
            Event::RunError {
                message,
                code,
                usage,
                thread_id,
                run_id,
                ids,
            } => {
                w.s("message", message);
                w.s("code", code.as_str());
                w.usage(usage);
                if *ids {
                    w.s("threadId", thread_id);
                    w.s("runId", run_id);
                }
            }
            Event::TextStart { message_id } => {
                w.s("messageId", message_id);
                w.s("role", "assistant");
            }
            Event::TextContent { message_id, delta }
            | Event::ReasoningContent { message_id, delta } => {
                w.s("messageId", message_id);
                w.s("delta", delta);
            }
            Event::ReasoningMessageStart { message_id } => {
                w.s("messageId", message_id);
                w.s("role", "reasoning");
            }
            Event::TextEnd { message_id }
            | Event::ReasoningStart { message_id }
            | Event::ReasoningMessageEnd { message_id }
            | Event::ReasoningEnd { message_id } => w.s("messageId", message_id),
            Event::ToolStart {
                tool_call_id,
                name,
                parent_message_id,
            } => {
                w.s("toolCallId", tool_call_id);
                w.s("toolCallName", name);
                w.opt("parentMessageId", parent_message_id);
            }
            Event::ToolArgs {
                tool_call_id,
                delta,
            } => {
                w.s("toolCallId", tool_call_id);
                w.s("delta", delta);
            }
            Event::ToolEnd { tool_call_id } => w.s("toolCallId", tool_call_id),
            Event::ToolResult {
                tool_call_id,
                content,
            } => {
                w.s("messageId", &format!("tool-result-{tool_call_id}"));
                w.s("toolCallId", tool_call_id);
                w.s("content", content);
                w.s("role", "tool");
            }
            Event::StepStarted { name } | Event::StepFinished { name } => w.s("stepName", name),
            Event::ActivitySnapshot {
                pipeline_run_id,
                snapshot,
            } => {
                w.s("messageId", &format!("pipeline:{pipeline_run_id}"));
                w.s("activityType", "iac-code.pipeline.v1");
                w.key("content");
                w.out
                    .extend_from_slice(b"{\"schemaVersion\":1,\"pipelineRunId\":");
                write_str(pipeline_run_id, w.out);
                w.out.extend_from_slice(b",\"snapshot\":");
                let _ = serde_json::to_writer(&mut *w.out, snapshot);
                w.out.push(b'}');
                w.key("replace");
                w.out.extend_from_slice(b"true");
            }
            Event::Custom { name, value } => {
                w.s("name", name);
                w.v("value", value);
            }
            Event::MessagesSnapshot { messages } => {
                w.key("messages");
                let _ = serde_json::to_writer(&mut *w.out, messages);
            }
        }
        out.push(b'}');
    }
}

/// The span rules every stream must keep: starts before contents and ends, every span closed
/// by the end, no second terminal event, nothing after a terminal event. Used by the fuzz
/// targets and tests on mapper output (which has no RUN_STARTED of its own).
pub fn check_spans(events: &[Stamped]) -> Result<(), String> {
    use std::collections::HashSet;
    let (mut text, mut reasoning, mut rmsg, mut tools, mut steps) = (
        HashSet::new(),
        HashSet::new(),
        HashSet::new(),
        HashSet::new(),
        HashSet::new(),
    );
    let mut terminal = false;
    for (i, s) in events.iter().enumerate() {
        if terminal {
            return Err(format!("event {i} after the terminal event"));
        }
        let ok = match &s.event {
            Event::TextStart { message_id } => text.insert(message_id.clone()),
            Event::TextContent { message_id, .. } => text.contains(message_id),
            Event::TextEnd { message_id } => text.remove(message_id),
            Event::ReasoningStart { message_id } => reasoning.insert(message_id.clone()),
            Event::ReasoningMessageStart { message_id } => {
                reasoning.contains(message_id) && rmsg.insert(message_id.clone())
            }
            Event::ReasoningContent { message_id, .. } => rmsg.contains(message_id),
            Event::ReasoningMessageEnd { message_id } => rmsg.remove(message_id),
            Event::ReasoningEnd { message_id } => {
                !rmsg.contains(message_id) && reasoning.remove(message_id)
            }
            Event::ToolStart { tool_call_id, .. } => tools.insert(tool_call_id.clone()),
            Event::ToolArgs { tool_call_id, .. } => tools.contains(tool_call_id),
            Event::ToolEnd { tool_call_id } => tools.remove(tool_call_id),
            Event::StepStarted { name } => steps.insert(name.clone()),
            Event::StepFinished { name } => steps.remove(name),
            Event::RunFinished { .. } | Event::RunError { .. } => {
                terminal = true;
                true
            }
            _ => true,
        };
        if !ok {
            return Err(format!(
                "event {i} ({}) breaks the span rules",
                s.event.type_name()
            ));
        }
    }
    if !(text.is_empty() && reasoning.is_empty() && tools.is_empty() && steps.is_empty()) {
        return Err(format!(
            "open spans at the end: text {text:?} reasoning {reasoning:?} tools {tools:?} steps {steps:?}"
        ));
    }
    Ok(())
}

/// `id: N\ndata: `, formatted in place (no string for the id).
fn frame_head(out: &mut Vec<u8>, id: u64) {
    out.extend_from_slice(b"id: ");
    crate::json::write_u64(out, id);
    out.extend_from_slice(b"\ndata: ");
}

/// One SSE event of a run: `id: N`, the JSON, a blank line.
pub(crate) fn frame(id: u64, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 32);
    frame_head(&mut out, id);
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(ev: Event) -> String {
        String::from_utf8(Stamped { ts: 7, event: ev }.to_json()).unwrap()
    }

    #[test]
    fn a_large_events_frame_is_written_in_one_allocation() {
        let some_escapes = format!("{}\"\n", "y".repeat(38)).repeat(1 << 16);
        for text in ["x".repeat(3 << 20), some_escapes] {
            let ev = Stamped {
                ts: 7,
                event: Event::ToolArgs {
                    tool_call_id: "c".into(),
                    delta: text.clone(),
                },
            };
            let frame = ev.sse_frame(12);
            assert_eq!(frame.capacity(), ev.sse_capacity(), "never grown");
            assert!(frame.len() > text.len());
            assert_eq!(ev.to_sse(12), frame);
        }
    }

    #[test]
    fn field_order_and_omission() {
        assert_eq!(
            j(Event::RunStarted {
                thread_id: "t".into(),
                run_id: "r".into(),
                parent_run_id: None,
                protocol_version: None
            }),
            r#"{"type":"RUN_STARTED","timestamp":7,"threadId":"t","runId":"r"}"#
        );
        assert_eq!(
            j(Event::RunError {
                message: "m".into(),
                code: Code::Cancelled,
                usage: vec![Usage {
                    provider: Some("p".into()),
                    model: None,
                    input_tokens: 1,
                    output_tokens: 2,
                    total_tokens: 3,
                    cached_input_tokens: 0
                }],
                thread_id: "t".into(),
                run_id: "r".into(),
                ids: true
            }),
            r#"{"type":"RUN_ERROR","timestamp":7,"message":"m","code":"CANCELLED","usage":[{"provider":"p","inputTokens":1,"outputTokens":2,"totalTokens":3,"cachedInputTokens":0}],"threadId":"t","runId":"r"}"#
        );
        // AG-UI 1.0: the RunErrorEvent has no threadId/runId (strict clients reject them).
        assert_eq!(
            j(Event::RunError {
                message: "m".into(),
                code: Code::Cancelled,
                usage: vec![],
                thread_id: "t".into(),
                run_id: "r".into(),
                ids: false
            }),
            r#"{"type":"RUN_ERROR","timestamp":7,"message":"m","code":"CANCELLED"}"#
        );
        assert_eq!(
            j(Event::ToolStart {
                tool_call_id: "c".into(),
                name: "bash".into(),
                parent_message_id: Some("m".into())
            }),
            r#"{"type":"TOOL_CALL_START","timestamp":7,"toolCallId":"c","toolCallName":"bash","parentMessageId":"m"}"#
        );
        assert_eq!(
            j(Event::ToolResult {
                tool_call_id: "c".into(),
                content: "a\nb".into()
            }),
            r#"{"type":"TOOL_CALL_RESULT","timestamp":7,"messageId":"tool-result-c","toolCallId":"c","content":"a\nb","role":"tool"}"#
        );
        assert_eq!(
            j(Event::ActivitySnapshot {
                pipeline_run_id: "p".into(),
                snapshot: serde_json::json!({"b":1,"a":null})
            }),
            r#"{"type":"ACTIVITY_SNAPSHOT","timestamp":7,"messageId":"pipeline:p","activityType":"iac-code.pipeline.v1","content":{"schemaVersion":1,"pipelineRunId":"p","snapshot":{"b":1,"a":null}},"replace":true}"#
        );
        assert_eq!(
            j(Event::RunFinished {
                thread_id: "t".into(),
                run_id: "r".into(),
                outcome: Outcome::Interrupt(vec![serde_json::json!({"id":"i"})]),
                usage: vec![]
            }),
            r#"{"type":"RUN_FINISHED","timestamp":7,"threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i"}]}}"#
        );
    }
}
