//! The AG-UI wire dialect as one value (issue 43): every difference between the reference's
//! 0.1 wire (ag-ui-protocol 0.1.20) and AG-UI 1.0 is a named policy here. Each request is
//! served in the dialect its `protocolVersion` declares ([`Declared`], issue 57), one that
//! declares none in `--agui-protocol`'s; the choice is made once, before the envelope is
//! read, and travels with the run. Code asks the policy it needs (`dialect.cancel_as_outcome`),
//! never which version is spoken, so a difference has one home and docs/protocol.md can name it.

use serde_json::Value;

use crate::agui::field::{FieldError, Problem};

/// AG-UI wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AguiProtocol {
    /// The reference's dialect (ag-ui-protocol 0.1.20).
    V0_1,
    /// AG-UI 1.0: `protocolVersion` on RUN_STARTED and a `cancelled` outcome.
    V1_0,
}

impl AguiProtocol {
    pub(crate) fn parse(s: &str) -> Option<AguiProtocol> {
        match s.trim() {
            "0.1" | "0.1.20" => Some(AguiProtocol::V0_1),
            "1.0" | "1" => Some(AguiProtocol::V1_0),
            _ => None,
        }
    }
}

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
    /// The reference's wire, byte for byte (`tests/it/reference_examples.rs`).
    pub const V0_1: Dialect = Dialect {
        mode: "0.1",
        protocol_version: None,
        error_ids: true,
        cancel_as_outcome: false,
        run_scoped_messages: false,
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
        forwards_context: true,
        strict_resume_ids: true,
        snapshots_short_history: true,
        reads_1_0_messages: true,
        kind_reasons: true,
        session_trace_id: true,
    };

    /// The newest dialect this server speaks: what a declaration it cannot read is served in.
    pub const NEWEST: Dialect = Dialect::V1_0;

    /// Every dialect this server speaks, oldest first (`/capabilities`).
    pub const ALL: [Dialect; 2] = [Dialect::V0_1, Dialect::V1_0];

    /// The dialect of `--agui-protocol`: what a request that declares no version gets.
    pub fn of(protocol: AguiProtocol) -> Dialect {
        match protocol {
            AguiProtocol::V0_1 => Dialect::V0_1,
            AguiProtocol::V1_0 => Dialect::V1_0,
        }
    }
}

/// What a request's `protocolVersion` declares, read by AG-UI 1.0's versioning rule: absence
/// is a peer from before versions were declared; a version is `MAJOR.MINOR`; one newer than
/// the reader speaks, or one it cannot interpret, is handled like a newer one — served, with a
/// warning (the 1.0 SHOULD; docs/protocol.md, "Dialects").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declared {
    /// Absent or `null`: served in `--agui-protocol`'s dialect.
    Nothing,
    /// A version this server speaks: `0.x` (older than any declaration 1.0 defines) is served
    /// as 0.1, `1.0` as 1.0.
    Spoken(Dialect),
    /// Newer than 1.0 (`1.1`, `2.0`) or not `MAJOR.MINOR` (`abc`, `1.0.0`, empty): served in
    /// [`Dialect::NEWEST`] (only a client that knows 1.0 sends the field at all, and 1.0's
    /// minor versions only add), and warned about.
    Unread,
}

impl Declared {
    /// The declaration of a request `body` (a run's or a subscribe's). A `protocolVersion`
    /// that is neither a string nor null is malformed by the 1.0 schema
    /// (`protocolVersion?: string`) and refused, whatever the server's own dialect: only a
    /// client that knows the field sends it.
    pub fn read(body: &Value) -> Result<Declared, FieldError> {
        match declaration(body) {
            None | Some(Value::Null) => Ok(Declared::Nothing),
            Some(Value::String(v)) => Ok(Declared::of_version(v)),
            Some(_) => Err(FieldError::new("protocolVersion", Problem::Type("string"))),
        }
    }

