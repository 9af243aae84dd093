//! `Emitter`: writes A2A frames to one SSE response and to the task's subscribers.

use super::*;

/// Writes frames to one SSE response and to the task's subscribers.
pub(super) struct Emitter<'a> {
    pub(super) sock: &'a mut TcpStream,
    pub(super) shared: &'a Arc<Shared>,
    pub(super) task_id: String,
    pub(super) context_id: String,
    pub(super) session_id: String,
    pub(super) req_id: Value,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) delay: Duration,
}

/// Whom a stream speaks for: the task's ids and its cancel flag.
#[derive(Clone)]
pub(super) struct TaskIds {
    pub(super) task_id: String,
    pub(super) context_id: String,
    pub(super) session_id: String,
    pub(super) cancel: Arc<AtomicBool>,
}

impl<'a> Emitter<'a> {
    /// Write the SSE head; the frames that follow answer JSON-RPC request `req_id` for `task`.
    pub(super) fn open(
        sock: &'a mut TcpStream,
        shared: &'a Arc<Shared>,
        task: TaskIds,
        req_id: Value,
    ) -> io::Result<Emitter<'a>> {
        sock.write_all(SSE_HEAD)?;
        Ok(Emitter {
            sock,
            shared,
            task_id: task.task_id,
            context_id: task.context_id,
            session_id: task.session_id,
            req_id,
            cancel: task.cancel,
            delay: shared.cfg.frame_delay,
        })
    }
}

/// Where a big frame's generated text goes ([`Emitter::streamed`]): unique per frame, so no
/// id or text that came from a client can be taken for it.
pub(super) fn big_mark() -> String {
    format!("@@big-{}@@", ids::hex32())
}

/// `json` (a serialized value holding `mark`) with a note in place of the `mib` MiB of text
/// that `mark` stands for: what subscribers and the task's history get.
fn noted(json: &str, mark: &str, mib: u64) -> Value {
    let note = format!("({mib} MiB of generated text)");
    serde_json::from_str(&json.replacen(mark, &note, 1)).unwrap_or(Value::Null)
}

/// The stream must end now (cancelled, or the client went away).
pub(super) struct Stop;

