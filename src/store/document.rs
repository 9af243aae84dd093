//! The per-thread state document, schema version 1 (reference §7.3), its strict loader
//! (§7.5) and its writer (Python `json.dumps(indent=2, sort_keys=True, ensure_ascii=False)`
//! plus a newline). Files written by iac-code 0.16.0 load here and vice versa.
//!
//! Never stored: request bodies, message text, llm keys/headers, cloud credentials, model,
//! thinking settings, channel, language, run mode, the active run id.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::sorted::{SortedMap, SortedSet};
use crate::json;
use crate::limits;

/// Input fields kept in `pending` and used to build interrupts; everything else is dropped.
pub(crate) const PENDING_WHITELIST: &[&str] = &[
    "schemaVersion",
    "kind",
    "requestTaskId",
    "contextId",
    "inputId",
    "toolUseId",
    "toolName",
    "title",
    "purpose",
    "effect",
    "target",
    "isReadOnly",
    "prompt",
    "safeSummary",
    "options",
    "language",
    "deploymentSummary",
    "scope",
    "subPipelineId",
    "operation",
    "displayParameters",
    "allowFreeText",
    "freeTextPrompt",
    "required",
    // New in iac-agui: the kernel's own deadline, passed through and enforced (issue: expiry).
    "expiresAt",
    // New in iac-agui: a cloud resource selection's selector (issue 47), kept whole so its
    // answer can be built and checked after a restart.
    "selector",
    // New in iac-agui: a deployment confirmation's solution, template, cost and parameters
    // (the kernel's event data), shown with its interrupt.
    "deployment",
];

/// Keep only whitelisted keys, in their original order.
pub(crate) fn filter_input(v: &Map<String, Value>) -> Map<String, Value> {
    v.iter()
        .filter(|(k, _)| PENDING_WHITELIST.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A pending interrupt.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingInput {
    pub(crate) value: Map<String, Value>,
    pub(crate) sideband: bool,
}

/// The thread's current execution (one user turn and its resumes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Execution {
    pub execution_id: String,
    pub ros_invocation_id: String,
    pub task_id: Option<String>,
    /// Pending inputs in insertion order.
    pub pending: Vec<(String, PendingInput)>,
    pub pipeline_sequence: i64,
    pub open_steps: BTreeSet<String>,
    pub text_digests: BTreeSet<String>,
}

impl Execution {
    pub(crate) fn pending_remove(&mut self, id: &str) -> Option<PendingInput> {
        let i = self.pending.iter().position(|(k, _)| k == id)?;
        Some(self.pending.remove(i).1)
    }
}

/// Everything persisted for one AG-UI thread.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ThreadDoc {
    /// The principal the thread belongs to: not in the file, whose place says it
    /// (`store::files`), so files stay the reference's bytes.
    pub owner: crate::principal::Caller,
    pub thread_id: String,
    pub context_id: String,
    pub cwd: String,
    pub user_id: Option<String>,
    pub session_id: Option<String>,
    pub execution: Execution,
    pub run_digests: SortedMap<String, String>,
    /// runIds of `run_digests` in admission order, oldest first. Entries of `run_digests` not
    /// listed here are older than every listed one (they predate the list). Persisted as
    /// `runOrder` only once the thread has more than `limits::RUN_ORDER_FROM` runs, so the files of
    /// ordinary threads stay byte-identical to the reference's.
    pub run_order: std::collections::VecDeque<String>,
    /// (executionId, interruptId) → digest.
    pub applied: BTreeMap<(String, String), String>,
    /// Answers sent to the kernel whose acceptance was not seen (the process stopped while
    /// it waited): (executionId, interruptId) → digest. A retry of the same answer that the
    /// kernel refuses as no longer expected was delivered by the first try. Persisted as
    /// `deliveriesInDoubt` only while not empty (ordinary files stay the reference's bytes;
    /// the reference ignores the key).
    pub in_doubt: BTreeMap<(String, String), String>,
    pub terminal: SortedSet<String>,
}

