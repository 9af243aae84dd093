//! The scripted turns, chosen by keywords in the user's message (see `KEYWORDS`).

use super::*;

pub(super) mod confirm;
pub(super) mod pipeline_select;

/// A message that chooses a script: what to type, and whether people are told about it.
pub(super) struct Keyword {
    /// The message as written in the lists (arguments by name: `big T R`).
    pub(super) typed: &'static str,
    /// Told to people: the start-up line, the console's placeholder and README's list of
    /// demo scripts name exactly these, in this order (tests hold them to it). The others
    /// are for tests and benchmarks.
    pub(super) listed: bool,
    /// What [`choose`] picks for `typed` (a test holds it to that).
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the test only"))]
    pub(super) script: Script,
}

const fn kw(typed: &'static str, listed: bool, script: Script) -> Keyword {
    Keyword {
        typed,
        listed,
        script,
    }
}

/// Every script a message chooses: the one table of the demo's keywords.
pub(super) const KEYWORDS: &[Keyword] = &[
    // Any message without a keyword.
    kw("hello", true, Script::Plain),
    kw("think", true, Script::Think),
    kw("permission", true, Script::Permission),
    kw("question", true, Script::Question),
    kw("select", true, Script::Select),
    kw("candidates", true, Script::Candidates),
    kw("pipeline", true, Script::Pipeline),
    kw("pipeline select", true, Script::PipelineSelect),
    kw("pipeline confirm", true, Script::PipelineConfirm),
    kw("artifact", true, Script::Artifact),
    kw("fail", true, Script::Fail),
    kw("slow", true, Script::Slow),
    // Defaults 2 and 4 MiB.
    kw("big T R", true, Script::Big(2, 4, false)),
    kw("pipeline slow", false, Script::PipelineSlow),
    // Defaults 1000 deltas; 100 at 200 per second; 10 s.
    kw("flood N", false, Script::Flood(1000)),
    kw("pace N R", false, Script::Pace(100, 200)),
    kw("wait N", false, Script::Wait(10)),
    // fault-garbage, -die, -huge, -wrongctx, -wrongtask, -noinputid, -hang, -http500,
    // -rpcerror; any other name drips.
    kw("fault-NAME", false, Script::Fault(Fault::Drip)),
];

/// The keywords people are told about, in order (the start-up line lists them).
pub(crate) fn listed_keywords() -> Vec<&'static str> {
    KEYWORDS
        .iter()
        .filter(|k| k.listed)
        .map(|k| k.typed)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Script {
    Plain,
    Think,
    Permission,
    Question,
    /// A cloud resource selection (`select`), as the kernel raises one with
    /// `IAC_CODE_A2A_RESOURCE_SELECTOR_ENABLED`.
    Select,
    /// A pipeline that ends its evaluation with a candidate choice (`candidates`).
    Candidates,
    /// A pipeline step that needs a cloud resource (`pipeline select`): the selection wrapped
    /// in the step's `input_required` event, as the kernel's pipeline publisher sends it.
    PipelineSelect,
    /// A pipeline step that asks to confirm a deployment (`pipeline confirm`).
    PipelineConfirm,
    Pipeline,
    /// A pipeline that keeps working for a while (for guidance and cancellation).
    PipelineSlow,
    Fail,
    Slow,
    Artifact,
    /// `big T R`: a T MiB text delta and an R MiB tool result (defaults 2 and 4, each at
    /// most `limits::DEMO_BIG_MAX_MIB`); the flag: the request asked for more.
    Big(u64, u64, bool),
    Flood(u64),
    Pace(u64, u64),
    /// `wait N`: silence for N seconds, then a short answer (heartbeat and load tests).
    Wait(u64),
    Fault(Fault),
    /// `select` from a client that did not say it can answer a selection: what it needs.
    SelectorMissing,
}

