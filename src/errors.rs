//! Error codes exactly as the reference spells them, the JSON error envelope, and its HTTP
//! response (`ApiError::response`).

use serde_json::Value;

use crate::catalog::Msg;
use crate::i18n::Lang;
use crate::server::http::Response;

/// Every code the server can return, before or inside the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    Unauthorized,
    UnsupportedMediaType,
    RequestTooLarge,
    InvalidJson,
    InvalidInput,
    StateUnavailable,
    ExecutionLost,
    DuplicateRunId,
    RunIdConflict,
    ThreadBusy,
    ThreadBindingConflict,
    ResumeRequired,
    ExecutionNotFound,
    A2aProtocolError,
    A2aExecutionFailed,
    Cancelled,
    A2aUnavailable,
    StatePersistenceFailed,
    SessionBackupNotReady,
    ResumeAlreadyApplied,
    UnknownInterrupt,
    IncompleteResume,
    ResumePayloadInvalid,
    ExecutionExpired,
    /// New in iac-agui: the configured run/job capacity is exhausted.
    ServerBusy,
    /// New in iac-agui: a bug; the reference would answer a plain 500.
    InternalError,
    /// New in iac-agui: the `Host` header is not one this server answers (DNS rebinding).
    HostNotAllowed,
    /// New in iac-agui: the kernel failed a run while the thread's previous task was still
    /// stopping (retryable).
    PreviousRunStillStopping,
    /// New in iac-agui: `X-Iac-Code-Thread-Id` (the fleet's routing key) names another thread
    /// than the body.
    ThreadIdMismatch,
    /// New in iac-agui: the server is draining for a restart (503 before a stream; a run
    /// still going when the drain's grace ends gets it as its `RUN_ERROR`).
    ServerShuttingDown,
    /// Upstream's subscribe route: `threadId`, `runId` or `rosInvocationId` are not those of
    /// the execution.
    ExecutionIdentityMismatch,
    /// New in iac-agui: the caller has no thread of this id (the thread routes).
    ThreadNotFound,
    /// New in iac-agui: the thread's stored conversation file is damaged, foreign or newer
    /// than this build reads (that thread only).
    HistoryUnreadable,
    /// New in iac-agui: the kernel refused an interrupt's answer as invalid (JSON-RPC
    /// `-32602`); the interrupt stays pending (the reference says `A2A_UNAVAILABLE`).
    ResumeRejected,
    /// New in iac-agui: a known caller that may not read this route (`/metrics` once callers
    /// are told apart, without the metrics credential).
    Forbidden,
    /// New in iac-agui: the caller is over a quota of its own (concurrent runs, admissions
    /// per minute; issue 44); `Retry-After` says when to try again.
    RateLimited,
    /// New in iac-agui: `--audit-log` cannot take the decision's record (a full disk, an
    /// unwritable file): the decision is refused and nothing is done (issue 44).
    AuditUnavailable,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::Unauthorized => "UNAUTHORIZED",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Code::RequestTooLarge => "REQUEST_TOO_LARGE",
            Code::InvalidJson => "INVALID_JSON",
            Code::InvalidInput => "INVALID_INPUT",
            Code::StateUnavailable => "STATE_UNAVAILABLE",
            Code::ExecutionLost => "EXECUTION_LOST",
            Code::DuplicateRunId => "DUPLICATE_RUN_ID",
            Code::RunIdConflict => "RUN_ID_CONFLICT",
            Code::ThreadBusy => "THREAD_BUSY",
            Code::ThreadBindingConflict => "THREAD_BINDING_CONFLICT",
            Code::ResumeRequired => "RESUME_REQUIRED",
            Code::ExecutionNotFound => "EXECUTION_NOT_FOUND",
            Code::A2aProtocolError => "A2A_PROTOCOL_ERROR",
            Code::A2aExecutionFailed => "A2A_EXECUTION_FAILED",
            Code::Cancelled => "CANCELLED",
            Code::A2aUnavailable => "A2A_UNAVAILABLE",
            Code::StatePersistenceFailed => "STATE_PERSISTENCE_FAILED",
            Code::SessionBackupNotReady => "SESSION_BACKUP_NOT_READY",
            Code::ResumeAlreadyApplied => "RESUME_ALREADY_APPLIED",
            Code::UnknownInterrupt => "UNKNOWN_INTERRUPT",
            Code::IncompleteResume => "INCOMPLETE_RESUME",
            Code::ResumePayloadInvalid => "RESUME_PAYLOAD_INVALID",
            Code::ExecutionExpired => "EXECUTION_EXPIRED",
            Code::ServerBusy => "SERVER_BUSY",
            Code::InternalError => "INTERNAL_ERROR",
            Code::HostNotAllowed => "HOST_NOT_ALLOWED",
            Code::PreviousRunStillStopping => "PREVIOUS_RUN_STILL_STOPPING",
            Code::ThreadIdMismatch => "THREAD_ID_MISMATCH",
            Code::ServerShuttingDown => "SERVER_SHUTTING_DOWN",
            Code::ExecutionIdentityMismatch => "EXECUTION_IDENTITY_MISMATCH",
            Code::ThreadNotFound => "THREAD_NOT_FOUND",
            Code::HistoryUnreadable => "HISTORY_UNREADABLE",
            Code::ResumeRejected => "RESUME_REJECTED",
            Code::Forbidden => "FORBIDDEN",
            Code::RateLimited => "RATE_LIMITED",
            Code::AuditUnavailable => "AUDIT_UNAVAILABLE",
        }
    }

    /// HTTP status when the code is returned before the stream starts.
    pub(crate) fn http_status(self) -> u16 {
        match self {
            Code::Unauthorized => 401,
            Code::Forbidden => 403,
            Code::RateLimited => 429,
            Code::HostNotAllowed => 421,
            Code::UnsupportedMediaType => 415,
            Code::RequestTooLarge => 413,
            Code::InvalidJson | Code::InvalidInput | Code::ThreadIdMismatch => 400,
            Code::StateUnavailable
            | Code::ServerBusy
            | Code::A2aUnavailable
            | Code::ServerShuttingDown
            | Code::AuditUnavailable => 503,
            Code::ExecutionNotFound | Code::ThreadNotFound => 404,
            Code::InternalError | Code::HistoryUnreadable => 500,
            _ => 409,
        }
    }
}

