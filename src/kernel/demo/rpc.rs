//! JSON-RPC dispatch and the non-script endpoints: tasks, cancel, subscribe, ensure-restored,
//! pipeline state, and the start of a streaming turn.

use super::*;

/// The kernel's JSON-RPC answer for an unknown (or no longer active) task.
pub(super) fn task_not_found(id: &Value, message: &str) -> Value {
    rpc_error(id, -32001, message, "TASK_NOT_FOUND")
}

/// `SubscribeToTask` and `SendStreamingMessage` name the task in their error.
pub(super) fn unknown_task(id: &Value, tid: &str) -> Value {
    task_not_found(id, &format!("Task {tid} not found"))
}

/// A cancel that stops a task keeps its context busy for `cancel_linger`, and is answered
/// only then.
fn linger(shared: &Arc<Shared>, answer: &Value) {
    let linger = shared.cfg.cancel_linger;
    let Some(ctx) = answer["result"]["contextId"].as_str() else {
        return;
    };
    if linger.is_zero() {
        return;
    }
    let until = crate::clock::Clock::now(&crate::clock::SystemClock) + linger;
    lock(&shared.stopping).insert(ctx.to_string(), until);
    std::thread::sleep(linger);
    let mut stopping = lock(&shared.stopping);
    if stopping.get(ctx) == Some(&until) {
        stopping.remove(ctx);
    }
}

pub(super) fn rpc_error(id: &Value, code: i64, message: &str, reason: &str) -> Value {
    json!({"error": {"code": code, "message": message, "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org", "metadata": {}}]}, "id": id, "jsonrpc": "2.0"})
}

pub(super) fn rpc(mut sock: TcpStream, shared: &Arc<Shared>, req: Req) -> io::Result<()> {
    let Ok(v) = serde_json::from_slice::<Value>(&req.body) else {
        return respond(
            &mut sock,
            200,
            &json!({"error": {"code": -32700, "message": "Parse error"}, "id": null, "jsonrpc": "2.0"}),
        );
    };
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    if req.head.header("a2a-version") != Some(b"1.0") {
        return respond(
            &mut sock,
            200,
            &rpc_error(
                &id,
                -32009,
                "A2A version '0.3' is not supported by this handler. Expected version '1.0'.",
                "VERSION_NOT_SUPPORTED",
            ),
        );
    }
    let params = v.get("params").cloned().unwrap_or(Value::Null);
    match v.get("method").and_then(Value::as_str).unwrap_or("") {
        "SendStreamingMessage" => send_streaming(sock, shared, id, params),
        "SendMessage" => send_message(&mut sock, shared, id, params),
        "GetTask" => {
            let tid = params["id"].as_str().unwrap_or("");
            let body = match lock(&shared.tasks).get(tid) {
                Some(t) => json!({"result": snapshot(t), "id": id, "jsonrpc": "2.0"}),
                None => task_not_found(&id, "Task not found"),
            };
            respond(&mut sock, 200, &body)
        }
        "CancelTask" => {
            let tid = params["id"].as_str().unwrap_or("");
            let body = cancel_task(shared, tid, &id);
            linger(shared, &body);
            respond(&mut sock, 200, &body)
        }
        "SubscribeToTask" => subscribe(sock, shared, id, params),
        _ => respond(
            &mut sock,
            200,
            &json!({"error": {"code": -32601, "message": "Method not found"}, "id": id, "jsonrpc": "2.0"}),
        ),
    }
}

pub(super) fn cancel_task(shared: &Arc<Shared>, tid: &str, id: &Value) -> Value {
    let mut tasks = lock(&shared.tasks);
    let Some(t) = tasks.get_mut(tid) else {
        return task_not_found(id, "Task not found");
    };
    let waiting_on_input = t.state == "TASK_STATE_INPUT_REQUIRED" && t.pending.is_some();
    let cancelable = t.live || waiting_on_input || t.state == "TASK_STATE_WORKING";
    if !cancelable || t.state == "TASK_STATE_CANCELED" {
        return rpc_error(id, -32002, "Task cannot be canceled", "TASK_NOT_CANCELABLE");
    }
    t.cancel.store(true, Ordering::SeqCst);
    if !t.live {
        t.state = "TASK_STATE_CANCELED";
        t.pending = None;
        t.last_message = Some(agent_message(t, &format!("{}-5", t.id), "Task canceled."));
    } else {
        // The producer emits the CANCELED status; report the outcome now.
        t.state = "TASK_STATE_CANCELED";
        t.last_message = Some(agent_message(t, &format!("{}-5", t.id), "Task canceled."));
    }
    json!({"result": snapshot(t), "id": id, "jsonrpc": "2.0"})
}

