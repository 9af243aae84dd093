//! Answers to interrupts: permission decisions and question answers continue the scripts.

use super::*;

pub(super) fn resume(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    tid: String,
    message: Value,
) -> io::Result<()> {
    let (context_id, session_id, script, pending, cancel, known_ctx) = {
        let mut tasks = lock(&shared.tasks);
        let Some(t) = tasks.get_mut(&tid) else {
            return respond(&mut sock, 200, &unknown_task(&id, &tid));
        };
        let known_ctx = message["contextId"]
            .as_str()
            .is_none_or(|c| c == t.context_id);
        (
            t.context_id.clone(),
            t.session_id.clone(),
            t.script,
            t.pending.clone(),
            t.cancel.clone(),
            known_ctx,
        )
    };
    if !known_ctx {
        return invalid_params(&mut sock, &id, "Context does not match the task.");
    }
    // a2a-sdk's answer to a message for a failed task (`TaskState` 4).
    if lock(&shared.tasks)
        .get(&tid)
        .is_some_and(|t| t.state == "TASK_STATE_FAILED")
    {
        let e = format!("Task {tid} is in terminal state: 4");
        return invalid_params(&mut sock, &id, &e);
    }
    let ids = TaskIds {
        task_id: tid.clone(),
        context_id,
        session_id,
        cancel,
    };
    let data = message["parts"]
        .as_array()
        .and_then(|ps| {
            ps.iter()
                .find_map(|p| p.get("data").filter(|d| d.is_object()))
        })
        .cloned();
    let text = user_text(&message);
    // A duplicate permission answer is acknowledged and nothing runs again.
    if let Some(d) = &data {
        let input_id = d["inputId"].as_str().unwrap_or("").to_string();
        let already = lock(&shared.tasks)
            .get(&tid)
            .is_some_and(|t| t.answered.contains(&input_id));
        if already {
            let mut em = Emitter::open(&mut sock, shared, ids.clone(), id)?;
            // An acknowledgement only: the task's own state does not change.
            let upd = json!({"statusUpdate": {"taskId": em.task_id, "contextId": em.context_id, "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": {"inputReceived": {"kind": "permission", "inputId": input_id, "toolUseId": d["toolUseId"], "decision": d["decision"], "recovered": true, "duplicate": true}}}}});
            let _ = em.frame(upd);
            let _ = sock.write_all(http::LAST_CHUNK);
            return Ok(());
        }
    }
    let Some(pending) = pending else {
        // Not waiting: guidance into a live pipeline, or a new message on an idle task.
        let mut em = Emitter::open(&mut sock, shared, ids.clone(), id)?;
        if matches!(script, Script::Pipeline | Script::Candidates) {
            let _ = em.emit(
                "interrupt_received",
                "interrupt",
                "working",
                json!({"text": text}),
                json!({}),
            );
            let _ = em.emit(
                "interrupt_classified",
                "interrupt",
                "working",
                json!({"classification": "guidance"}),
                json!({}),
            );
        }
        let _ = sock.write_all(http::LAST_CHUNK);
        return Ok(());
    };
    if pending.kind == "permission" {
        let mismatch = |sock: &mut TcpStream, id: &Value| {
            let e = "Permission response payload fields do not match schemaVersion 1.";
            invalid_params(sock, id, e)
        };
        let Some(d) =
            data.filter(|d| d["kind"] == "permission" && d["inputId"] == pending.input["inputId"])
        else {
            return mismatch(&mut sock, &id);
        };
        let decision = d["decision"].as_str().unwrap_or("deny").to_string();
        if !matches!(decision.as_str(), "allow_once" | "deny") {
            return mismatch(&mut sock, &id);
        }
        answered(shared, &tid, d["inputId"].as_str().unwrap_or(""));
        let mut em = Emitter::open(&mut sock, shared, ids.clone(), id)?;
        let tool = d["toolUseId"].as_str().unwrap_or("").to_string();
        let r = (|| -> Result<(), Stop> {
            em.status("TASK_STATE_WORKING", None, false, json!({"inputReceived": {"inputId": d["inputId"], "kind": "permission", "toolUseId": tool}}))?;
            if decision == "allow_once" {
                em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "completed", "result": "Exit code: 0"}}))?;
                em.text("Created the ")?;
                em.text("file.")?;
                em.usage(130.0, 8.0)?;
                em.finish_turn("I'll create it.Created the file.")
            } else {
                em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "failed", "result": "The user explicitly denied this tool operation. Do not retry it."}}))?;
                em.text("Understood, I did not run the command.")?;
                em.usage(130.0, 8.0)?;
                em.finish_turn("I'll create it.Understood, I did not run the command.")
            }
        })();
        em.end(r);
        return Ok(());
    }
    if pending.kind == "resource" || pending.kind == "pipeline-resource" {
        return resource_answer(sock, shared, id, ids, &message, &pending);
    }
    // Question answers arrive as text.
    if text.trim().is_empty() {
        return invalid_params(&mut sock, &id, "A2A server received empty input.");
    }
    answered(
        shared,
        &tid,
        pending.input["inputId"].as_str().unwrap_or(""),
    );
    {
        let mut tasks = lock(&shared.tasks);
        if let Some(t) = tasks.get_mut(&tid) {
            t.history.push(json!({"messageId": message["messageId"], "contextId": t.context_id, "taskId": t.id, "role": "ROLE_USER", "parts": message["parts"]}));
        }
    }
    let mut em = Emitter::open(&mut sock, shared, ids.clone(), id)?;
    let r = if pending.kind == "pipeline-question" {
        pipeline_continue(&mut em, &text)
    } else if pending.kind == "pipeline-candidates" {
        candidates_continue(&mut em, &text)
    } else if pending.kind == "pipeline-confirm" {
        super::scripts::confirm::confirm_continue(&mut em, &text)
    } else {
        (|| -> Result<(), Stop> {
            let tool = pending.input["toolUseId"]
                .as_str()
                .unwrap_or("")
                .to_string();
            em.meta(json!({"tool": {"name": "ask_user_question", "toolUseId": tool, "status": "completed", "result": text}}))?;
            em.text(&format!("Using {text}. "))?;
            em.text("Done.")?;
            em.usage(90.0, 6.0)?;
            em.finish_turn(&format!("Which region should I use?Using {text}. Done."))
        })()
    };
    em.end(r);
    Ok(())
}