pub(super) fn choose(text: &str, run_mode: Option<&str>) -> Script {
    let t = text.to_lowercase();
    let num = |after: &str, idx: usize, default: u64| {
        t.split(after)
            .nth(1)
            .and_then(|r| r.split_whitespace().nth(idx))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(default)
    };
    if let Some(rest) = t.split("fault-").nth(1) {
        let name = rest
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or("");
        let f = match name {
            "garbage" => Fault::Garbage,
            "die" => Fault::Die,
            "huge" => Fault::Huge,
            "wrongctx" => Fault::WrongContext,
            "wrongtask" => Fault::WrongTask,
            "noinputid" => Fault::NoInputId,
            "hang" => Fault::Hang,
            "http500" => Fault::Http500,
            "rpcerror" => Fault::RpcError,
            _ => Fault::Drip,
        };
        return Script::Fault(f);
    }
    if t.contains("flood") {
        return Script::Flood(num("flood", 0, 1000));
    }
    if t.contains("pace") {
        return Script::Pace(num("pace", 0, 100), num("pace", 1, 200).max(1));
    }
    if t.starts_with("wait") {
        return Script::Wait(num("wait", 0, 10));
    }
    if t.starts_with("big") {
        // Within what one upstream event may carry (the demo kernel runs in the server's own
        // process: an unbounded `big 200 0` took it to 2 GiB).
        let cap = crate::limits::DEMO_BIG_MAX_MIB;
        let (text, tool) = (num("big", 0, 2), num("big", 1, 4));
        return Script::Big(text.min(cap), tool.min(cap), text.max(tool) > cap);
    }
    if t.contains("candidates") {
        return Script::Candidates;
    }
    if t.contains("pipeline") || run_mode == Some("pipeline") {
        return if t.contains("slow") {
            Script::PipelineSlow
        } else if t.contains("select") {
            Script::PipelineSelect
        } else if t.contains("confirm") {
            Script::PipelineConfirm
        } else {
            Script::Pipeline
        };
    }
    for (kw, s) in [
        ("question", Script::Question),
        ("select", Script::Select),
        ("permission", Script::Permission),
        ("fail", Script::Fail),
        ("slow", Script::Slow),
        ("artifact", Script::Artifact),
        ("think", Script::Think),
    ] {
        if t.contains(kw) {
            return s;
        }
    }
    Script::Plain
}

