//! The AG-UI wire dialect as one value (issue 43): every difference between the reference's
//! 0.1 wire (ag-ui-protocol 0.1.20) and AG-UI 1.0 is a named policy here, chosen once at
//! start-up from `--agui-protocol` and passed down. Code asks the policy it needs
//! (`dialect.cancel_as_outcome`), never which version is spoken, so a difference has one
//! home and docs/protocol.md can name it.

use crate::config::AguiProtocol;

/// What the spoken AG-UI version changes. Build it with [`Dialect::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// `--agui-protocol` as written in `/capabilities` (`protocolMode`).
    pub mode: &'static str,
    /// `protocolVersion` on `RUN_STARTED` and in `/health` (`None`: not sent, as 0.1.20).
    pub protocol_version: Option<&'static str>,
    /// `RUN_ERROR` carries `threadId` and `runId` (the reference's shape; 1.0's schema has
    /// neither and its strict clients refuse unknown keys).
    pub error_ids: bool,
    /// A cancelled run ends `RUN_FINISHED` with a `cancelled` outcome (1.0) instead of
    /// `RUN_ERROR CANCELLED`.
    pub cancel_as_outcome: bool,
    /// Assistant message ids are scoped by run, so a resumed turn's text is a new message
    /// in a 1.0 client's store instead of an append to the one before the interrupt.
    pub run_scoped_messages: bool,
    /// `RunAgentInput.protocolVersion`, when present, must be a string (1.0 declares it; in
    /// 0.1 it is an unknown key, ignored as the reference does).
    pub checks_protocol_version: bool,
    /// `context[]` reaches the kernel as one more text part (the reference drops it).
    pub forwards_context: bool,
    /// Every `resume[]` entry must name a pending interrupt, refused before the stream
    /// (1.0's coverage rules); 0.1 keeps the reference's matching by text.
    pub strict_resume_ids: bool,
    /// A client that restates fewer messages than the thread holds (a fresh `HttpAgent`) is
    /// sent the stored conversation as `MESSAGES_SNAPSHOT`.
    pub snapshots_short_history: bool,
    /// Messages are read by 1.0's schema (tool messages with part lists, `file` sources),
    /// and unknown roles, unknown part types and parts the kernel cannot take are skipped
    /// and listed; 0.1 refuses them as the reference does.
    pub reads_1_0_messages: bool,
    /// An interrupt's `reason` names the kernel's input kind where the reference says
    /// `input_required` for it (`candidate_selection`); 0.1 keeps the reference's reason.
    pub kind_reasons: bool,
    /// The session event names the request's W3C trace id (`traceId`); the reference's
    /// event has a fixed key set.
    pub session_trace_id: bool,
}

impl Dialect {
    /// The reference's wire, byte for byte (`tests/reference_examples.rs`).
    pub const V0_1: Dialect = Dialect {
        mode: "0.1",
        protocol_version: None,
        error_ids: true,
        cancel_as_outcome: false,
        run_scoped_messages: false,
        checks_protocol_version: false,
        forwards_context: false,
        strict_resume_ids: false,
        snapshots_short_history: false,
        reads_1_0_messages: false,
        kind_reasons: false,
        session_trace_id: false,
    };

    /// AG-UI 1.0 as its official clients read it.
    pub const V1_0: Dialect = Dialect {
        mode: "1.0",
        protocol_version: Some("1.0"),
        error_ids: false,
        cancel_as_outcome: true,
        run_scoped_messages: true,
        checks_protocol_version: true,
        forwards_context: true,
        strict_resume_ids: true,
        snapshots_short_history: true,
        reads_1_0_messages: true,
        kind_reasons: true,
        session_trace_id: true,
    };

    pub fn of(protocol: AguiProtocol) -> Dialect {
        match protocol {
            AguiProtocol::V0_1 => Dialect::V0_1,
            AguiProtocol::V1_0 => Dialect::V1_0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each policy is one difference: the two dialects differ in every one of them, so a
    /// policy that one dialect does not change does not belong here.
    #[test]
    fn the_two_dialects_differ_in_every_policy() {
        let (a, b) = (Dialect::V0_1, Dialect::V1_0);
        assert_ne!(a.mode, b.mode);
        assert_ne!(a.protocol_version, b.protocol_version);
        assert_ne!(a.error_ids, b.error_ids);
        assert_ne!(a.cancel_as_outcome, b.cancel_as_outcome);
        assert_ne!(a.run_scoped_messages, b.run_scoped_messages);
        assert_ne!(a.checks_protocol_version, b.checks_protocol_version);
        assert_ne!(a.forwards_context, b.forwards_context);
        assert_ne!(a.strict_resume_ids, b.strict_resume_ids);
        assert_ne!(a.snapshots_short_history, b.snapshots_short_history);
        assert_ne!(a.reads_1_0_messages, b.reads_1_0_messages);
        assert_ne!(a.kind_reasons, b.kind_reasons);
        assert_eq!(Dialect::of(AguiProtocol::V0_1), a);
        assert_eq!(Dialect::of(AguiProtocol::V1_0), b);
    }
}
