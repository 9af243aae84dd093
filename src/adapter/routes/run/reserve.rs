//! Stage 5: the thread's slot (loaded the first time it is named), the `rosInvocationId` an
//! older supplied one still answers to, and a run that is leaving the thread waited for, so
//! a client that sends its next message at once does not meet `THREAD_BUSY`.

use crate::adapter::state::shared::Shared;
use crate::adapter::state::threads::Slot;
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::sync::lock;

use super::parse::Parsed;
use super::properties::Props;
use crate::adapter::state::policies::Refusal;

pub(super) struct Reserved {
    pub(super) slot: Slot,
    pub(super) props: Props,
}

pub(super) fn reserve(sh: &Shared, p: &Parsed, mut props: Props) -> Result<Reserved, Refusal> {
    let slot = sh.registry.slot(&p.key).map_err(|e| {
        log::error!("thread {}: {e}", p.inp.thread_id);
        Refusal::of(
            ApiError::new(Code::StateUnavailable, Msg::StateUnavailable),
            p.lang,
        )
    })?;
    // An execution begun before the supplied id was keyed carries the old one: its
    // resumes and guidance still match it; its next turn gets the keyed one.
    if props.supplied && (p.inp.resume.is_some() || props.props.active_guidance) {
        let legacy = p.key.legacy_default_ros();
        if lock(&slot)
            .as_ref()
            .is_some_and(|t| t.doc.execution.ros_invocation_id == legacy)
        {
            props.props.ros_invocation_id = legacy;
        }
    }
    // A run whose client has just gone away (or that a Stop just cancelled) still holds the
    // thread for a moment, until its worker notices.
    sh.wait_for_departing_run(&slot);
    Ok(Reserved { slot, props })
}
