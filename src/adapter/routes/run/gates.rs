//! Stage 4: the extras' policies, asked in their one list (`state/policies.rs`) once the
//! request is known to be well formed and before its thread is touched: a refusal leaves
//! nothing behind. What a gate lets in it may hold for the run's life (a quota's place).

use crate::adapter::state::policies::{Entry, Hold};
use crate::adapter::state::shared::Shared;

use super::parse::Parsed;
use super::properties::Props;
use crate::adapter::state::policies::Refusal;

pub(super) fn gates(sh: &Shared, p: &Parsed, props: &Props) -> Result<Vec<Box<dyn Hold>>, Refusal> {
    let entry = Entry {
        caller: &p.key.caller,
        guidance: props.props.active_guidance,
        now_ms: sh.env.now_ms(),
        lang: p.lang,
    };
    let mut holds = Vec::new();
    for gate in sh.policies.gates() {
        holds.extend(gate.enter(&entry)?);
    }
    Ok(holds)
}