pub(super) fn run_script(em: &mut Emitter<'_>, script: Script, text: &str) -> Result<(), Stop> {
    let pipeline = matches!(
        script,
        Script::Pipeline
            | Script::PipelineSlow
            | Script::Candidates
            | Script::PipelineSelect
            | Script::PipelineConfirm
    );
    if !pipeline {
        em.meta_state("TASK_STATE_SUBMITTED")?;
        em.meta_state("TASK_STATE_WORKING")?;
    }
    match script {
        Script::Plain => {
            em.text("Hello")?;
            em.text("! This is the iac-agui demo kernel.")?;
            em.usage(120.0, 12.0)?;
            em.finish_turn("Hello! This is the iac-agui demo kernel.")
        }
        Script::Think => {
            em.meta(json!({"thinking": {"type": "raw_thinking", "text": "The user wants to see reasoning. "}}))?;
            em.meta(json!({"thinking": {"type": "raw_thinking", "text": "I will think out loud first."}}))?;
            em.meta(json!({"thinking": {"type": "summary", "text": "(summaries are not shown)"}}))?;
            em.text("Here is my answer after thinking.")?;
            em.usage(140.0, 30.0)?;
            em.finish_turn("Here is my answer after thinking.")
        }
        Script::SelectorMissing => {
            em.text(SELECTOR_MISSING)?;
            em.finish_turn(SELECTOR_MISSING)
        }
        Script::Permission => permission_turn(em),
        Script::Question => question_turn(em),
        Script::Select => select_turn(em),
        Script::Pipeline => pipeline_turn(em, text),
        Script::Candidates => candidates_turn(em, text),
        Script::PipelineSelect => pipeline_select::pipeline_select_turn(em, text),
        Script::PipelineConfirm => confirm::confirm_turn(em, text),
        Script::PipelineSlow => pipeline_slow(em),
        Script::Fail => {
            em.text("Working on it… ")?;
            let m = em.msg("message", "The provider failed: demo failure.");
            let iac = em.with_session(
                json!({"error": {"retryable": false, "errorId": &ids::hex32()[..12]}}),
            );
            em.status("TASK_STATE_FAILED", Some(m), true, iac)?;
            em.usage(50.0, 5.0)?;
            let iac = em.with_session(json!({}));
            em.status("TASK_STATE_INPUT_REQUIRED", None, true, iac)
        }
        Script::Slow => {
            let tick = em.shared.cfg.tick;
            for i in 1..=40 {
                em.pause(tick)?;
                em.text(&format!("tick {i}. "))?;
            }
            em.finish_turn("")
        }
        Script::Artifact => {
            let tool = format!("call_{}", &ids::hex32()[..8]);
            em.meta(
                json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "started"}}),
            )?;
            em.meta(json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "input_complete", "inputSummary": {"tool_name": "write_file"}, "toolInput": {"path": "template.yml"}}}))?;
            em.meta(json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "progress", "mcp": {"serverName": "demo", "toolName": "write_file", "progress": 1.0, "total": 2.0, "message": "writing"}}}))?;
            let art = ids::uuid4();
            let upd = json!({"artifactUpdate": {"taskId": em.task_id, "contextId": em.context_id, "artifact": {"artifactId": art, "name": "template.yml", "parts": [{"url": format!("iac-code-artifact://{art}/template.yml"), "filename": "template.yml", "mediaType": "application/yaml"}], "metadata": {"mediaType": "application/yaml", "byteSize": 42.0}}, "lastChunk": true}});
            em.pause(em.delay)?;
            em.frame(upd)?;
            em.meta(json!({"tool": {"name": "write_file", "toolUseId": tool, "status": "completed", "result": "Wrote template.yml"}}))?;
            em.text("I wrote template.yml.")?;
            em.usage(100.0, 10.0)?;
            em.finish_turn("I wrote template.yml.")
        }
        Script::Big(text_mib, tool_mib, clamped) => {
            if clamped {
                em.text(&format!(
                    "(big: at most {} MiB each; sending {text_mib} MiB of text and a {tool_mib} MiB tool result) ",
                    crate::limits::DEMO_BIG_MAX_MIB
                ))?;
            }
            // A large tool result (a `terraform plan`, a state file) and a large text delta.
            let tool = format!("call_{}", &ids::hex32()[..8]);
            em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "started"}}))?;
            em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "input_complete", "toolInput": {"command": "terraform plan"}}}))?;
            let mark = big_mark();
            let iac = em.with_session(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "completed", "result": mark}}));
            let line = "resource \"alicloud_instance\" \"web\" { # planned\n";
            em.big_status(None, iac, &mark, line, tool_mib)?;
            let mark = big_mark();
            let m = em.msg("message", &mark);
            let iac = em.with_session(json!({}));
            em.big_status(
                Some(m),
                iac,
                &mark,
                "The plan adds these resources. ",
                text_mib,
            )?;
            em.usage(100.0, 10.0)?;
            em.finish_turn("")
        }
        Script::Flood(n) => {
            em.delay = Duration::ZERO;
            em.flood(n, "0123456789abcdef")?;
            em.finish_turn("")
        }
        Script::Pace(n, rate) => {
            em.delay = Duration::ZERO;
            let gap = Duration::from_secs_f64(1.0 / rate as f64);
            for i in 0..n {
                em.pause(gap)?;
                let sent = crate::clock::Clock::wall(&crate::clock::SystemClock)
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_micros())
                    .unwrap_or(0);
                em.text(&format!("{i}@{sent} "))?;
            }
            em.finish_turn("")
        }
        Script::Wait(secs) => {
            em.pause(Duration::from_secs(secs))?;
            em.text("Done waiting.")?;
            em.finish_turn("Done waiting.")
        }
        Script::Fault(f) => fault(em, f),
    }
}

pub(super) fn permission_input(em: &Emitter<'_>, tool: &str, command: &str) -> Value {
    json!({"options": [{"label": "Allow once", "id": "allow_once"}, {"label": "Deny", "id": "deny"}], "title": "Run a local shell command", "safeSummary": format!("bash: {{\"command\":\"{command}\"}}"), "isReadOnly": false, "kind": "permission", "language": "en", "inputId": format!("permission-{}", ids::hex32()), "requestTaskId": em.task_id, "target": format!("the current local workspace; command: {command}"), "required": true, "schemaVersion": 1.0, "effect": "local_execution", "contextId": em.context_id, "purpose": "Execute a local command needed for the requested infrastructure task.", "toolName": "bash", "toolUseId": tool, "prompt": "Allow this command to run once?"})
}

