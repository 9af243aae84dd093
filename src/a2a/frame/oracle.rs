//! The differential oracles: the typed ways held to the `Value` read's answers. Only in tests
//! and the `delta_frame` fuzz target (`cfg(fuzzing)`); every captured frame goes through them
//! (`frame/tests.rs`).

use super::{FrameReader, Way, value_read};
use crate::a2a::types::{F_TEXT, Payload};

/// The template `prev` leaves.
fn after(prev: &[u8]) -> FrameReader {
    let mut r = FrameReader::default();
    let _ = r.typed(prev.to_vec());
    r
}

/// When a typed way takes `data` (read alone, no template), the `Value` read must take it
/// too and every question the adapter asks of the event must get the same answer.
/// `Ok(true)`: the typed read took the frame; `Err`: the two disagree.
pub fn delta_agrees(data: &[u8]) -> Result<bool, String> {
    let Ok((_, Payload::Event(fast))) = FrameReader::default().typed(data.to_vec()) else {
        return Ok(false);
    };
    let Payload::Event(slow) = value_read(data)
        .map_err(|e| format!("the typed read took what the Value read refuses: {e}"))?
    else {
        return Err("typed read took an error payload".into());
    };
    let iac_extra = slow
        .iac()
        .is_some_and(|m| m.keys().any(|k| k != "iacCodeSessionId"));
    let checks = [
        ("kind", fast.kind == slow.kind),
        ("task_id", fast.task_id() == slow.task_id()),
        ("context_id", fast.context_id() == slow.context_id()),
        ("state", fast.state() == slow.state()),
        ("session_id", fast.session_id() == slow.session_id()),
        (
            "status_message",
            fast.status_message() == slow.status_message(),
        ),
        ("iac", fast.iac().is_none() && !iac_extra),
        (
            "history",
            fast.history().is_none() && slow.history().is_none(),
        ),
        (
            "artifact",
            fast.artifact().is_none() && slow.artifact().is_none(),
        ),
    ];
    match checks.iter().find(|(_, ok)| !ok) {
        Some((what, _)) => Err(format!("typed and Value reads differ on {what}")),
        None => Ok(true),
    }
}

/// `data` read against the template `prev` leaves is read exactly as it is on its own (the
/// same fields from the same places, or refused both ways). `Ok(true)`: the template took it.
pub fn template_agrees(prev: &[u8], data: &[u8]) -> Result<bool, String> {
    let with = after(prev).typed(data.to_vec()).ok();
    let alone = FrameReader::default().typed(data.to_vec()).ok();
    let took = matches!(with, Some((Way::Template, _)));
    let (with, alone) = (with.map(|(_, p)| p), alone.map(|(_, p)| p));
    if with != alone {
        return Err(format!(
            "read against the template: {with:?}\nread alone: {alone:?}"
        ));
    }
    Ok(took)
}

/// `prev` with the bytes of its text (between the quotes) replaced by `text`, when `prev` is
/// kept as a template (`None` otherwise). Any bytes may stand there, so every such frame puts
/// the template's shortcut to the test.
pub fn template_splice(prev: &[u8], text: &[u8]) -> Option<Vec<u8>> {
    let t = after(prev).template;
    if t.frame.is_empty() {
        return None;
    }
    let s = t.spans[F_TEXT]?;
    let (head, tail) = (prev.get(..s.start as usize)?, prev.get(s.end as usize..)?);
    Some([head, text, tail].concat())
}
