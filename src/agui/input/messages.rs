//! `RunAgentInput.messages[]`: the reference's message and part shapes (ag-ui-protocol
//! 0.1.20), and in AG-UI 1.0 mode the 1.0 shapes (`@ag-ui/core` 1.0.0 `MessageSchema`).
//!
//! 1.0 mode accepts what a 1.0 client may send and skips what this server does not know
//! instead of refusing the run: a message of an unknown role, a part of an unknown type
//! (the 1.0 model on media parts: "a peer that cannot [use it] drops the part as it drops any
//! part it cannot use"). What is skipped is listed for the client (`Skipped`).

use serde_json::{Map, Value};

use super::{FieldError, Problem, R, field, object, opt_str, req_str};
use crate::agui::content::{SkipReason, Skipped};
use crate::agui::dialect::Dialect;

pub(super) struct Rules {
    v1: bool,
    pub(super) skipped: Vec<Skipped>,
}

impl Rules {
    pub(super) fn new(dialect: &Dialect) -> Rules {
        Rules {
            v1: dialect.reads_1_0_messages,
            skipped: Vec::new(),
        }
    }

    /// Check one message; `Ok(false)`: skip it (1.0 mode, an unknown role).
    pub(super) fn message(&mut self, m: &Value) -> R<bool> {
        let o = object(m, "")?;
        let id = || o.get("id").and_then(Value::as_str).map(str::to_string);
        match o.get("role").and_then(Value::as_str) {
            Some("developer" | "system" | "reasoning") => {
                check_common(o)?;
                req_str(o, "content", "content")?;
            }
            Some("assistant") => {
                check_common(o)?;
                opt_str(o, "content", "content")?;
                match field(o, "toolCalls", "tool_calls") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(calls)) => {
                        for (i, c) in calls.iter().enumerate() {
                            let at = format!("toolCalls[{i}]");
                            check_tool_call(c).map_err(|e| e.within(&at))?;
                        }
                    }
                    Some(_) => return Err(FieldError::new("toolCalls", Problem::Type("array"))),
                }
            }
            Some("user") => {
                check_common(o)?;
                match o.get("content") {
                    Some(Value::String(_)) => {}
                    Some(Value::Array(parts)) => self.parts(parts, id().as_deref())?,
                    None | Some(Value::Null) => {
                        return Err(FieldError::new("content", Problem::Required));
                    }
                    Some(_) => {
                        return Err(FieldError::new("content", Problem::Type("string or array")));
                    }
                }
            }
            Some("tool") => {
                check_common(o)?;
                // 1.0 `ToolMessageSchema.content`: a string or a list of parts.
                match o.get("content") {
                    Some(Value::Array(parts)) if self.v1 => self.parts(parts, id().as_deref())?,
                    _ => {
                        req_str(o, "content", "content")?;
                    }
                }
                req_str(o, "toolCallId", "tool_call_id")?;
                opt_str(o, "error", "error")?;
            }
            Some("activity") => {
                req_str(o, "id", "id")?;
                req_str(o, "activityType", "activity_type")?;
                if !o.get("content").is_some_and(Value::is_object) {
                    return Err(FieldError::new("content", Problem::Type("object")));
                }
            }
            None => return Err(FieldError::new("role", Problem::Required)),
            Some(role) if self.v1 => {
                self.skipped.push(Skipped {
                    message_id: id(),
                    part: None,
                    kind: role.to_string(),
                    reason: SkipReason::UnknownRole,
                });
                return Ok(false);
            }
            Some(_) => return Err(FieldError::new("role", Problem::Value)),
        }
        Ok(true)
    }

    fn parts(&mut self, parts: &[Value], message_id: Option<&str>) -> R<()> {
        for (i, p) in parts.iter().enumerate() {
            let known = self
                .part(p)
                .map_err(|e| e.within(&format!("content[{i}]")))?;
            if let Some(kind) = known {
                self.skipped.push(Skipped {
                    message_id: message_id.map(str::to_string),
                    part: Some(i),
                    kind,
                    reason: SkipReason::UnknownPartType,
                });
            }
        }
        Ok(())
    }

    /// Check one content part; `Ok(Some(type))`: a type this server does not know (1.0).
    fn part(&self, p: &Value) -> R<Option<String>> {
        let o = object(p, "")?;
        match o.get("type").and_then(Value::as_str) {
            Some("text") => {
                req_str(o, "text", "text")?;
            }
            Some("image" | "audio" | "video" | "document") => {
                let src = o
                    .get("source")
                    .ok_or_else(|| FieldError::new("source", Problem::Required))
                    .and_then(|s| object(s, "source"))?;
                self.source(src).map_err(|e| e.within("source"))?;
            }
            Some("binary") => {
                req_str(o, "mimeType", "mime_type")?;
                let mut any = false;
                for k in ["id", "url", "data"] {
                    if opt_str(o, k, k)?.is_some() {
                        any = true;
                    }
                }
                opt_str(o, "filename", "filename")?;
                if !any {
                    return Err(FieldError::new("url", Problem::Required));
                }
            }
            None => return Err(FieldError::new("type", Problem::Required)),
            Some(other) if self.v1 => return Ok(Some(other.to_string())),
            Some(_) => return Err(FieldError::new("type", Problem::Value)),
        }
        Ok(None)
    }

    fn source(&self, src: &Map<String, Value>) -> R<()> {
        req_str(src, "value", "value")?;
        match src.get("type").and_then(Value::as_str) {
            Some("data") => {
                req_str(src, "mimeType", "mime_type")?;
            }
            Some("url") => {
                opt_str(src, "mimeType", "mime_type")?;
            }
            // 1.0 `FileSourceSchema`: a handle a model provider issued.
            Some("file") if self.v1 => {
                opt_str(src, "mimeType", "mime_type")?;
                opt_str(src, "provider", "provider")?;
            }
            None => return Err(FieldError::new("type", Problem::Required)),
            Some(_) => return Err(FieldError::new("type", Problem::Value)),
        }
        Ok(())
    }
}

fn check_common(o: &Map<String, Value>) -> R<()> {
    req_str(o, "id", "id")?;
    opt_str(o, "name", "name")?;
    opt_str(o, "encryptedValue", "encrypted_value")?;
    Ok(())
}

fn check_tool_call(c: &Value) -> R<()> {
    let c = object(c, "")?;
    req_str(c, "id", "id")?;
    if c.get("type").and_then(Value::as_str) != Some("function") {
        return Err(FieldError::new("type", Problem::Value));
    }
    let f = c
        .get("function")
        .ok_or_else(|| FieldError::new("function", Problem::Required))
        .and_then(|f| object(f, "function"))?;
    (|| -> R<()> {
        req_str(f, "name", "name")?;
        req_str(f, "arguments", "arguments")?;
        Ok(())
    })()
    .map_err(|e| e.within("function"))?;
    opt_str(c, "encryptedValue", "encrypted_value")?;
    Ok(())
}
