//! The admission gates of reference §3.2, in their exact order, as a pure function of the
//! thread's current state and the request. The caller persists the returned state and keeps
//! it only if the write succeeds (rollback is simply not committing).

use crate::adapter::rules::env::Env;
use crate::agui::dialect::Dialect;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::store::document::{Execution, ThreadDoc};

/// What kind of run was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunKind {
    /// The first run of a new thread.
    New,
    /// A new turn on an existing thread (the execution was rotated).
    NextTurn,
    Resume,
    Guidance,
}

/// A loaded thread: its document and the memory-only active run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Thread {
    pub(crate) doc: ThreadDoc,
    /// The non-guidance run streaming on this thread, if any (never persisted).
    pub(crate) active_run: Option<String>,
    /// The dialect of the thread's latest non-guidance run (never persisted; `None` once
    /// reloaded from its file): its interrupts are listed as that run showed them.
    pub(crate) dialect: Option<Dialect>,
}

#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    pub(crate) thread: &'a crate::principal::ThreadKey,
    pub(crate) run_id: &'a str,
    pub(crate) digest: &'a str,
    /// The resolved workspace.
    pub(crate) cwd: &'a str,
    pub(crate) user_id: Option<&'a str>,
    pub(crate) ros_invocation_id: &'a str,
    pub(crate) run_mode: Option<&'a str>,
    pub(crate) resume: bool,
    pub(crate) guidance: bool,
    /// AG-UI 1.0 mode: the resume's interrupt ids, refused before the stream when the thread
    /// has no such interrupt (the spec: "`resume[].interruptId` must reference an `id` from
    /// the interrupted run's `interrupts[]`"). `None`: the reference's in-stream checks only.
    pub(crate) resume_ids: Option<&'a [&'a str]>,
    /// The dialect the request is served in.
    pub(crate) dialect: Dialect,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Admitted {
    pub(crate) kind: RunKind,
    /// The new thread state to persist.
    pub(crate) thread: Thread,
    /// The execution that rotation retired (it leaves the live index).
    pub(crate) retired: Option<String>,
}

/// `agui-` + the first 40 hex digits of sha256(threadId) (the shared principal's; see
/// `ThreadKey::context_id`).
pub fn context_id(thread_id: &str) -> String {
    crate::principal::ThreadKey::shared(thread_id).context_id()
}

const fn err(code: Code, msg: Msg) -> ApiError {
    ApiError::new(code, msg)
}