/// A resource selection's answer: refused as the kernel refuses it, else the tool's result
/// and the rest of the turn.
fn resource_answer(
    mut sock: TcpStream,
    shared: &Arc<Shared>,
    id: Value,
    ids: TaskIds,
    message: &Value,
    pending: &Pending,
) -> io::Result<()> {
    let r = match super::scripts::check_resource_answer(message, &pending.input) {
        Ok(r) => r,
        Err(e) => {
            // The kernel refuses from inside its executor, and a2a-sdk then fails the task.
            if let Some(t) = lock(&shared.tasks).get_mut(&ids.task_id) {
                t.pending = None;
                t.state = "TASK_STATE_FAILED";
            }
            return invalid_params(&mut sock, &id, &e);
        }
    };
    let tid = ids.task_id.clone();
    answered(
        shared,
        &tid,
        pending.input["inputId"].as_str().unwrap_or(""),
    );
    let mut em = Emitter::open(&mut sock, shared, ids, id)?;
    if pending.kind == "pipeline-resource" {
        // The pipeline's own continuation takes the answer: no `inputReceived` status.
        let label = (r["status"] == "selected").then(|| r["label"].as_str().unwrap_or(""));
        let res = super::scripts::pipeline_select::pipeline_select_continue(&mut em, label);
        em.end(res);
        return Ok(());
    }
    let tool = pending.input["toolUseId"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let res = (|| -> Result<(), Stop> {
        em.status("TASK_STATE_WORKING", None, true, json!({"inputReceived": {"schemaVersion": 1, "kind": "cloud_resource_selection", "inputId": r["inputId"], "toolUseId": tool, "status": r["status"], "replayed": false}}))?;
        let text = if r["status"] == "selected" {
            let result = json!({"status": "selected", "input_id": r["inputId"], "selector_id": r["selectorId"], "value": r["value"], "label": r["label"]});
            em.meta(json!({"tool": {"name": "select_cloud_resource", "toolUseId": tool, "status": "completed", "result": result.to_string()}}))?;
            format!("Using {}.", r["label"].as_str().unwrap_or(""))
        } else {
            let result = json!({"status": "canceled", "input_id": r["inputId"], "selector_id": pending.input["selector"]["id"]});
            em.meta(json!({"tool": {"name": "select_cloud_resource", "toolUseId": tool, "status": "completed", "result": result.to_string()}}))?;
            "No VSwitch chosen; I will stop here.".to_string()
        };
        em.text(&text)?;
        em.usage(90.0, 6.0)?;
        em.finish_turn(&format!("I need a VSwitch for the instance.{text}"))
    })();
    em.end(res);
    Ok(())
}

/// The kernel's refusal of a request's parameters (JSON-RPC `-32602`, plain JSON, HTTP 200).
fn invalid_params(sock: &mut TcpStream, id: &Value, message: &str) -> std::io::Result<()> {
    respond(sock, 200, &rpc_error(id, -32602, message, "INVALID_PARAMS"))
}

/// The task's pending input is answered (`input_id`, when it has one): the task runs again.
fn answered(shared: &Arc<Shared>, task_id: &str, input_id: &str) {
    if let Some(t) = lock(&shared.tasks).get_mut(task_id) {
        t.pending = None;
        t.live = true;
        if !input_id.is_empty() {
            t.answered.push(input_id.to_string());
        }
    }
}