impl ThreadDoc {
    /// Record an admitted run's digest, dropping the oldest beyond `limits::MAX_RUN_DIGESTS` entries
    /// or `limits::MAX_RUN_DIGEST_BYTES` of runIds (runIds are client strings of any length).
    pub fn record_run(&mut self, run_id: &str, digest: &str) {
        if self
            .run_digests
            .insert(run_id.to_string(), digest.to_string())
            .is_none()
        {
            self.run_order.push_back(run_id.to_string());
        }
        let mut bytes: usize = self.run_digests.keys().map(String::len).sum();
        let over =
            |n: usize, b: usize| n > limits::MAX_RUN_DIGESTS || b > limits::MAX_RUN_DIGEST_BYTES;
        if !over(self.run_digests.len(), bytes) {
            return;
        }
        // Unlisted entries are the oldest: drop those first (their mutual order is unknown).
        let listed: std::collections::HashSet<&String> = self.run_order.iter().collect();
        let unlisted: Vec<String> = self
            .run_digests
            .keys()
            .filter(|k| !listed.contains(k))
            .cloned()
            .collect();
        let mut victims = unlisted.into_iter();
        // Victims first, then one pass: a file loaded far over the bound is cut in linear time.
        let mut gone: std::collections::HashSet<String> = Default::default();
        while over(self.run_digests.len() - gone.len(), bytes) {
            let victim = match victims.next() {
                Some(v) => v,
                None => match self.run_order.front() {
                    Some(v) if v != run_id => self.run_order.pop_front().unwrap_or_default(),
                    _ => break,
                },
            };
            if self.run_digests.contains_key(&victim) && !gone.contains(&victim) {
                bytes -= victim.len();
                gone.insert(victim);
            }
        }
        self.run_digests.retain(|k, _| !gone.contains(k));
    }

    /// Mark an execution terminal, keeping the set bounded.
    pub(crate) fn retire(&mut self, execution_id: &str) {
        self.terminal.insert(execution_id.to_string());
        // A finished execution takes no more answers: nothing of it is in doubt any more.
        self.in_doubt.retain(|(e, _), _| e != execution_id);
        self.prune();
    }

    /// Bound the sets that grow with every turn. Only entries that can no longer matter go:
    /// never the current execution's terminal mark or resume digests.
    pub(crate) fn prune(&mut self) {
        let current = self.execution.execution_id.clone();
        // The first in key order go (as with the B-tree), never the current one.
        let mut excess = self.terminal.len().saturating_sub(limits::MAX_TERMINAL_IDS);
        if excess > 0 {
            self.terminal.retain(|e| {
                if excess == 0 || *e == current {
                    return true;
                }
                excess -= 1;
                false
            });
        }
        let old = self.applied.keys().filter(|(e, _)| *e != current).count();
        if old > limits::MAX_OLD_APPLIED {
            let victims: Vec<(String, String)> = self
                .applied
                .keys()
                .filter(|(e, _)| *e != current)
                .take(old - limits::MAX_OLD_APPLIED)
                .cloned()
                .collect();
            for k in victims {
                self.applied.remove(&k);
            }
        }
    }
}

/// Why a state file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocError {
    /// Not JSON (the parser's words).
    Json(String),
    /// A field breaks its rule: `field` (a path such as `execution.pending`), `rule` ("must
    /// be a list").
    Field { field: String, rule: &'static str },
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::Json(m) => write!(f, "invalid JSON: {m}"),
            DocError::Field { field, rule } => write!(f, "{field} {rule}"),
        }
    }
}

impl std::error::Error for DocError {}

fn field_error(field: &str, rule: &'static str) -> DocError {
    DocError::Field {
        field: field.into(),
        rule,
    }
}

fn err<T>(field: &str, rule: &'static str) -> Result<T, DocError> {
    Err(field_error(field, rule))
}

fn req_str(o: &Map<String, Value>, k: &str) -> Result<String, DocError> {
    match o.get(k) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => err(k, "must be a non-empty string"),
    }
}