pub(super) fn wait_for_input(
    em: &mut Emitter<'_>,
    input: Value,
    kind: &'static str,
    extra: Value,
) -> Result<(), Stop> {
    if let Some(t) = lock(&em.shared.tasks).get_mut(&em.task_id) {
        t.pending = Some(Pending {
            input: input.clone(),
            kind,
        });
    }
    let mut iac = em.with_session(extra);
    iac["input"] = input;
    em.status("TASK_STATE_INPUT_REQUIRED", None, false, iac)
}

pub(super) fn permission_turn(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.meta(json!({"thinking": {"type": "raw_thinking", "text": "The user wants a file. "}}))?;
    em.meta(json!({"thinking": {"type": "raw_thinking", "text": "I will use bash."}}))?;
    em.text("I'll create it.")?;
    let tool = format!("call_{}", &ids::hex32()[..12]);
    em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "started"}}))?;
    em.meta(
        json!({"tool": {"partialJsonLength": 19.0, "toolUseId": tool, "status": "input_delta"}}),
    )?;
    em.meta(json!({"tool": {"name": "bash", "toolUseId": tool, "status": "input_complete", "inputSummary": {"tool_name": "bash", "fields": {"command": {"type": "str"}}}, "toolInput": {"command": "touch created.txt"}}}))?;
    em.usage(120.0, 12.0)?;
    let input = permission_input(em, &tool, "touch created.txt");
    let perm = json!({"permission": {"autoApproved": false, "toolUseId": tool, "toolName": "bash", "pending": true}});
    wait_for_input(em, input, "permission", perm)
}

