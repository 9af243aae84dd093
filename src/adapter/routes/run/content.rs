//! Stage 3: what the run sends the kernel — a new turn's (or guidance's) user message, the
//! dialect's `context[]` with it, and the parts it goes on without; a resume has none.

use crate::agui::content::{self, Skipped, UserMessage};
use crate::errors::{ApiError, Code};

use super::parse::Parsed;
use super::properties::Props;
use crate::adapter::state::policies::Refusal;

pub(super) struct Content {
    pub(super) user: Option<UserMessage>,
    pub(super) skipped: Vec<Skipped>,
}

pub(super) fn content(p: &mut Parsed, props: &Props) -> Result<Content, Refusal> {
    let mut skipped = std::mem::take(&mut p.inp.skipped);
    if p.inp.resume.is_some() {
        return Ok(Content {
            user: None,
            skipped,
        });
    }
    let mut user = content::user_message_as(&p.inp.messages, &p.dialect, &mut skipped)
        .map_err(|m| Refusal::of(ApiError::new(Code::InvalidInput, m), p.lang))?;
    // A new turn's message only: an answer or guidance is matched by its text.
    if p.dialect.forwards_context && !props.props.active_guidance {
        content::add_context(&mut user, &p.inp.context, &mut skipped);
    }
    Ok(Content {
        user: Some(user),
        skipped,
    })
}