    /// A declared version string, by the `MAJOR.MINOR` grammar (ASCII digits; leading zeros
    /// compare as numbers).
    fn of_version(v: &str) -> Declared {
        let Some((major, minor)) = v.split_once('.') else {
            return Declared::Unread;
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(major) || !digits(minor) {
            return Declared::Unread;
        }
        let zero = |s: &str| s.bytes().all(|b| b == b'0');
        let one = |s: &str| s.trim_start_matches('0') == "1";
        match (zero(major), one(major) && zero(minor)) {
            (true, _) => Declared::Spoken(Dialect::V0_1),
            (false, true) => Declared::Spoken(Dialect::V1_0),
            (false, false) => Declared::Unread,
        }
    }

    /// The dialect the declaration asks for (`None`: it asks for none).
    pub fn dialect(self) -> Option<Dialect> {
        match self {
            Declared::Nothing => None,
            Declared::Spoken(d) => Some(d),
            Declared::Unread => Some(Dialect::NEWEST),
        }
    }

    /// The dialect the request is served in; `default` is `--agui-protocol`'s.
    pub fn dialect_or(self, default: Dialect) -> Dialect {
        self.dialect().unwrap_or(default)
    }
}

/// The warning for a declaration the server cannot read (the 1.0 SHOULD: proceed, and warn),
/// once per request; `what` is the route ("run", "subscribe").
pub fn warn_unread(body: &Value, what: &str, thread_id: &str) {
    log::warn!(
        "{what} on thread {}: protocolVersion {} is not a version this server reads (it speaks \
         0.1 and 1.0); served as AG-UI {}",
        crate::logging::escape(thread_id),
        shown(body),
        Dialect::NEWEST.mode
    );
}

/// The suffix that makes a text message's id one run's own (`{kernel id}.{suffix}`): how 1.0
/// mode names messages on the wire (`run_scoped_messages`), and how a stored conversation
/// names a message a later run opens again.
pub(crate) fn run_scope(run_id: &str) -> String {
    use sha2::{Digest, Sha256};
    crate::ids::hex(&Sha256::digest(run_id.as_bytes())[..4])
}

/// The body's `protocolVersion`, in either spelling as the envelope reads its keys (a Python
/// client that serialises without aliases sends `protocol_version`).
fn declaration(body: &Value) -> Option<&Value> {
    body.get("protocolVersion")
        .or_else(|| body.get("protocol_version"))
}

/// What of a declaration the server could not read goes into its warning: escaped, and cut
/// short (the value is the client's, up to the body's size).
fn shown(body: &Value) -> String {
    let v = declaration(body).and_then(Value::as_str).unwrap_or("");
    let cut: String = v.chars().take(64).collect();
    let more = if cut.len() < v.len() { "…" } else { "" };
    format!("\"{}{more}\"", crate::logging::escape(&cut))
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
        assert_ne!(a.forwards_context, b.forwards_context);
        assert_ne!(a.strict_resume_ids, b.strict_resume_ids);
        assert_ne!(a.snapshots_short_history, b.snapshots_short_history);
        assert_ne!(a.reads_1_0_messages, b.reads_1_0_messages);
        assert_ne!(a.kind_reasons, b.kind_reasons);
        assert_eq!(Dialect::of(AguiProtocol::V0_1), a);
        assert_eq!(Dialect::of(AguiProtocol::V1_0), b);
    }

    /// Issue 57: each request is served in the dialect it declares, by 1.0's versioning rule;
    /// a declaration the server cannot read is served in the newest dialect (and warned
    /// about); a malformed one is refused; none gets the server's `--agui-protocol`.
    #[test]
    fn a_request_is_served_in_the_dialect_its_protocol_version_declares() {
        use serde_json::json;
        let (v01, v10) = (Dialect::V0_1, Dialect::V1_0);
        let (none, unread) = (Some(Declared::Nothing), Some(Declared::Unread));
        let (spoken01, spoken10) = (Some(Declared::Spoken(v01)), Some(Declared::Spoken(v10)));
        // `protocolVersion`'s value and what it declares; `None`: refused, a 400 naming it.
        let cases: &[(Value, Option<Declared>)] = &[
            (Value::Null, none),
            (json!("1.0"), spoken10),
            (json!("01.00"), spoken10),
            (json!("0.1"), spoken01),
            (json!("0.9"), spoken01),
            (json!("1.1"), unread),
            (json!("2.0"), unread),
            (json!("99999999999999999999.0"), unread),
            (json!("1.0.0"), unread),
            (json!("0.1.20"), unread),
            (json!("abc"), unread),
            (json!(""), unread),
            (json!(" 1.0"), unread),
            (json!("1."), unread),
            (json!(".0"), unread),
            (json!("１.０"), unread),
            (json!(1.0), None),
            (json!(1), None),
            (json!(true), None),
            (json!(["1.0"]), None),
            (json!({"v": "1.0"}), None),
        ];
        let refused = FieldError::new("protocolVersion", Problem::Type("string"));
        for (version, want) in cases {
            for key in ["protocolVersion", "protocol_version"] {
                let got = Declared::read(&json!({ key: version }));
                match want {
                    Some(d) => assert_eq!(got.as_ref().ok(), Some(d), "{key}: {version}"),
                    None => assert_eq!(got.as_ref().err(), Some(&refused), "{key}: {version}"),
                }
            }
        }
        assert_eq!(Declared::read(&json!({})), Ok(Declared::Nothing));
        // Nothing declared: the server's own; a version it cannot read: the newest it speaks.
        for default in Dialect::ALL {
            assert_eq!(Declared::Nothing.dialect_or(default), default);
            assert_eq!(Declared::Unread.dialect_or(default), Dialect::NEWEST);
            assert_eq!(Declared::Spoken(v01).dialect_or(default), v01);
            assert_eq!(Declared::Spoken(v10).dialect_or(default), v10);
        }
        assert_eq!(Dialect::NEWEST, v10);
    }

    #[test]
    fn an_unread_declaration_is_shown_escaped_and_cut_short() {
        use serde_json::json;
        assert_eq!(shown(&json!({"protocolVersion": "2.0"})), "\"2.0\"");
        let long = "9".repeat(100);
        let s = shown(&json!({ "protocolVersion": long }));
        assert_eq!(s, format!("\"{}…\"", "9".repeat(64)));
        assert!(!shown(&json!({"protocolVersion": "a\nb"})).contains('\n'));
    }
}