pub(super) fn ensure_restored(
    sock: &mut TcpStream,
    shared: &Arc<Shared>,
    req: &Req,
) -> io::Result<()> {
    let v: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let tid = v["taskId"].as_str().unwrap_or("");
    let sid = v["sessionId"].as_str().unwrap_or("");
    let tasks = lock(&shared.tasks);
    match tasks.get(tid) {
        Some(t)
            if t.session_id == sid
                && v["cwd"]
                    .as_str()
                    .is_none_or(|c| Some(c) == t.cwd.as_deref()) =>
        {
            respond(sock, 200, &json!({"status": "current"}))
        }
        Some(_) => respond(sock, 404, &json!({"status": "not_found"})),
        None => respond(
            sock,
            400,
            &json!({"error": "Invalid session restore request."}),
        ),
    }
}

pub(super) fn pipeline_state(
    sock: &mut TcpStream,
    shared: &Arc<Shared>,
    req: &Req,
) -> io::Result<()> {
    let q = req.head.query().unwrap_or("");
    let mut task_id = String::new();
    let mut after: i64 = 0;
    for kv in q.split('&') {
        if let Some((k, v)) = kv.split_once('=') {
            match k {
                "taskId" => task_id = http::percent_decode(v),
                "afterSequence" => match v.parse::<i64>() {
                    Ok(n) if n >= 0 => after = n,
                    _ => {
                        return respond(
                            sock,
                            400,
                            &json!({"error": "afterSequence must be a non-negative integer"}),
                        );
                    }
                },
                _ => {}
            }
        }
    }
    let tasks = lock(&shared.tasks);
    let Some(t) = tasks.get(&task_id).filter(|t| {
        matches!(
            t.script,
            Script::Pipeline | Script::PipelineSlow | Script::Candidates
        )
    }) else {
        return respond(sock, 404, &json!({"error": "A2A pipeline state not found"}));
    };
    let events: Vec<Value> = t
        .pipeline_events
        .iter()
        .filter(|e| e["sequence"].as_i64().unwrap_or(0) > after)
        .cloned()
        .collect();
    let status = match t.state {
        "TASK_STATE_INPUT_REQUIRED" => "waiting_input",
        "TASK_STATE_COMPLETED" => "completed",
        "TASK_STATE_FAILED" => "failed",
        "TASK_STATE_CANCELED" => "canceled",
        _ => "working",
    };
    let body = json!({
        "snapshot": {
            "contextId": t.context_id,
            "lastSequence": t.pipeline_seq,
            "pendingInput": t.pending.as_ref().map(|p| p.input.clone()),
            "pipelineName": "selling",
            "pipelineRunId": t.context_id,
            "schemaVersion": "1.2",
            "status": status,
            "taskId": t.id,
        },
        "events": events,
    });
    respond(sock, 200, &body)
}