impl Emitter<'_> {
    pub(super) fn frame(&mut self, result: Value) -> Result<(), Stop> {
        let v = json!({"result": result, "id": self.req_id, "jsonrpc": "2.0"});
        let subs = {
            let mut tasks = lock(&self.shared.tasks);
            match tasks.get_mut(&self.task_id) {
                Some(t) => {
                    t.subscribers.retain(|s| s.try_send(v.clone()).is_ok());
                    t.subscribers.len()
                }
                None => 0,
            }
        };
        let _ = subs;
        self.raw(&serde_json::to_vec(&v).unwrap_or_default())
    }

    pub(super) fn raw(&mut self, data: &[u8]) -> Result<(), Stop> {
        let mut frame = Vec::with_capacity(data.len() + 10);
        frame.extend_from_slice(b"data: ");
        frame.extend_from_slice(data);
        frame.extend_from_slice(b"\r\n\r\n");
        write_chunk(self.sock, &frame).map_err(|_| Stop)
    }

    pub(super) fn pause(&self, d: Duration) -> Result<(), Stop> {
        let mut left = d;
        while !left.is_zero() {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(Stop);
            }
            let step = left.min(Duration::from_millis(20));
            std::thread::sleep(step);
            left -= step;
        }
        if self.cancel.load(Ordering::SeqCst) {
            return Err(Stop);
        }
        Ok(())
    }

    pub(super) fn status(
        &mut self,
        state: &'static str,
        message: Option<Value>,
        timestamp: bool,
        iac: Value,
    ) -> Result<(), Stop> {
        self.pause(self.delay)?;
        let mut st = json!({"state": state});
        if let Some(m) = &message {
            st["message"] = m.clone();
        }
        if timestamp {
            st["timestamp"] = now_ts().into();
        }
        {
            let mut tasks = lock(&self.shared.tasks);
            if let Some(t) = tasks.get_mut(&self.task_id) {
                if t.state != "TASK_STATE_CANCELED" {
                    t.state = state;
                }
                if let Some(m) = &message {
                    t.last_message = Some(m.clone());
                    t.history.push(m.clone());
                }
            }
        }
        let upd = json!({"statusUpdate": {"taskId": self.task_id, "contextId": self.context_id, "status": st, "metadata": {"iac_code": iac}}});
        self.frame(upd)
    }

    pub(super) fn with_session(&self, mut iac: Value) -> Value {
        if let Some(o) = iac.as_object_mut() {
            o.insert("iacCodeSessionId".into(), self.session_id.clone().into());
        }
        iac
    }

    pub(super) fn msg(&self, id_suffix: &str, text: &str) -> Value {
        json!({"messageId": format!("{}-{id_suffix}", self.task_id), "contextId": self.context_id, "taskId": self.task_id, "role": "ROLE_AGENT", "parts": [{"text": text}]})
    }

    pub(super) fn text(&mut self, t: &str) -> Result<(), Stop> {
        let m = self.msg("message", t);
        let iac = self.with_session(json!({}));
        self.status("TASK_STATE_WORKING", Some(m), false, iac)
    }

    /// `n` text deltas as fast as the socket takes them: one frame serialized once (the real
    /// kernel's `statusUpdate` shape), written many per chunk. The benchmark's flood source,
    /// so that the source is never what limits the measured throughput.
    pub(super) fn flood(&mut self, n: u64, t: &str) -> Result<(), Stop> {
        let m = self.msg("message", t);
        let iac = self.with_session(json!({}));
        let upd = json!({"statusUpdate": {"taskId": self.task_id, "contextId": self.context_id, "status": {"state": "TASK_STATE_WORKING", "message": m}, "metadata": {"iac_code": iac}}});
        let v = json!({"result": upd, "id": self.req_id, "jsonrpc": "2.0"});
        let mut frame = b"data: ".to_vec();
        frame.extend(serde_json::to_vec(&v).unwrap_or_default());
        frame.extend_from_slice(b"\r\n\r\n");
        let per_chunk = ((64 * 1024) / frame.len()).max(1) as u64;
        let batch = frame.repeat(per_chunk as usize);
        let mut left = n;
        while left > 0 {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(Stop);
            }
            let k = left.min(per_chunk);
            write_chunk(self.sock, &batch[..frame.len() * k as usize]).map_err(|_| Stop)?;
            left -= k;
        }
        Ok(())
    }

    /// A `WORKING` status whose one string `mark` (in the message or in `iac`) is `line`
    /// repeated to `mib` MiB, generated while it is written ([`Emitter::streamed`]). The task's
    /// last message and history keep a note in place of the text.
    pub(super) fn big_status(
        &mut self,
        message: Option<Value>,
        iac: Value,
        mark: &str,
        line: &str,
        mib: u64,
    ) -> Result<(), Stop> {
        self.pause(self.delay)?;
        let mut st = json!({"state": "TASK_STATE_WORKING"});
        if let Some(m) = message {
            let note = noted(&serde_json::to_string(&m).unwrap_or_default(), mark, mib);
            if let Some(t) = lock(&self.shared.tasks).get_mut(&self.task_id) {
                t.last_message = Some(note.clone());
                t.history.push(note);
            }
            st["message"] = m;
        }
        let upd = json!({"statusUpdate": {"taskId": self.task_id, "contextId": self.context_id, "status": st, "metadata": {"iac_code": iac}}});
        self.streamed(upd, mark, line, mib)
    }

    /// Write a frame whose string `mark` is `line` repeated to `mib` MiB, 64 KiB per chunk
    /// as it is generated. The demo kernel runs in the server's process: a frame built whole
    /// (value, serialization, framing, chunk: four copies) held 40 MiB of the server's memory
    /// per `big 10 10` whose client stopped reading (issue 36, fault 2). Subscribers get the
    /// frame with a note in place of the text. A cancel cuts the text short, never the frame.
    fn streamed(&mut self, result: Value, mark: &str, line: &str, mib: u64) -> Result<(), Stop> {
        let v = json!({"result": result, "id": self.req_id, "jsonrpc": "2.0"});
        let whole = serde_json::to_string(&v).unwrap_or_default();
        let Some((head, tail)) = whole.split_once(mark) else {
            return self.raw(whole.as_bytes());
        };
        if let Some(t) = lock(&self.shared.tasks).get_mut(&self.task_id)
            && !t.subscribers.is_empty()
        {
            let nv = noted(&whole, mark, mib);
            t.subscribers.retain(|s| s.try_send(nv.clone()).is_ok());
        }
        let quoted = serde_json::to_string(line).unwrap_or_default();
        let escaped = quoted.get(1..quoted.len() - 1).unwrap_or("");
        let per_chunk = ((64 * 1024) / escaped.len().max(1)).max(1);
        let chunk = escaped.repeat(per_chunk);
        let mut left = (((mib as usize) << 20) / line.len().max(1)).max(1);
        write_chunk(self.sock, format!("data: {head}").as_bytes()).map_err(|_| Stop)?;
        let mut cancelled = false;
        while left > 0 {
            if self.cancel.load(Ordering::SeqCst) {
                cancelled = true;
                break;
            }
            let k = left.min(per_chunk);
            write_chunk(self.sock, &chunk.as_bytes()[..escaped.len() * k]).map_err(|_| Stop)?;
            left -= k;
        }
        write_chunk(self.sock, format!("{tail}\r\n\r\n").as_bytes()).map_err(|_| Stop)?;
        if cancelled { Err(Stop) } else { Ok(()) }
    }

    pub(super) fn meta(&mut self, iac: Value) -> Result<(), Stop> {
        let iac = self.with_session(iac);
        self.status("TASK_STATE_WORKING", None, false, iac)
    }

    pub(super) fn usage(&mut self, input: f64, output: f64) -> Result<(), Stop> {
        self.meta(json!({"usage": {"cachedInputTokens": 0.0, "outputTokens": output, "inputTokens": input, "totalTokens": input + output, "provider": "demo", "model": "demo-1"}}))
    }

    /// The end of an ordinary turn: the full text with `assistantFinal`, then input-required.
    pub(super) fn finish_turn(&mut self, full_text: &str) -> Result<(), Stop> {
        let iac = self.with_session(json!({"assistantFinal": {"complete": true}}));
        let m = (!full_text.is_empty()).then(|| self.msg("2", full_text));
        self.status("TASK_STATE_WORKING", m, true, iac)?;
        let iac = self.with_session(json!({}));
        self.status("TASK_STATE_INPUT_REQUIRED", None, true, iac)
    }

    /// The stream's end after `outcome`: the task's cancelled status when a cancel cut the
    /// turn short, the task no longer live, the last chunk.
    pub(super) fn end(mut self, outcome: Result<(), Stop>) {
        if outcome.is_err() && self.cancel.load(Ordering::SeqCst) {
            self.cancelled();
        }
        super::tasks::finish_task(self.shared, &self.task_id);
        let _ = self.sock.write_all(crate::server::http::LAST_CHUNK);
    }

    pub(super) fn cancelled(&mut self) {
        let m = self.msg("5", "Task canceled.");
        let iac = self.with_session(json!({}));
        self.cancel.store(false, Ordering::SeqCst);
        let delay = std::mem::replace(&mut self.delay, Duration::ZERO);
        let _ = self.status("TASK_STATE_CANCELED", Some(m), true, iac);
        self.delay = delay;
    }

    // ---- pipeline envelopes ----

    pub(super) fn envelope(
        &mut self,
        event_type: &str,
        scope: &str,
        status: &str,
        data: Value,
        extra: Value,
    ) -> Value {
        let seq = {
            let mut tasks = lock(&self.shared.tasks);
            match tasks.get_mut(&self.task_id) {
                Some(t) => {
                    t.pipeline_seq += 1;
                    t.pipeline_seq
                }
                None => 0,
            }
        };
        let mut env = json!({
            "schemaVersion": "1.0",
            "extensionUri": "urn:iac-code:a2a:pipeline-events:v1",
            "eventId": format!("evt-{}", ids::hex32()),
            "sequence": seq,
            "createdAt": now_ts(),
            "eventType": event_type,
            "scope": scope,
            "pipelineRunId": self.context_id,
            "taskId": self.task_id,
            "contextId": self.context_id,
            "pipelineName": "selling",
            "status": status,
            "data": data,
            "iacCodeSessionId": self.session_id,
        });
        if let (Some(e), Some(x)) = (env.as_object_mut(), extra.as_object()) {
            for (k, v) in x {
                e.insert(k.clone(), v.clone());
            }
        }
        if let Some(t) = lock(&self.shared.tasks).get_mut(&self.task_id) {
            t.pipeline_events.push(env.clone());
        }
        env
    }

    /// Send envelopes in one frame (a batch when more than one), numbers as doubles.
    /// One pipeline event on its own (no input request).
    pub(super) fn emit(
        &mut self,
        event_type: &str,
        scope: &str,
        status: &str,
        data: Value,
        extra: Value,
    ) -> Result<(), Stop> {
        let e = self.envelope(event_type, scope, status, data, extra);
        self.pipeline(vec![e], None)
    }

    /// The pipeline's first envelope (`data`: its request, type, steps).
    pub(super) fn pipeline_started(&mut self, data: Value) -> Result<(), Stop> {
        self.emit("pipeline_started", "pipeline", "working", data, json!({}))
    }

    /// The pipeline's last envelope (`data`: its steps, whether it ended early).
    pub(super) fn pipeline_completed(&mut self, data: Value) -> Result<(), Stop> {
        self.emit(
            "pipeline_completed",
            "pipeline",
            "completed",
            data,
            json!({}),
        )
    }

    pub(super) fn pipeline(&mut self, envs: Vec<Value>, input: Option<Value>) -> Result<(), Stop> {
        let last_status = envs
            .last()
            .and_then(|e| e["status"].as_str())
            .unwrap_or("working")
            .to_string();
        let state = match last_status.as_str() {
            "input_required" | "waiting_input" => "TASK_STATE_INPUT_REQUIRED",
            "failed" => "TASK_STATE_FAILED",
            "completed" => "TASK_STATE_COMPLETED",
            "canceled" => "TASK_STATE_CANCELED",
            _ => "TASK_STATE_WORKING",
        };
        let envs: Vec<Value> = envs.into_iter().map(doubles).collect();
        let mut iac = if envs.len() == 1 {
            json!({"pipeline": envs[0]})
        } else {
            json!({"pipelineBatch": {"schemaVersion": "1.0", "extensionUri": "urn:iac-code:a2a:pipeline-events:v1", "events": envs}})
        };
        if let Some(i) = input {
            let i = doubles(i);
            // The kernel repeats a resource selection where the non-pipeline one comes.
            if i["kind"] == "cloud_resource_selection" {
                iac["inputRequired"] = i.clone();
            }
            iac["input"] = i;
        }
        self.status(state, None, false, iac)
    }
}

/// Proto-JSON: every number inside a Struct is a double.
pub(super) fn doubles(v: Value) -> Value {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e15 {
                serde_json::from_str(&format!("{f:.1}")).unwrap_or(Value::Number(n))
            } else {
                Value::Number(n)
            }
        }
        Value::Array(a) => Value::Array(a.into_iter().map(doubles).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, doubles(v))).collect()),
        other => other,
    }
}

/// The steps the demo's scripts speak in (`scripts.rs`).
impl Emitter<'_> {
    pub(super) fn meta_state(&mut self, state: &'static str) -> Result<(), Stop> {
        let iac = self.with_session(json!({}));
        self.status(state, None, true, iac)
    }

    /// One working pipeline event scoped to `step`.
    pub(super) fn on_step(
        &mut self,
        event_type: &str,
        data: Value,
        step: &Value,
    ) -> Result<(), Stop> {
        self.emit(event_type, "step", "working", data, json!({"step": step}))
    }
}
