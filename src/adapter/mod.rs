//! The AG-UI adapter: admission (everything before the first SSE byte), the run driver, the
//! cancel extension. Pure decisions live in `admission`, `reconcile`, `identity`,
//! `projection` and `interrupts`; this module, `driver`, `cancel` and `threads` are the I/O
//! around them.

// Audit records, written before the decision they record is acknowledged.
mod audited;
mod routes;
mod rules;
mod run;
mod state;

// The modules under their old names: grouped by kind on disk, one namespace for their users.
pub(crate) use routes::cancel;
use routes::subscribe;
pub(crate) use rules::schema;
pub use rules::{admission, interrupts, projection};
use rules::{identity, reconcile};
pub(crate) use run::upstream;
use run::{driver, ending, tee, winddown};
pub(crate) use state::shared;
pub use state::{env, replay, threads};

use std::sync::Arc;

use crate::agui::dialect::Declared;
use crate::agui::{content, cwd, digest, input};
use crate::app::{Backend, CancelRequest, RunRequest, RunStream, SubscribeRequest};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n;
use crate::principal::ThreadKey;
use crate::server::http::Response;
use crate::sync::lock;
use driver::{Opening, Run, RunArgs};
pub use shared::Shared;

/// Whether forwardedProps carries the iac-code properties (either spelling).
fn has_iac_props(forwarded: &serde_json::Value) -> bool {
    forwarded
        .as_object()
        .is_some_and(|o| o.contains_key("iacCode") || o.contains_key("iac_code"))
}

/// The properties `--default-cwd` supplies: schema 1, the workspace, and a rosInvocationId
/// stable per thread that only this server can name (`ThreadKey::default_ros`), so a
/// thread's resumes and cancels match its runs and nobody else's.
fn default_props(cwd: &str, ros: &str) -> serde_json::Value {
    serde_json::json!({"iacCode": {"schemaVersion": 1, "cwd": cwd, "rosInvocationId": ros}})
}

/// `forwardedProps` with `--default-cwd` as the `cwd` of iacCode properties sent without one
/// (absent or null: a client that leaves the workspace to the server); `None` when there is
/// nothing to fill (the properties are then validated as sent).
fn with_default_cwd(forwarded: &serde_json::Value, cwd: &str) -> Option<serde_json::Value> {
    let fp = forwarded.as_object()?;
    let key = match (fp.get("iacCode"), fp.get("iac_code")) {
        (Some(_), None) => "iacCode",
        (None, Some(_)) => "iac_code",
        _ => return None,
    };
    let props = fp.get(key)?.as_object()?;
    if !props.get("cwd").is_none_or(serde_json::Value::is_null) {
        return None;
    }
    let mut filled = forwarded.clone();
    filled[key]["cwd"] = cwd.into();
    Some(filled)
}

/// The AG-UI backend behind `POST /` and the cancel route.
pub struct AguiBackend {
    pub shared: Arc<Shared>,
}

/// An admitted run, handed from admission (on a call thread) to its worker.
pub(crate) struct Admitted {
    pub(crate) args: RunArgs,
    pub(crate) tap: Arc<tee::RunTee>,
    /// Made here, on the call thread: building an agent is deeper than anything the worker
    /// does later.
    pub(crate) session: Box<dyn upstream::Upstream>,
}

impl Backend for AguiBackend {
    fn run(&self, req: Box<RunRequest>, stream: &mut RunStream<'_>) {
        let sh = &*self.shared;
        // The dialect the request declares, decided once and before anything else reads it:
        // the envelope is read by its rules, and the run carries it (issue 57).
        let declared = match Declared::read(&req.body) {
            Ok(d) => d,
            Err(e) => return stream.reject(ApiError::invalid_field(&e, req.payload_lang)),
        };
        stream.set_dialect(declared.dialect_or(sh.default_dialect));
        // Admission runs on a call thread: its depth (the checks, the state write) and the
        // chunks it frees stay off the worker, which lives as long as the stream and then
        // only ever holds the read → parse → project path (docs/performance.md, issue 26).
        match admit_on_call_thread(&self.shared, req, declared, stream.cell().clone()) {
            Ok(admitted) => drive(sh, stream, admitted),
            Err(refusal) => stream.reject(*refusal),
        }
    }