pub(super) fn question_turn(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.text("Which region should I use?")?;
    let tool = format!("call_{}", &ids::hex32()[..12]);
    em.meta(
        json!({"tool": {"name": "ask_user_question", "toolUseId": tool, "status": "started"}}),
    )?;
    let input = json!({"schemaVersion": 1.0, "kind": "ask_user_question", "requestTaskId": em.task_id, "contextId": em.context_id, "inputId": format!("ask-{tool}"), "prompt": "Which region should I use?", "required": true, "toolUseId": tool, "allowFreeText": true, "freeTextPrompt": "Or type a region id", "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}], "language": "en"});
    wait_for_input(em, input, "question", json!({}))
}

/// The selector the `select` script asks with: iac-code 0.16.0's `vpc.vswitch` profile and
/// its `PROFILE_HASH` (`iac_code/resource_selector/profiles.py`).
pub(super) const SELECTOR_ID: &str = "vpc.vswitch";
pub(super) const PROFILE_HASH: &str = crate::a2a::KERNEL_PROFILE_HASH;
/// Whether a request's metadata advertises the resource selector as the kernel wants it
/// (`ResourceSelectorCapability.for_surface("a2a")`: schema 1, `ros_api_json`, its hash).
pub(super) fn selector_advertised(iac: &Value) -> bool {
    let c = &iac["capabilities"]["resourceSelector"];
    c["schemaVersion"].as_f64() == Some(1.0)
        && c["queryMode"] == "ros_api_json"
        && c["profileHash"] == PROFILE_HASH
}

/// The answer to `select` from a client that did not advertise the selector (the kernel
/// offers no selection then; a plain answer left the user guessing why).
pub(super) const SELECTOR_MISSING: &str = "A cloud resource selection needs a client that can \
    answer one: send forwardedProps.iacCode.resourceSelector with the value GET /capabilities \
    lists under custom.iacCode.resourceSelector (the console at /console does).";

pub(super) const SELECT_PROMPT: &str = "Which VSwitch should the instance use?";

/// The kernel's `resource_selection_input_envelope` (`iac_code/a2a/resource_selector.py`),
/// key for key; `tests/fixtures/kernel/resource_selection.json` holds the same shape.
pub(super) fn resource_input(task_id: &str, context_id: &str, tool: &str) -> Value {
    json!({"schemaVersion": 1, "kind": "cloud_resource_selection", "requestTaskId": task_id, "contextId": context_id, "inputId": format!("resource-{}", ids::hex32()), "toolUseId": tool, "prompt": SELECT_PROMPT, "required": true, "selector": {"id": SELECTOR_ID, "associationProperty": "ALIYUN::VPC::VSwitch::VSwitchId", "outputKind": "resource_id", "associationPropertyMetadata": {"RegionId": "cn-hangzhou", "VpcId": "vpc-demo"}, "source": null, "profileHash": PROFILE_HASH}})
}

/// A cloud resource selection: the kernel publishes `INPUT_REQUIRED` with the question as
/// the status text and the envelope as `iac_code.inputRequired`.
pub(super) fn select_turn(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.text("I need a VSwitch for the instance.")?;
    let tool = format!("call_{}", &ids::hex32()[..12]);
    em.meta(
        json!({"tool": {"name": "select_cloud_resource", "toolUseId": tool, "status": "started"}}),
    )?;
    let input = resource_input(&em.task_id, &em.context_id, &tool);
    if let Some(t) = lock(&em.shared.tasks).get_mut(&em.task_id) {
        t.pending = Some(Pending {
            input: input.clone(),
            kind: "resource",
        });
    }
    // The kernel's `_publish_status` message id: the task id and the state's number.
    let m = json!({"messageId": format!("{}-6", em.task_id), "contextId": em.context_id, "taskId": em.task_id, "role": "ROLE_AGENT", "parts": [{"text": SELECT_PROMPT}]});
    let iac = em.with_session(json!({"inputRequired": input}));
    em.status("TASK_STATE_INPUT_REQUIRED", Some(m), true, iac)
}

/// The answer to a resource selection, checked as the kernel's
/// `parse_resource_selection_response` and `_validate_response_against_pending` check it
/// (for the `vpc.vswitch` profile: a `vsw-` id, no source). `Err` is the kernel's refusal.
pub(super) fn check_resource_answer(message: &Value, pending: &Value) -> Result<Value, String> {
    let bad = |what: &str| Err(format!("resource_selection_resume_invalid: {what}"));
    let Some(r) = message
        .pointer("/metadata/iac_code/inputResponse")
        .filter(|r| r["kind"] == "cloud_resource_selection")
    else {
        return bad("pending input not found");
    };
    if r["schemaVersion"].as_f64() != Some(1.0) {
        return bad("unsupported schema version");
    }
    let status = r["status"].as_str().unwrap_or("");
    if !matches!(status, "selected" | "canceled") {
        return bad("status is invalid");
    }
    let string = |k: &str| {
        r[k].as_str()
            .filter(|s| !s.is_empty() && s.chars().count() <= 1024)
    };
    for k in ["requestTaskId", "contextId"] {
        if string(k).is_none() {
            return bad(&format!("{k} is invalid"));
        }
    }
    let input_ok = r["inputId"].as_str().is_some_and(|i| {
        i.strip_prefix("resource-").is_some_and(|h| {
            h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
    });
    if !input_ok {
        return bad("inputId is invalid");
    }
    if string("toolUseId").is_none() {
        return bad("toolUseId is invalid");
    }
    if status == "selected" {
        for k in ["selectorId", "value"] {
            if string(k).is_none() {
                return bad(&format!("{k} is invalid"));
            }
        }
        let label_ok = match &r["label"] {
            Value::Null => true,
            Value::String(l) => l.chars().count() <= 1024,
            _ => false,
        };
        if !label_ok {
            return bad("label is invalid");
        }
        if !r["source"].is_null() && !r["source"].is_object() {
            return bad("source is invalid");
        }
    } else if !r["optionsEmpty"].is_null() && !r["optionsEmpty"].is_boolean() {
        return bad("optionsEmpty is invalid");
    }
    if ["requestTaskId", "contextId", "toolUseId", "inputId"]
        .iter()
        .any(|k| r[*k] != pending[*k])
    {
        return bad("correlation mismatch");
    }
    if status == "canceled" {
        return Ok(r.clone());
    }
    if r["selectorId"] != pending["selector"]["id"] {
        return bad("selector mismatch");
    }
    let value = r["value"].as_str().unwrap_or("");
    let id_ok = value.strip_prefix("vsw-").is_some_and(|rest| {
        let mut cs = rest.chars();
        cs.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && cs.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    });
    if !id_ok {
        return bad("selector value is invalid");
    }
    if !r["source"].is_null() {
        return bad("source mismatch");
    }
    Ok(r.clone())
}

pub(super) fn pipeline_step(id: &str, index: f64) -> Value {
    json!({"runId": format!("step-{id}-1"), "index": index, "total": 3.0, "id": id, "attempt": 1.0})
}

pub(super) fn pipeline_turn(em: &mut Emitter<'_>, text: &str) -> Result<(), Stop> {
    em.pipeline_started(json!({"userRequest": text, "pipelineType": "selling", "totalSteps": 3, "stepNames": ["intent_parsing", "evaluate_candidates", "deploying"]}))?;
    let s1 = pipeline_step("intent_parsing", 1.0);
    em.on_step("step_started", json!({"name": "intent_parsing"}), &s1)?;
    em.on_step(
        "thinking_delta",
        json!({"type": "raw_thinking", "text": "Need to clarify the goal."}),
        &s1,
    )?;
    let e1 = em.envelope(
        "text_delta",
        "step",
        "working",
        json!({"text": "Let me ask "}),
        json!({"step": s1}),
    );
    let e2 = em.envelope(
        "text_delta",
        "step",
        "working",
        json!({"text": "one question."}),
        json!({"step": s1}),
    );
    em.pipeline(vec![e1, e2], None)?;
    em.on_step("usage", json!({"cachedInputTokens": 0, "provider": "demo", "model": "demo-1", "inputTokens": 300, "outputTokens": 20, "totalTokens": 320}), &s1)?;
    let input = json!({"freeTextPrompt": "Describe it", "kind": "ask_user_question", "requestTaskId": em.task_id, "contextId": em.context_id, "schemaVersion": 1, "toolUseId": "call_ask1", "allowFreeText": true, "inputId": format!("ask-call_ask1-{}", &em.task_id[..8]), "required": true, "options": [{"label": "A website", "id": "website"}, {"label": "An API", "id": "api"}], "prompt": "What do you want to deploy?"});
    let view = json!({"kind": "ask_user_question", "prompt": "What do you want to deploy?"});
    pipeline_input(em, &s1, input.clone(), view, input, "pipeline-question")
}

/// A pipeline step's required input: kept as the task's pending one, then raised.
/// A step waiting for `projection` (the status's `iac_code.input`), its envelope carrying
/// `view` as its data and `input` as its own `input`.
pub(super) fn pipeline_input(
    em: &mut Emitter<'_>,
    step: &Value,
    input: Value,
    view: Value,
    projection: Value,
    kind: &'static str,
) -> Result<(), Stop> {
    if let Some(t) = lock(&em.shared.tasks).get_mut(&em.task_id) {
        t.pending = Some(Pending {
            input: doubles(projection.clone()),
            kind,
        });
    }
    let e = em.envelope(
        "input_required",
        "step",
        "input_required",
        view,
        json!({"step": step, "input": input}),
    );
    em.pipeline(vec![e], Some(projection))
}

/// The options of the `candidates` script, in the kernel's projection of a
/// `candidate_selection` (`iac_code/a2a/pipeline_stream.py`: `id`, `label`, `summary`,
/// `totalMonthlyCost`).
fn candidate_options() -> Value {
    json!([
        {"id": "0", "label": "Candidate 1: ECS behind an SLB", "summary": "Two ECS instances behind a load balancer.", "totalMonthlyCost": "¥420"},
        {"id": "1", "label": "Candidate 2: Function Compute", "summary": "Serverless functions behind an API gateway.", "totalMonthlyCost": "¥90"}
    ])
}

/// A pipeline whose evaluation step ends with a candidate choice, raised as the kernel
/// projects one (`iac_code.input` of kind `candidate_selection`, on the main line).
pub(super) fn candidates_turn(em: &mut Emitter<'_>, text: &str) -> Result<(), Stop> {
    em.pipeline_started(json!({"userRequest": text, "pipelineType": "selling", "totalSteps": 2, "stepNames": ["evaluate_candidates", "deploying"]}))?;
    let s1 = pipeline_step("evaluate_candidates", 1.0);
    em.on_step("step_started", json!({"name": "evaluate_candidates"}), &s1)?;
    em.on_step(
        "text_delta",
        json!({"text": "Two designs fit; choose one."}),
        &s1,
    )?;
    let prompt = "Which design should I deploy?";
    let input = json!({"schemaVersion": 1, "kind": "candidate_selection", "requestTaskId": em.task_id, "contextId": em.context_id, "inputId": format!("input-evt-{}", ids::hex32()), "prompt": prompt, "required": true, "options": candidate_options()});
    let view =
        json!({"kind": "candidate_selection", "prompt": prompt, "options": candidate_options()});
    pipeline_input(em, &s1, input.clone(), view, input, "pipeline-candidates")
}

/// The rest of the `candidates` pipeline once a candidate is chosen (its label as text).
pub(super) fn candidates_continue(em: &mut Emitter<'_>, answer: &str) -> Result<(), Stop> {
    let s1 = pipeline_step("evaluate_candidates", 1.0);
    em.on_step(
        "input_received",
        json!({"kind": "candidate_selection", "selected_value": answer}),
        &s1,
    )?;
    em.on_step("step_completed", json!({}), &s1)?;
    let s2 = pipeline_step("deploying", 2.0);
    em.on_step("step_started", json!({"name": "deploying"}), &s2)?;
    em.on_step(
        "text_delta",
        json!({"text": format!("Deploying {answer}.")}),
        &s2,
    )?;
    em.on_step("step_completed", json!({}), &s2)?;
    em.pipeline_completed(json!({"earlyExit": false, "totalSteps": 2}))
}

pub(super) fn pipeline_slow(em: &mut Emitter<'_>) -> Result<(), Stop> {
    em.pipeline_started(json!({"totalSteps": 1}))?;
    let s1 = pipeline_step("deploying", 1.0);
    em.on_step("step_started", json!({"name": "deploying"}), &s1)?;
    let tick = em.shared.cfg.tick;
    for i in 1..=30 {
        em.pause(tick)?;
        em.on_step(
            "text_delta",
            json!({"text": format!("progress {i}. ")}),
            &s1,
        )?;
    }
    em.on_step("step_completed", json!({}), &s1)?;
    em.pipeline_completed(json!({"totalSteps": 1}))
}

pub(super) fn pipeline_continue(em: &mut Emitter<'_>, answer: &str) -> Result<(), Stop> {
    let s1 = pipeline_step("intent_parsing", 1.0);
    em.on_step(
        "input_received",
        json!({"kind": "ask_user_question", "selectedLabel": answer}),
        &s1,
    )?;
    em.on_step("step_completed", json!({"conclusionField": "intent"}), &s1)?;
    let s2 = pipeline_step("evaluate_candidates", 2.0);
    em.on_step("step_started", json!({"name": "evaluate_candidates"}), &s2)?;
    let cands: Vec<Value> = (1..=2)
        .map(|i| json!({"id": format!("cand-{i}"), "runId": format!("candidate-cand-{i}-{i}-1"), "index": i as f64, "attempt": 1.0, "name": format!("Option {i}")}))
        .collect();
    for c in &cands {
        em.emit(
            "candidate_started",
            "candidate",
            "working",
            json!({"name": c["name"]}),
            json!({"step": s2, "candidate": c}),
        )?;
    }
    for (i, c) in cands.iter().enumerate() {
        let cs = json!({"id": "design", "runId": format!("{}-design-1", c["runId"].as_str().unwrap_or("")), "attempt": 1.0});
        em.emit(
            "candidate_step_started",
            "candidate_step",
            "working",
            json!({}),
            json!({"step": s2, "candidate": c, "candidateStep": cs}),
        )?;
        em.emit("text_delta", "candidate_step", "working", json!({"text": format!("Candidate {} uses {}. ", i + 1, if i == 0 { "ECS" } else { "serverless" })}), json!({"step": s2, "candidate": c, "candidateStep": cs}))?;
    }
    for c in &cands {
        let cs = json!({"id": "design", "runId": format!("{}-design-1", c["runId"].as_str().unwrap_or("")), "attempt": 1.0});
        em.emit(
            "candidate_step_completed",
            "candidate_step",
            "working",
            json!({}),
            json!({"step": s2, "candidate": c, "candidateStep": cs}),
        )?;
        em.emit(
            "candidate_completed",
            "candidate",
            "working",
            json!({"summary": "ok"}),
            json!({"step": s2, "candidate": c}),
        )?;
    }
    em.on_step(
        "stack_progress",
        json!({"stackName": "demo-stack", "status": "CREATE_IN_PROGRESS", "progress": 50}),
        &s2,
    )?;
    em.on_step("step_completed", json!({}), &s2)?;
    em.pipeline_completed(json!({"earlyExit": false, "totalSteps": 3}))?;
    em.emit(
        "backup_committed",
        "pipeline",
        "completed",
        json!({"committedEventType": "pipeline_completed"}),
        json!({"visibility": "committed"}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Value {
        serde_json::from_str(include_str!(
            "../../../tests/fixtures/kernel/resource_selection.json"
        ))
        .unwrap()
    }

    /// The shape of a JSON value: its keys (recursively) and the types of its leaves.
    fn shape(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
            }
            Value::String(_) => json!("string"),
            Value::Number(_) => json!("number"),
            other => other.clone(),
        }
    }

    #[test]
    fn the_select_script_raises_the_kernels_envelope() {
        let f = fixture();
        let want = &f["statusUpdate"]["metadata"]["iac_code"]["inputRequired"];
        let got = resource_input("task-1", "ctx-1", "call_1");
        assert_eq!(shape(&got), shape(want));
        assert_eq!(got["selector"], want["selector"]);
        let id = got["inputId"].as_str().unwrap();
        assert!(id.starts_with("resource-") && id.len() == 41);
    }

    #[test]
    fn the_demo_checks_a_resource_answer_as_the_kernel_does() {
        let f = fixture();
        let pending = &f["statusUpdate"]["metadata"]["iac_code"]["inputRequired"];
        let msg = |r: Value| json!({"metadata": {"iac_code": {"inputResponse": r}}});
        for a in f["answers"].as_object().unwrap().values() {
            let r = &a["inputResponse"];
            assert_eq!(
                check_resource_answer(&msg(r.clone()), pending).as_ref(),
                Ok(r)
            );
        }
        let good = f["answers"]["selected"]["inputResponse"].clone();
        let with = |k: &str, v: Value| {
            let mut r = good.clone();
            r[k] = v;
            msg(r)
        };
        let cases = [
            (
                with("schemaVersion", json!(2)),
                "unsupported schema version",
            ),
            (with("status", json!("chosen")), "status is invalid"),
            (with("inputId", json!("resource-1")), "inputId is invalid"),
            (
                with("toolUseId", json!("call_other")),
                "correlation mismatch",
            ),
            (
                with("requestTaskId", json!("task-other")),
                "correlation mismatch",
            ),
            (
                with("selectorId", json!("ecs.instance")),
                "selector mismatch",
            ),
            (
                with("value", json!("subnet-1")),
                "selector value is invalid",
            ),
            (with("value", json!("vsw-")), "selector value is invalid"),
            (with("source", json!({"id": "x"})), "source mismatch"),
            (with("label", json!(5)), "label is invalid"),
            (
                json!({"parts": [{"text": "vsw-1"}]}),
                "pending input not found",
            ),
        ];
        let refusals = f["refusals"].as_array().unwrap();
        for (m, why) in cases {
            let e = check_resource_answer(&m, pending).unwrap_err();
            assert_eq!(
                e,
                format!("resource_selection_resume_invalid: {why}"),
                "{m}"
            );
            assert!(
                why == "label is invalid" || refusals.contains(&json!(e)),
                "{e}"
            );
        }
    }
}