pub(super) fn user_text(message: &Value) -> String {
    message["parts"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

pub(super) fn send_streaming(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    params: Value,
) -> io::Result<()> {
    let message = params["message"].clone();
    let iac = message["metadata"]["iac_code"].clone();
    if let Some(tid) = message["taskId"].as_str() {
        return resume(sock, shared, id, tid.to_string(), message);
    }
    let context_id = message["contextId"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("ctx-{}", &ids::hex32()[..12]));
    let text = user_text(&message);
    let run_mode = iac["run_mode"].as_str().or(iac["runMode"].as_str());
    let mut script = choose(&text, run_mode);
    // As the kernel: no resource selection unless the client said it can answer one; the
    // demo says what is missing.
    if matches!(script, Script::Select | Script::PipelineSelect)
        && !super::scripts::selector_advertised(&iac)
    {
        script = Script::SelectorMissing;
    }
    let still_stopping = lock(&shared.stopping)
        .get(&context_id)
        .is_some_and(|until| *until > crate::clock::Clock::now(&crate::clock::SystemClock));
    if still_stopping {
        // The session is still busy with the cancelled task: this one fails.
        script = Script::Fail;
    }
    match script {
        Script::Fault(Fault::Http500) => {
            return sock.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\nboom!");
        }
        Script::Fault(Fault::RpcError) => {
            return respond(
                &mut sock,
                200,
                &rpc_error(&id, -32603, "Internal error", "INTERNAL"),
            );
        }
        Script::Fault(Fault::Hang) => {
            let mut tmp = [0u8; 1];
            let _ = sock.set_read_timeout(Some(Duration::from_secs(600)));
            let _ = sock.read(&mut tmp);
            return Ok(());
        }
        _ => {}
    }
    let session_id = lock(&shared.sessions)
        .entry(context_id.clone())
        .or_insert_with(ids::uuid4)
        .clone();
    let task_id = ids::uuid4();
    let cancel = Arc::new(AtomicBool::new(false));
    let mut echo = message.clone();
    if let Some(o) = echo.as_object_mut() {
        o.insert("contextId".into(), context_id.clone().into());
        o.insert("taskId".into(), task_id.clone().into());
        if let Some(ic) = o
            .get_mut("metadata")
            .and_then(|m| m.get_mut("iac_code"))
            .and_then(Value::as_object_mut)
        {
            ic.remove("llm_headers");
        }
    }
    let echo = json!({"messageId": echo["messageId"], "contextId": context_id, "taskId": task_id, "role": "ROLE_USER", "parts": echo["parts"], "metadata": doubles(echo["metadata"].clone())});
    lock(&shared.tasks).insert(
        task_id.clone(),
        Task {
            id: task_id.clone(),
            context_id: context_id.clone(),
            session_id: session_id.clone(),
            script,
            state: "TASK_STATE_SUBMITTED",
            last_message: None,
            history: vec![echo.clone()],
            pending: None,
            answered: Vec::new(),
            live: true,
            cancel: cancel.clone(),
            subscribers: Vec::new(),
            pipeline_events: Vec::new(),
            pipeline_seq: 0,
            cwd: iac["cwd"].as_str().map(str::to_string),
        },
    );
    let task = TaskIds {
        task_id: task_id.clone(),
        context_id,
        session_id,
        cancel: cancel.clone(),
    };
    let mut em = Emitter::open(&mut sock, shared, task, id)?;
    let task = json!({"task": {"id": task_id, "contextId": em.context_id, "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [echo]}});
    let mut outcome = em.frame(task);
    if outcome.is_ok() {
        outcome = run_script(&mut em, script, &text);
    }
    em.end(outcome);
    Ok(())
}

pub(super) fn send_message(
    sock: &mut TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    params: Value,
) -> io::Result<()> {
    // Only sideband permission answers use SendMessage; acknowledge like the kernel does.
    let message = &params["message"];
    let data = message["parts"][0]["data"].clone();
    let tid = message["taskId"].as_str().unwrap_or("");
    let ctx = {
        let mut tasks = lock(&shared.tasks);
        let Some(t) = tasks.get_mut(tid) else {
            return respond(sock, 200, &task_not_found(&id, "Task not found"));
        };
        if let Some(i) = data["inputId"].as_str() {
            t.answered.push(i.to_string());
        }
        t.context_id.clone()
    };
    let ack = json!({"result": {"message": {"messageId": format!("permission-ack-{}", ids::hex32()), "contextId": ctx, "taskId": tid, "role": "ROLE_AGENT", "parts": [{"data": {"toolUseId": data["toolUseId"], "accepted": true, "schemaVersion": 1.0, "inputId": data["inputId"], "decision": data["decision"], "kind": "permission_ack"}, "mediaType": "application/json"}]}}, "id": id, "jsonrpc": "2.0"});
    respond(sock, 200, &ack)
}

pub(super) fn subscribe(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    params: Value,
) -> io::Result<()> {
    let tid = params["id"].as_str().unwrap_or("").to_string();
    let rx: Receiver<Value>;
    let snap = {
        let mut tasks = lock(&shared.tasks);
        let Some(t) = tasks.get_mut(&tid) else {
            return respond(&mut sock, 200, &unknown_task(&id, &tid));
        };
        if !t.live {
            return respond(
                &mut sock,
                200,
                &task_not_found(&id, &format!("Task {tid} is not active")),
            );
        }
        let (tx, r) = sync_channel(1024);
        t.subscribers.push(tx);
        rx = r;
        snapshot(t)
    };
    sock.write_all(SSE_HEAD)?;
    let first = json!({"result": {"task": snap}, "id": id, "jsonrpc": "2.0"});
    let mut frame = b"data: ".to_vec();
    frame.extend(serde_json::to_vec(&first).unwrap_or_default());
    frame.extend_from_slice(b"\r\n\r\n");
    write_chunk(&mut sock, &frame)?;
    while let Ok(mut v) = rx.recv() {
        v["id"] = id.clone();
        let state = v["result"]["statusUpdate"]["status"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let mut frame = b"data: ".to_vec();
        frame.extend(serde_json::to_vec(&v).unwrap_or_default());
        frame.extend_from_slice(b"\r\n\r\n");
        if write_chunk(&mut sock, &frame).is_err() {
            return Ok(());
        }
        if matches!(
            state.as_str(),
            "TASK_STATE_INPUT_REQUIRED"
                | "TASK_STATE_COMPLETED"
                | "TASK_STATE_FAILED"
                | "TASK_STATE_CANCELED"
                | "TASK_STATE_REJECTED"
        ) {
            break;
        }
    }
    let _ = sock.write_all(http::LAST_CHUNK);
    Ok(())
}