    fn cancel(&self, req: CancelRequest) -> Response {
        cancel::cancel(&self.shared, req)
    }

    fn subscribe(&self, req: SubscribeRequest, stream: &mut RunStream<'_>) {
        subscribe::subscribe(&self.shared, req, stream)
    }

    fn threads(&self, req: crate::app::ThreadsRequest) -> Response {
        routes::history::threads(&self.shared, req)
    }
}

/// Everything before the first SSE byte: the envelope and properties, the thread's state
/// and its durable admission in the dialect the request declared, and the run's cell (its
/// job's) registered with it. `Err` is the refusal to send.
fn admit(
    sh: &Shared,
    req: RunRequest,
    declared: Declared,
    cell: Arc<crate::life::Cell>,
) -> Result<Box<Admitted>, Response> {
    let lang = req.payload_lang;
    let reject = |code, msg: Msg| Err(ApiError::new(code, msg).response(lang));
    let dialect = declared.dialect_or(sh.default_dialect);
    let mut inp = match input::parse_envelope_as(&req.body, &dialect) {
        Ok(i) => i,
        Err(e) => return Err(ApiError::invalid_field(&e, lang)),
    };
    if declared == Declared::Unread {
        crate::agui::dialect::warn_unread(&req.body, "run", &inp.thread_id);
    }
    warn_unknown_fields(&req.body, &inp.thread_id);
    let key = ThreadKey::new(&req.caller, &inp.thread_id);
    // A stock AG-UI client sends no iacCode properties: with `--default-cwd` the server
    // supplies them (a browser must not choose server paths); a request that carries them
    // is validated as sent.
    let defaulted = match &sh.default_cwd {
        Some(cwd) if !has_iac_props(&inp.forwarded_props) => {
            Some(default_props(cwd, &key.default_ros(&sh.server_key)))
        }
        _ => None,
    };
    let supplied = defaulted.is_some();
    // iacCode without a cwd (a client with its own rosInvocationId or model but no say in
    // the workspace): the server's directory, the rest as sent.
    let filled = match &sh.default_cwd {
        Some(cwd) if !supplied => with_default_cwd(&inp.forwarded_props, cwd),
        _ => None,
    };
    let forwarded = defaulted
        .as_ref()
        .or(filled.as_ref())
        .unwrap_or(&inp.forwarded_props);
    let mut props = match input::parse_iac_props(forwarded) {
        Ok(p) => p,
        Err(e) => return Err(ApiError::invalid_field(&e, lang)),
    };
    // Run language (reference §1.7): the parsed preference, whichever container and key
    // spelling carried it, else the payload language.
    let run_lang = props
        .preferred_language
        .as_deref()
        .and_then(i18n::normalize)
        .unwrap_or(lang);
    let cwd = match cwd::resolve_cwd(&props.cwd, &sh.roots, sh.home.as_deref()) {
        Ok(c) => c,
        Err(m) => return reject(Code::InvalidInput, m),
    };
    if inp.tools_len > 0 {
        return reject(Code::InvalidInput, Msg::ToolsUnsupported);
    }
    let mut skipped = std::mem::take(&mut inp.skipped);
    let user = match &inp.resume {
        Some(_) => None,
        None => match content::user_message_as(&inp.messages, &dialect, &mut skipped) {
            Ok(mut u) => {
                // A new turn's message only: an answer or guidance is matched by its text.
                if dialect.forwards_context && !props.active_guidance {
                    content::add_context(&mut u, &inp.context, &mut skipped);
                }
                Some(u)
            }
            Err(m) => return reject(Code::InvalidInput, m),
        },
    };
    // Quotas (issue 44) once the request is known to be well formed, before anything is
    // written: a guidance message joins a run already counted.
    let ticket = if props.active_guidance {
        None
    } else {
        match sh
            .quotas
            .admit(&req.caller, sh.limits_of(&req.caller), sh.env.now_ms())
        {
            Ok(t) => Some(t),
            Err(over) => return Err(rate_limited(over, lang)),
        }
    };
    let digest = digest::digest(&req.body);
    drop(req.body);
    let origin = req.origin;
    let slot = match sh.registry.slot(&key) {
        Ok(s) => s,
        Err(e) => {
            log::error!("thread {}: {e}", inp.thread_id);
            return reject(Code::StateUnavailable, Msg::StateUnavailable);
        }
    };
    // An execution begun before the supplied id was keyed carries the old one: its
    // resumes and guidance still match it; its next turn gets the keyed one.
    if supplied && (inp.resume.is_some() || props.active_guidance) {
        let legacy = key.legacy_default_ros();
        if lock(&slot)
            .as_ref()
            .is_some_and(|t| t.doc.execution.ros_invocation_id == legacy)
        {
            props.ros_invocation_id = legacy;
        }
    }
    let strict = dialect.strict_resume_ids;
    let resume_ids: Vec<&str> = match (&inp.resume, strict) {
        (Some(r), true) => r.iter().map(|e| e.interrupt_id.as_str()).collect(),
        _ => Vec::new(),
    };
    let areq = admission::Request {
        thread: &key,
        run_id: &inp.run_id,
        digest: &digest,
        cwd: &cwd,
        user_id: props.user_id.as_deref(),
        ros_invocation_id: &props.ros_invocation_id,
        run_mode: props.run_mode.as_deref(),
        resume: inp.resume.is_some(),
        guidance: props.active_guidance,
        resume_ids: (strict && inp.resume.is_some()).then_some(&resume_ids[..]),
        dialect,
    };
    // A run whose client has just gone away still holds the thread for a moment, until
    // its worker notices: a client that sends its next message at once must not see
    // THREAD_BUSY for that.
    sh.wait_for_departing_run(&slot);
    let mut refused = None;
    let mut unknown_id = None;
    let mut snapshot = None;
    let grace = sh.disconnect_grace;
    let turn_of = threads::TurnOf {
        key: &key,
        run_id: &inp.run_id,
        now_ms: sh.env.now_ms(),
    };
    let admitted = sh.registry.admit(
        &slot,
        turn_of,
        |current| match admission::admit(current, &areq, &*sh.env) {
            Ok(a) => {
                let exec = a.thread.doc.execution.execution_id.clone();
                // Recorded before the admission is saved: a refusal leaves nothing behind.
                let ids = (&inp.run_id[..], &exec[..]);
                let resume = inp.resume.as_deref();
                if let Err(e) = audited::admission(sh, &origin, &key, ids, a.kind, current, resume)
                {
                    refused = Some(e);
                    return None;
                }
                let task = a.thread.doc.execution.task_id.clone();
                Some((a.thread, (a.kind, a.retired, exec, task)))
            }
            Err(e) => {
                if e.msg == Msg::ResumeUnknownInterruptId {
                    unknown_id = current
                        .and_then(|t| admission::unknown_resume_id(t, &areq))
                        .map(str::to_string);
                }
                refused = Some(e);
                None
            }
        },
        |(kind, ..), stored| {
            // The request restates the conversation (AG-UI 1.0: `messages` is the whole
            // history); only what the thread does not hold yet is kept, from its admission.
            let (new, snap) = conversation(&dialect, stored, &inp.messages);
            snapshot = snap;
            (new, *kind != admission::RunKind::Guidance)
        },
        // Under the thread's lock, the state saved: the execution becomes findable with the
        // run's cell registered, so a Stop that finds the one finds the other (issue 56).
        |(kind, retired, exec, task)| {
            if let Some(old) = retired {
                sh.registry.live_remove(old);
            }
            if *kind == admission::RunKind::Guidance {
                return;
            }
            if matches!(kind, admission::RunKind::New | admission::RunKind::NextTurn) {
                sh.registry.live_insert(exec, &key);
            }
            sh.register_run(exec, &cell);
            cell.register(grace, task.as_deref(), &inp.run_id);
        },
    );
    let admitted = match (admitted, refused) {
        (Ok(Some(x)), _) => Ok(x),
        (_, Some(e)) => Err(e),
        (Ok(None), None) => Err(ApiError::new(Code::StateUnavailable, Msg::StateUnavailable)),
        (Err(e), None) => {
            log::error!("thread {}: admission write failed: {e}", inp.thread_id);
            // /health should say so now, not at the next probe.
            sh.readiness.kick();
            Err(ApiError::new(Code::StateUnavailable, Msg::StateUnavailable))
        }
    };
    let (kind, _, execution_id, _) = match admitted {
        Ok(x) => x,
        // THREAD_BUSY says which run is active, so the client can subscribe to it or
        // cancel it (both routes take the execution id).
        Err(e) if e.code == Code::ThreadBusy => return Err(busy(&slot, lang)),
        Err(e) if e.code == Code::ResumeRequired => return Err(resume_required(&slot, e, lang)),
        Err(e) if e.msg == Msg::ResumeUnknownInterruptId => {
            return Err(unknown_interrupt(
                e,
                unknown_id.as_deref().unwrap_or(""),
                lang,
            ));
        }
        Err(e) => {
            sh.registry.forget_if_absent(&key);
            return Err(e.response(lang));
        }
    };
    sh.point("admission.committed");
    sh.registry.touch();
    let log = sh.replay.open(
        replay::RunKey {
            thread: key.clone(),
            run_id: inp.run_id.clone(),
        },
        &execution_id,
        &props.ros_invocation_id,
        dialect,
    );
    let tap = Arc::new(tee::RunTee::new(
        log,
        sh.env.clone(),
        cell.clone(),
        crate::history::Ops::with_cap(sh.history_bounds.max_bytes),
    ));
    let args = RunArgs {
        kind,
        slot,
        thread: key,
        run_id: inp.run_id,
        parent_run_id: inp.parent_run_id,
        props,
        lang: run_lang,
        opening: Some(Box::new(Opening {
            user,
            resume: inp.resume.unwrap_or_default(),
            snapshot,
            skipped,
        })),
        cell,
        ticket,
        origin,
        dialect,
    };
    Ok(Box::new(Admitted {
        args,
        tap,
        session: sh.kernel.session(),
    }))
}