/// An error with its code and catalog message, rendered in a language at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiError {
    pub(crate) code: Code,
    pub(crate) msg: Msg,
}

impl ApiError {
    pub const fn new(code: Code, msg: Msg) -> ApiError {
        ApiError { code, msg }
    }

    /// The compact JSON error envelope `{"error":{"code","message"}}`, raw UTF-8 (reference
    /// §1.3); sent with `Code::http_status` as `application/json` without charset.
    pub(crate) fn body(self, lang: Lang) -> Vec<u8> {
        let body = serde_json::json!({"error": {"code": self.code.as_str(), "message": self.msg.text(lang)}});
        serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec())
    }
}

impl ApiError {
    /// The `{"error":{"code","message"}}` response with the code's status.
    pub fn response(self, lang: Lang) -> Response {
        self.response_with(lang, serde_json::Map::new())
    }

    /// `400 INVALID_INPUT` with a message already in the request's language.
    pub fn invalid_input(message: String) -> Response {
        Self::with_message(Code::InvalidInput, message)
    }

    /// `code`'s response with a message already in the request's language.
    pub fn with_message(code: Code, message: String) -> Response {
        let body = serde_json::json!({"error": {"code": code.as_str(), "message": message}});
        Response::json(
            code.http_status(),
            serde_json::to_vec(&body).unwrap_or_default(),
        )
    }

    /// The response with `extra` keys in the error object after `code` and `message`.
    pub fn response_with(self, lang: Lang, extra: serde_json::Map<String, Value>) -> Response {
        let status = self.code.http_status();
        if status == 503 {
            crate::metrics::M.unavailable.inc(self.code.as_str());
        }
        if extra.is_empty() {
            return Response::json(status, self.body(lang));
        }
        let mut error = serde_json::Map::new();
        error.insert("code".into(), self.code.as_str().into());
        error.insert("message".into(), self.msg.text(lang).into());
        error.extend(extra);
        let body = serde_json::to_vec(&serde_json::json!({ "error": error })).unwrap_or_default();
        Response::json(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_is_compact_and_ordered() {
        let e = ApiError::new(Code::ThreadBusy, Msg::ThreadBusy);
        assert_eq!(e.code.http_status(), 409);
        assert_eq!(
            String::from_utf8(e.body(Lang::En)).unwrap(),
            format!(
                r#"{{"error":{{"code":"THREAD_BUSY","message":"{}"}}}}"#,
                Msg::ThreadBusy.text(Lang::En)
            )
        );
    }

    #[test]
    fn non_ascii_is_raw_utf8() {
        let body = ApiError::new(Code::Unauthorized, Msg::Unauthorized).body(Lang::Ja);
        let s = String::from_utf8(body).unwrap();
        assert!(s.contains("トークン"), "{s}");
    }
}
