//! Stage 1: the envelope, read by the rules of the dialect the request declared (the field
//! it names when it is wrong); the thread it is for; its digest (the run id's identity).

use crate::adapter::state::shared::Shared;
use crate::agui::dialect::{Declared, Dialect};
use crate::agui::input::{self, RunInput};
use crate::i18n::Lang;
use crate::principal::ThreadKey;

use crate::adapter::state::policies::Refusal;

pub(super) struct Parsed {
    pub(super) inp: RunInput,
    pub(super) key: ThreadKey,
    pub(super) dialect: Dialect,
    /// The request's language (payload, else header): its refusals speak it.
    pub(super) lang: Lang,
    /// sha256 of the body: a run id sent again with another body is a conflict.
    pub(super) digest: String,
    pub(super) origin: crate::app::RequestOrigin,
}

pub(super) fn parse(
    sh: &Shared,
    req: crate::app::RunRequest,
    declared: Declared,
) -> Result<Parsed, Refusal> {
    let lang = req.payload_lang;
    let dialect = declared.dialect_or(sh.default_dialect);
    let inp = input::parse_envelope_as(&req.body, &dialect)
        .map_err(|e| Refusal::from(e.response(lang)))?;
    if declared == Declared::Unread {
        crate::agui::dialect::warn_unread(&req.body, "run", &inp.thread_id);
    }
    warn_unknown_fields(&req.body, &inp.thread_id);
    let key = ThreadKey::new(&req.caller, &inp.thread_id);
    let digest = crate::agui::digest::digest(&req.body);
    Ok(Parsed {
        inp,
        key,
        dialect,
        lang,
        digest,
        origin: req.origin,
    })
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