/// The request's messages the stored conversation lacks, and in AG-UI 1.0 mode the whole
/// conversation to restate when the request holds less than the server keeps. 1.0 spec,
/// `RunAgentInput.messages`: "the complete history"; `MESSAGES_SNAPSHOT`: "a complete
/// snapshot of the conversation", which a client adopts in place of its own copy.
fn conversation(
    dialect: &crate::agui::dialect::Dialect,
    stored: Option<crate::history::Transcript>,
    request: &[serde_json::Value],
) -> (Vec<serde_json::Value>, Option<Vec<serde_json::Value>>) {
    let sent: std::collections::HashSet<&str> =
        request.iter().filter_map(|m| m["id"].as_str()).collect();
    let known: std::collections::HashSet<&str> = stored.iter().flat_map(|t| t.ids()).collect();
    // Clients do not send activity messages back (`HttpAgent` drops them from its input).
    let restated: Vec<&str> = stored
        .iter()
        .flat_map(|t| t.messages.iter())
        .filter(|m| m["role"] != "activity" && m["id"] != crate::history::TRIMMED_ID)
        .filter_map(|m| m["id"].as_str())
        .collect();
    let new: Vec<serde_json::Value> = request
        .iter()
        .filter(|m| m["id"].as_str().is_none_or(|id| !known.contains(id)))
        .cloned()
        .collect();
    let short = dialect.snapshots_short_history && restated.iter().any(|id| !sent.contains(id));
    let snapshot = match stored {
        Some(mut t) if short => {
            t.add_input(&new);
            Some(t.messages)
        }
        _ => None,
    };
    (new, snapshot)
}