fn opt_str(o: &Map<String, Value>, k: &str) -> Result<Option<String>, DocError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        _ => err(k, "must be a string or null"),
    }
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl ThreadDoc {
    /// Validate a parsed file for `thread_id` (reference §7.5).
    pub(crate) fn from_value(v: &Value, thread_id: &str) -> Result<ThreadDoc, DocError> {
        let o = v
            .as_object()
            .ok_or(field_error("document", "must be an object"))?;
        // Python equality: 1 and 1.0 pass, as does `true` in the reference; we refuse `true`.
        if !o
            .get("schemaVersion")
            .and_then(Value::as_f64)
            .is_some_and(|f| f == 1.0)
        {
            return err("schemaVersion", "must be 1");
        }
        if o.get("threadId").and_then(Value::as_str) != Some(thread_id) {
            return err("threadId", "does not match");
        }
        let context_id = req_str(o, "contextId")?;
        let cwd = req_str(o, "cwd")?;
        let user_id = opt_str(o, "userId")?;
        let session_id = opt_str(o, "iacCodeSessionId")?;
        let ex = o
            .get("execution")
            .and_then(Value::as_object)
            .ok_or(field_error("execution", "must be an object"))?;
        let execution_id = req_str(ex, "executionId")?;
        let ros_invocation_id = req_str(ex, "rosInvocationId")?;
        let task_id = opt_str(ex, "taskId")?;
        let pipeline_sequence = match ex.get("pipelineSequence") {
            None => 0,
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) if i >= 0 => i,
                _ => return err("pipelineSequence", "must be a non-negative integer"),
            },
            Some(_) => return err("pipelineSequence", "must be a non-negative integer"),
        };
        let open_steps = match ex.get("pipelineOpenSteps") {
            None => BTreeSet::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|s| match s {
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    _ => err("pipelineOpenSteps", "must hold non-empty strings"),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return err("pipelineOpenSteps", "must be a list"),
        };
        let text_digests = match ex.get("textSnapshotDigests") {
            None => BTreeSet::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|s| match s {
                    Value::String(s) if is_hex64(s) => Ok(s.clone()),
                    _ => err("textSnapshotDigests", "must hold sha256 hex digests"),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return err("textSnapshotDigests", "must be a list"),
        };
        let mut pending = Vec::new();
        match ex.get("pending") {
            None => {}
            Some(Value::Object(p)) => {
                for (id, entry) in p {
                    let e = entry
                        .as_object()
                        .ok_or(field_error("pending entries", "must be objects"))?;
                    let value = e
                        .get("value")
                        .and_then(Value::as_object)
                        .ok_or(field_error("pending value", "must be an object"))?;
                    let sideband = match e.get("sideband") {
                        None => false,
                        Some(Value::Bool(b)) => *b,
                        Some(_) => return err("sideband", "must be a boolean"),
                    };
                    let value = filter_input(value);
                    if value.get("inputId").and_then(Value::as_str) != Some(id.as_str()) {
                        return err("pending inputId", "does not match its key");
                    }
                    pending.push((id.clone(), PendingInput { value, sideband }));
                }
            }
            Some(_) => return err("pending", "must be an object"),
        }
        let run_digests: SortedMap<String, String> = match o.get("runDigests") {
            Some(Value::Object(m)) => m
                .iter()
                .filter_map(|(k, v)| match v {
                    Value::String(d) if !k.is_empty() && !d.is_empty() => {
                        Some((k.clone(), d.clone()))
                    }
                    _ => None, // the reference drops malformed entries silently
                })
                .collect(),
            _ => return err("runDigests", "must be an object"),
        };
        let run_order = match o.get("runOrder") {
            None => Default::default(),
            Some(Value::Array(a)) => {
                let mut seen = BTreeSet::new();
                a.iter()
                    .filter_map(Value::as_str)
                    .filter(|r| run_digests.contains_key(*r) && seen.insert(*r))
                    .map(str::to_string)
                    .collect()
            }
            Some(_) => return err("runOrder", "must be a list"),
        };
        let mut applied = BTreeMap::new();
        match o.get("appliedResumeDigests") {
            Some(Value::Array(a)) => {
                for e in a {
                    let e = e.as_object().ok_or(field_error(
                        "appliedResumeDigests entries",
                        "must be objects",
                    ))?;
                    applied.insert(
                        (req_str(e, "executionId")?, req_str(e, "interruptId")?),
                        req_str(e, "digest")?,
                    );
                }
            }
            _ => return err("appliedResumeDigests", "must be a list"),
        }
        let mut in_doubt = BTreeMap::new();
        match o.get("deliveriesInDoubt") {
            None => {}
            Some(Value::Array(a)) => {
                for e in a {
                    let e = e
                        .as_object()
                        .ok_or(field_error("deliveriesInDoubt entries", "must be objects"))?;
                    in_doubt.insert(
                        (req_str(e, "executionId")?, req_str(e, "interruptId")?),
                        req_str(e, "digest")?,
                    );
                }
            }
            Some(_) => return err("deliveriesInDoubt", "must be a list"),
        }
        let terminal = match o.get("terminalExecutionIds") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|s| s.as_str().filter(|s| !s.is_empty()).map(str::to_string))
                .collect(),
            _ => return err("terminalExecutionIds", "must be a list"),
        };
        Ok(ThreadDoc {
            owner: crate::principal::Caller::Shared,
            thread_id: thread_id.to_string(),
            context_id,
            cwd,
            user_id,
            session_id,
            execution: Execution {
                execution_id,
                ros_invocation_id,
                task_id,
                pending,
                pipeline_sequence,
                open_steps,
                text_digests,
            },
            run_digests,
            run_order,
            applied,
            in_doubt,
            terminal,
        })
    }

    pub(crate) fn to_value(&self) -> Value {
        let ex = &self.execution;
        let pending: Map<String, Value> = ex
            .pending
            .iter()
            .map(|(id, p)| {
                (
                    id.clone(),
                    json!({"sideband": p.sideband, "value": Value::Object(p.value.clone())}),
                )
            })
            .collect();
        let applied: Vec<Value> = self
            .applied
            .iter()
            .map(|((e, i), d)| json!({"digest": d, "executionId": e, "interruptId": i}))
            .collect();
        let mut v = json!({
            "appliedResumeDigests": applied,
            "contextId": self.context_id,
            "cwd": self.cwd,
            "execution": {
                "executionId": ex.execution_id,
                "pending": pending,
                "pipelineOpenSteps": ex.open_steps.iter().collect::<Vec<_>>(),
                "pipelineSequence": ex.pipeline_sequence,
                "rosInvocationId": ex.ros_invocation_id,
                "taskId": ex.task_id,
                "textSnapshotDigests": ex.text_digests.iter().collect::<Vec<_>>(),
            },
            "iacCodeSessionId": self.session_id,
            "runDigests": self.run_digests,
            "schemaVersion": 1,
            "terminalExecutionIds": self.terminal.iter().collect::<Vec<_>>(),
            "threadId": self.thread_id,
            "userId": self.user_id,
        });
        if self.run_digests.len() > limits::RUN_ORDER_FROM
            && let Some(o) = v.as_object_mut()
        {
            o.insert("runOrder".into(), json!(self.run_order));
        }
        if !self.in_doubt.is_empty()
            && let Some(o) = v.as_object_mut()
        {
            let list: Vec<Value> = self
                .in_doubt
                .iter()
                .map(|((e, i), d)| json!({"digest": d, "executionId": e, "interruptId": i}))
                .collect();
            o.insert("deliveriesInDoubt".into(), Value::Array(list));
        }
        v
    }

    /// The file bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = json::pretty(&self.to_value());
        out.push(b'\n');
        out
    }

    /// Parse and validate file bytes.
    pub fn from_bytes(bytes: &[u8], thread_id: &str) -> Result<ThreadDoc, DocError> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| DocError::Json(e.to_string()))?;
        ThreadDoc::from_value(&v, thread_id)
    }
}