pub(crate) fn admit(
    current: Option<&Thread>,
    req: &Request<'_>,
    env: &dyn Env,
) -> Result<Admitted, ApiError> {
    let created = current.is_none();
    let mut t = match current {
        Some(t) => t.clone(),
        None => {
            if req.resume || req.guidance {
                return Err(err(Code::ExecutionLost, Msg::ResumeExecutionGone));
            }
            Thread {
                doc: ThreadDoc {
                    owner: req.thread.caller.clone(),
                    thread_id: req.thread.id.clone(),
                    context_id: req.thread.context_id(),
                    cwd: req.cwd.into(),
                    user_id: req.user_id.map(str::to_string),
                    execution: Execution {
                        execution_id: env.uuid4(),
                        ros_invocation_id: req.ros_invocation_id.into(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                active_run: None,
                dialect: None,
            }
        }
    };
    if let Some(d) = t.doc.run_digests.get(req.run_id) {
        return Err(if d == req.digest {
            err(Code::DuplicateRunId, Msg::RunIdUsed)
        } else {
            err(Code::RunIdConflict, Msg::RunIdUsed)
        });
    }
    if t.active_run.is_some() && !req.guidance {
        return Err(err(Code::ThreadBusy, Msg::ThreadBusy));
    }
    if t.doc.cwd != req.cwd || t.doc.user_id.as_deref() != req.user_id {
        return Err(err(Code::ThreadBindingConflict, Msg::BindingConflict));
    }
    let mut retired = None;
    let kind = if req.guidance {
        if req.resume || req.run_mode != Some("pipeline") || t.doc.execution.task_id.is_none() {
            return Err(err(Code::ExecutionLost, Msg::ResumeExecutionGone));
        }
        if !t.doc.execution.pending.is_empty() {
            return Err(err(Code::ResumeRequired, Msg::ResumeRequired));
        }
        RunKind::Guidance
    } else if req.resume {
        if req.ros_invocation_id != t.doc.execution.ros_invocation_id {
            return Err(err(Code::ExecutionLost, Msg::ResumeMismatch));
        }
        if unknown_resume_id(&t, req).is_some() {
            return Err(err(Code::UnknownInterrupt, Msg::ResumeUnknownInterruptId));
        }
        RunKind::Resume
    } else if !t.doc.execution.pending.is_empty() {
        return Err(err(Code::ResumeRequired, Msg::ResumeRequired));
    } else if created {
        RunKind::New
    } else {
        // Rotate: the old execution becomes terminal (its A2A task is not cancelled).
        let old = t.doc.execution.execution_id.clone();
        t.doc.retire(&old);
        retired = Some(old);
        t.doc.execution = Execution {
            execution_id: env.uuid4(),
            ros_invocation_id: req.ros_invocation_id.into(),
            ..Default::default()
        };
        RunKind::NextTurn
    };
    if !req.guidance {
        t.active_run = Some(req.run_id.into());
        t.dialect = Some(req.dialect);
    }
    t.doc.record_run(req.run_id, req.digest);
    Ok(Admitted {
        kind,
        thread: t,
        retired,
    })
}

/// The first of the request's resume ids (1.0 mode) that the thread's execution neither has
/// pending nor has already applied. Every id a client was shown is in one of the two: an
/// interrupt is announced only after the thread file holds it. An id the file holds but the
/// kernel has since dropped is still found in the stream (`UNKNOWN_INTERRUPT` there).
pub(crate) fn unknown_resume_id<'a>(t: &Thread, req: &Request<'a>) -> Option<&'a str> {
    let exec = &t.doc.execution;
    req.resume_ids?.iter().copied().find(|id| {
        !exec.pending.iter().any(|(p, _)| p == id)
            && !t
                .doc
                .applied
                .contains_key(&(exec.execution_id.clone(), (*id).to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::rules::env::TestEnv;
    use crate::store::document::PendingInput;

    fn req<'a>(run: &'a str, digest: &'a str) -> Request<'a> {
        static TH: std::sync::LazyLock<crate::principal::ThreadKey> =
            std::sync::LazyLock::new(|| crate::principal::ThreadKey::shared("th"));
        Request {
            thread: &TH,
            run_id: run,
            digest,
            cwd: "/w",
            user_id: None,
            ros_invocation_id: "ros",
            run_mode: None,
            resume: false,
            guidance: false,
            resume_ids: None,
            dialect: Dialect::V0_1,
        }
    }

    /// An idle thread with interrupt `p` pending.
    fn paused(env: &TestEnv) -> Thread {
        let mut t = admit(None, &req("r0", "d0"), env).unwrap().thread;
        t.active_run = None;
        t.doc.execution.pending.push((
            "p".into(),
            PendingInput {
                value: Default::default(),
                sideband: false,
            },
        ));
        t
    }

    fn code(r: Result<Admitted, ApiError>) -> Code {
        r.err().map(|e| e.code).unwrap_or(Code::InternalError)
    }

    #[test]
    fn new_thread_then_gates_in_order() {
        let env = TestEnv::new(0);
        assert_eq!(
            context_id("th"),
            format!("agui-{}", &crate::ids::sha256_hex(b"th")[..40])
        );
        let a = admit(None, &req("r1", "d1"), &env).unwrap();
        assert_eq!(a.kind, RunKind::New);
        assert_eq!(a.thread.active_run.as_deref(), Some("r1"));
        let t = a.thread;
        // Duplicate beats busy; conflict beats busy.
        assert_eq!(
            code(admit(Some(&t), &req("r1", "d1"), &env)),
            Code::DuplicateRunId
        );
        assert_eq!(
            code(admit(Some(&t), &req("r1", "d2"), &env)),
            Code::RunIdConflict
        );
        assert_eq!(
            code(admit(Some(&t), &req("r2", "d2"), &env)),
            Code::ThreadBusy
        );
        // Busy beats binding.
        let mut other = req("r2", "d2");
        other.cwd = "/other";
        assert_eq!(code(admit(Some(&t), &other, &env)), Code::ThreadBusy);
        let mut idle = t.clone();
        idle.active_run = None;
        assert_eq!(
            code(admit(Some(&idle), &other, &env)),
            Code::ThreadBindingConflict
        );
        let mut user = req("r2", "d2");
        user.user_id = Some("");
        assert_eq!(
            code(admit(Some(&idle), &user, &env)),
            Code::ThreadBindingConflict
        );
        // A next turn rotates the execution and may change rosInvocationId.
        let mut next = req("r2", "d2");
        next.ros_invocation_id = "ros2";
        let a = admit(Some(&idle), &next, &env).unwrap();
        assert_eq!(a.kind, RunKind::NextTurn);
        assert_eq!(
            a.retired.as_deref(),
            Some(idle.doc.execution.execution_id.as_str())
        );
        assert_ne!(
            a.thread.doc.execution.execution_id,
            idle.doc.execution.execution_id
        );
        assert!(
            a.thread
                .doc
                .terminal
                .contains(&idle.doc.execution.execution_id)
        );
        assert_eq!(a.thread.doc.execution.ros_invocation_id, "ros2");
    }

    #[test]
    fn resume_and_guidance_gates() {
        let env = TestEnv::new(0);
        let mut r = req("r1", "d");
        r.resume = true;
        assert_eq!(code(admit(None, &r, &env)), Code::ExecutionLost);
        let mut g = req("r1", "d");
        g.guidance = true;
        assert_eq!(code(admit(None, &g, &env)), Code::ExecutionLost);
        let mut t = paused(&env);
        assert_eq!(
            code(admit(Some(&t), &req("r1", "d"), &env)),
            Code::ResumeRequired
        );
        let mut bad = r.clone();
        bad.ros_invocation_id = "other";
        let e = admit(Some(&t), &bad, &env).err().unwrap();
        assert_eq!((e.code, e.msg), (Code::ExecutionLost, Msg::ResumeMismatch));
        assert_eq!(admit(Some(&t), &r, &env).unwrap().kind, RunKind::Resume);
        // Guidance: pipeline only, needs a task, not while interrupts are pending; skips busy.
        g.run_mode = Some("pipeline");
        assert_eq!(code(admit(Some(&t), &g, &env)), Code::ExecutionLost);
        t.doc.execution.task_id = Some("task".into());
        assert_eq!(code(admit(Some(&t), &g, &env)), Code::ResumeRequired);
        t.doc.execution.pending.clear();
        t.active_run = Some("running".into());
        let a = admit(Some(&t), &g, &env).unwrap();
        assert_eq!(a.kind, RunKind::Guidance);
        assert_eq!(a.thread.active_run.as_deref(), Some("running"));
        g.run_mode = Some("normal");
        assert_eq!(code(admit(Some(&t), &g, &env)), Code::ExecutionLost);
    }

    #[test]
    fn unknown_resume_ids_are_refused_before_the_stream_in_1_0_mode() {
        let env = TestEnv::new(0);
        let mut t = paused(&env);
        let exec = t.doc.execution.execution_id.clone();
        t.doc.applied.insert((exec, "done".into()), "digest".into());
        for (ids, unknown) in [
            (vec!["p"], None),
            (vec!["p", "done"], None),
            (vec!["p", "nope"], Some("nope")),
            (vec!["nope"], Some("nope")),
            (vec![], None),
        ] {
            let mut r = req("r1", "d");
            r.resume = true;
            r.resume_ids = Some(&ids);
            assert_eq!(unknown_resume_id(&t, &r), unknown, "{ids:?}");
            let got = admit(Some(&t), &r, &env).map(|a| a.kind);
            match unknown {
                None => assert_eq!(got.unwrap(), RunKind::Resume, "{ids:?}"),
                Some(_) => assert_eq!(
                    got.unwrap_err(),
                    err(Code::UnknownInterrupt, Msg::ResumeUnknownInterruptId)
                ),
            }
        }
        // 0.1 mode: the reference decides in the stream.
        let mut r = req("r1", "d");
        r.resume = true;
        assert_eq!(unknown_resume_id(&t, &r), None);
        assert_eq!(admit(Some(&t), &r, &env).unwrap().kind, RunKind::Resume);
    }
}