/// Fields of the request this server does not read are accepted (AG-UI 1.0: a receiver
/// ignores what it does not know) and logged, so that a client's typo shows.
fn warn_unknown_fields(body: &serde_json::Value, thread_id: &str) {
    for k in input::unread_fields(body) {
        log::debug!(
            "thread {thread_id}: RunAgentInput field {} is not one this server reads; ignored",
            crate::logging::escape(k)
        );
    }
}

/// `429 RATE_LIMITED` before the stream, `Retry-After` in seconds.
fn rate_limited(over: crate::quota::Over, lang: i18n::Lang) -> Response {
    crate::metrics::M.quota_refusals.inc(over.label());
    let msg = match over {
        crate::quota::Over::Runs { .. } => Msg::RateLimitedRuns,
        crate::quota::Over::Rate { .. } => Msg::RateLimitedRate,
    };
    ApiError::new(Code::RateLimited, msg)
        .response(lang)
        .with_header("retry-after", over.retry_after().to_string())
}

/// `409 THREAD_BUSY` naming the thread's active run, so its owner can subscribe to it or
/// cancel it (both routes take the execution id).
pub(crate) fn busy(slot: &threads::Slot, lang: i18n::Lang) -> Response {
    let active = lock(slot)
        .as_ref()
        .map(|t| (t.doc.execution.execution_id.clone(), t.active_run.clone()));
    let mut extra = serde_json::Map::new();
    if let Some((execution_id, run_id)) = active {
        extra.insert("executionId".into(), execution_id.into());
        if let Some(r) = run_id {
            extra.insert("runId".into(), r.into());
        }
    }
    ApiError::new(Code::ThreadBusy, Msg::ThreadBusy).response_with(lang, extra)
}