/// The file-name stem for a thread id (reference §7.2, with the REC for long ids).
pub(crate) fn stem(thread_id: &str) -> String {
    const RESERVED: &[&str] = &[
        "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
        "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
    ];
    let safe = !thread_id.is_empty()
        && thread_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && thread_id == thread_id.to_lowercase()
        && thread_id != "."
        && thread_id != ".."
        && !thread_id.ends_with('.')
        && !RESERVED.contains(
            &thread_id
                .trim_end_matches('.')
                .split('.')
                .next()
                .unwrap_or("")
                .to_uppercase()
                .as_str(),
        );
    if safe && thread_id.len() <= 200 {
        return thread_id.to_string();
    }
    if !safe {
        let enc = format!("aguiid~{}", crate::ids::hex(thread_id.as_bytes()));
        if enc.len() <= 200 {
            return enc;
        }
    }
    format!("aguihash~{}", crate::ids::sha256_hex(thread_id.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = include_str!("../../tests/fixtures/agui/01_after_interrupt.state.json");
    const S2: &str = include_str!("../../tests/fixtures/agui/02_after_resume.state.json");
    const TID: &str = "8473547e-c8ed-4aef-a84c-603a6a8d42da";

    #[test]
    fn reference_files_load_and_round_trip_byte_for_byte() {
        for s in [S1, S2] {
            let d = ThreadDoc::from_bytes(s.as_bytes(), TID).unwrap();
            assert_eq!(String::from_utf8(d.to_bytes()).unwrap(), s);
            let again = ThreadDoc::from_bytes(&d.to_bytes(), TID).unwrap();
            assert_eq!(again, d);
        }
        let d = ThreadDoc::from_bytes(S1.as_bytes(), TID).unwrap();
        assert_eq!(d.execution.pending.len(), 1);
        assert_eq!(d.execution.task_id.as_deref(), Some("task-1"));
        let d = ThreadDoc::from_bytes(S2.as_bytes(), TID).unwrap();
        assert_eq!(d.applied.len(), 1);
        assert!(d.terminal.contains("42924c7e-0ad6-461c-9fd1-95c1e82dc72c"));
    }

    fn digest_of(i: usize) -> String {
        format!("{i:064x}")
    }

    #[test]
    fn a_thread_with_more_runs_than_the_bound_keeps_the_newest_and_stays_loadable() {
        // Regression: runDigests and terminalExecutionIds grew for ever, until the file passed
        // the load bound and the thread answered 503 for good.
        let mut d = ThreadDoc::from_bytes(S2.as_bytes(), TID).unwrap();
        let first_loaded: Vec<String> = d.run_digests.keys().cloned().collect();
        let n = limits::MAX_RUN_DIGESTS + 25;
        for i in 0..n {
            d.record_run(&format!("turn-{i}"), &digest_of(i));
            d.retire(&format!("exec-{i}"));
        }
        assert_eq!(d.run_digests.len(), limits::MAX_RUN_DIGESTS);
        assert!(d.terminal.len() <= limits::MAX_TERMINAL_IDS);
        // The loaded (unordered, oldest) entries went first, then the oldest recorded ones.
        for k in &first_loaded {
            assert!(!d.run_digests.contains_key(k), "{k}");
        }
        let dropped = n - limits::MAX_RUN_DIGESTS; // plus every loaded entry
        for i in 0..dropped {
            assert!(
                !d.run_digests.contains_key(&format!("turn-{i}")),
                "turn-{i}"
            );
        }
        for i in dropped..n {
            assert_eq!(d.run_digests.get(&format!("turn-{i}")), Some(&digest_of(i)));
        }
        // The order survives a save and reload, so the next pruning still drops the oldest.
        let bytes = d.to_bytes();
        assert!(String::from_utf8_lossy(&bytes).contains("\"runOrder\""));
        let mut again = ThreadDoc::from_bytes(&bytes, TID).unwrap();
        assert_eq!(again, d);
        again.record_run("run-new", &digest_of(0));
        assert!(!again.run_digests.contains_key(&format!("turn-{dropped}")));
        assert!(
            again
                .run_digests
                .contains_key(&format!("turn-{}", dropped + 1))
        );
        assert!(
            (bytes.len() as u64) < 8 * 1024 * 1024,
            "{} bytes",
            bytes.len()
        );
    }

    #[test]
    fn huge_run_ids_are_bounded_by_bytes_and_the_newest_is_kept() {
        let mut d = ThreadDoc::from_bytes(S1.as_bytes(), TID).unwrap();
        let big = |c: char| c.to_string().repeat(6 * 1024 * 1024);
        for c in ['a', 'b', 'c', 'd'] {
            d.record_run(&big(c), &digest_of(1));
        }
        let total: usize = d.run_digests.keys().map(String::len).sum();
        assert!(total <= limits::MAX_RUN_DIGEST_BYTES, "{total}");
        assert!(d.run_digests.contains_key(&big('d')));
        assert!(!d.run_digests.contains_key(&big('a')));
    }

    #[test]
    fn pruning_never_drops_the_current_execution() {
        let mut d = ThreadDoc::from_bytes(S1.as_bytes(), TID).unwrap();
        let current = d.execution.execution_id.clone();
        d.retire(&current);
        d.applied
            .insert((current.clone(), "i".into()), digest_of(1));
        for i in 0..limits::MAX_TERMINAL_IDS + 10 {
            d.retire(&format!("{i:08}"));
            d.applied
                .insert((format!("{i:08}"), "i".into()), digest_of(i));
        }
        d.prune();
        assert!(d.terminal.contains(&current));
        assert!(d.applied.contains_key(&(current, "i".into())));
        assert_eq!(d.terminal.len(), limits::MAX_TERMINAL_IDS);
        assert_eq!(d.applied.len(), limits::MAX_OLD_APPLIED + 1);
    }

    #[test]
    fn ordinary_threads_are_written_without_a_run_order() {
        let mut d = ThreadDoc::from_bytes(S1.as_bytes(), TID).unwrap();
        for i in 0..limits::RUN_ORDER_FROM - d.run_digests.len() {
            d.record_run(&format!("r{i}"), &digest_of(i));
        }
        assert!(!String::from_utf8_lossy(&d.to_bytes()).contains("runOrder"));
    }

    #[test]
    fn overflowing_numbers_in_pending_values_survive_a_save_and_reload() {
        // Found by the state_file fuzz target: Python-style rendering turned 1e99999 into the
        // non-JSON token `Infinity`, so the file written for a thread could not be read back.
        for num in ["-9999999E99999", "1e400", "1.50", "-0.0", "1E2", "-0"] {
            let s = S1.replacen("\"options\": [", &format!("\"options\": [{num}, "), 1);
            let d = ThreadDoc::from_bytes(s.as_bytes(), TID).unwrap();
            let again = ThreadDoc::from_bytes(&d.to_bytes(), TID)
                .unwrap_or_else(|e| panic!("{num}: {e:?}"));
            // Number spellings may be normalised once (1.50 → 1.5, as Python does); the saved
            // bytes are a fixed point from then on.
            assert_eq!(again.to_bytes(), d.to_bytes(), "{num}");
            assert_eq!(
                ThreadDoc::from_bytes(&again.to_bytes(), TID).unwrap(),
                again
            );
        }
    }

    #[test]
    fn strict_validation() {
        let good: Value = serde_json::from_str(S1).unwrap();
        let mutate = |f: &dyn Fn(&mut Value)| {
            let mut v = good.clone();
            f(&mut v);
            ThreadDoc::from_value(&v, TID)
        };
        assert!(ThreadDoc::from_value(&good, "other").is_err());
        type Mutation = Box<dyn Fn(&mut Value)>;
        let bad: Vec<Mutation> = vec![
            Box::new(|v| v["schemaVersion"] = 2.into()),
            Box::new(|v| v["schemaVersion"] = true.into()),
            Box::new(|v| v["contextId"] = "".into()),
            Box::new(|v| v["cwd"] = Value::Null),
            Box::new(|v| v["userId"] = 5.into()),
            Box::new(|v| v["execution"]["executionId"] = Value::Null),
            Box::new(|v| v["execution"]["taskId"] = 1.into()),
            Box::new(|v| v["execution"]["pipelineSequence"] = (-1).into()),
            Box::new(|v| v["execution"]["pipelineSequence"] = true.into()),
            Box::new(|v| v["execution"]["textSnapshotDigests"] = json!(["XYZ"])),
            Box::new(|v| v["execution"]["pipelineOpenSteps"] = json!([""])),
            Box::new(|v| v["execution"]["pending"]["perm-1"]["value"]["inputId"] = "other".into()),
            Box::new(|v| v["execution"]["pending"]["perm-1"]["sideband"] = "no".into()),
            Box::new(|v| v["appliedResumeDigests"] = json!([{"executionId":"e"}])),
            Box::new(|v| v["runDigests"] = json!([])),
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("terminalExecutionIds");
            }),
        ];
        for f in bad {
            assert!(mutate(&*f).is_err());
        }
        // Malformed runDigests / terminal entries are dropped, not fatal (reference).
        let d = mutate(&|v| {
            v["runDigests"]["x"] = 5.into();
            v["terminalExecutionIds"] = json!(["", 3, "e1"]);
        })
        .unwrap();
        assert!(!d.run_digests.contains_key("x"));
        assert_eq!(d.terminal.len(), 1);
        // Unknown pending value fields are filtered out by the whitelist.
        let d = mutate(&|v| v["execution"]["pending"]["perm-1"]["value"]["question"] = "q".into())
            .unwrap();
        assert!(!d.execution.pending[0].1.value.contains_key("question"));
    }

    #[test]
    fn stems() {
        assert_eq!(stem("abc"), "abc");
        assert_eq!(stem("ABC"), "aguiid~414243");
        assert_eq!(stem("a.b-c_d"), "a.b-c_d");
        assert_eq!(stem("con"), "aguiid~636f6e");
        assert_eq!(stem("x."), "aguiid~782e");
        assert_eq!(stem(".."), "aguiid~2e2e");
        assert_eq!(stem("a/b"), "aguiid~612f62");
        assert_eq!(stem("日本"), "aguiid~e697a5e69cac");
        assert!(stem(&"X".repeat(100)).starts_with("aguihash~"));
        assert_eq!(stem(&"x".repeat(200)), "x".repeat(200));
        // REC: long safe ids hash instead of failing.
        assert_eq!(stem(&"x".repeat(240)).len(), 9 + 64);
        assert_eq!(stem(&"x".repeat(300)).len(), 9 + 64);
    }
}