/// `409 RESUME_REQUIRED` naming the execution and the interrupts it waits for, so a client
/// that lost them (another device, a cleared tab) can answer them (`GET /threads/{id}` has
/// them whole).
fn resume_required(slot: &threads::Slot, e: ApiError, lang: i18n::Lang) -> Response {
    let mut extra = serde_json::Map::new();
    if let Some(t) = lock(slot).as_ref() {
        let ex = &t.doc.execution;
        extra.insert("executionId".into(), ex.execution_id.clone().into());
        let ids: Vec<serde_json::Value> =
            ex.pending.iter().map(|(id, _)| id.clone().into()).collect();
        extra.insert("interruptIds".into(), ids.into());
    }
    e.response_with(lang, extra)
}

/// 409 `UNKNOWN_INTERRUPT` before the stream, naming the id in its message and as
/// `interruptId`, so a client can tell which answer to drop.
fn unknown_interrupt(e: ApiError, id: &str, lang: i18n::Lang) -> Response {
    let mut extra = serde_json::Map::new();
    extra.insert(
        "message".into(),
        e.msg
            .text(lang)
            .replace("{id}", &crate::logging::escape(id))
            .into(),
    );
    extra.insert("interruptId".into(), id.into());
    e.response_with(lang, extra)
}

/// `admit` on a call thread.
fn admit_on_call_thread(
    sh: &Arc<Shared>,
    req: Box<RunRequest>,
    declared: Declared,
    cell: Arc<crate::life::Cell>,
) -> Result<Box<Admitted>, Box<Response>> {
    let shared = sh.clone();
    sh.registry
        .calls()
        .run(move || admit(&shared, *req, declared, cell).map_err(Box::new))
}

/// The run on its worker, its state on the heap.
fn drive(sh: &Shared, stream: &mut RunStream<'_>, mut admitted: Box<Admitted>) {
    if let Some(t) = admitted.args.ticket.as_mut() {
        t.start();
    }
    Run::boxed(sh, stream, admitted).run();
}
