//! Which field of a request body is wrong, and how: the 400 `INVALID_INPUT` messages name it
//! ("`threadId` is required", "`forwardedProps.iacCode.colour` is not a known field").

use crate::catalog::Msg;
use crate::i18n::Lang;

/// What is wrong with the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Absent (or null where a value is needed).
    Required,
    /// Present with another JSON type than this one.
    Type(&'static str),
    /// Not a key this object takes.
    Unknown,
    /// Given in both spellings (camelCase and snake_case), or twice.
    Duplicate,
    /// Of the right type, but not an allowed value.
    Value,
    /// An id longer than `limits::MAX_ID_BYTES` or with a character a log line cannot show
    /// as it is ([`id_ok`]).
    Id,
    /// `forwardedProps.iacCode` is absent: the message lists what it needs.
    IacCodeRequired,
    /// `forwardedProps.iacCode.cwd` is absent and the server has no `--default-cwd` to fill it.
    CwdRequired,
}

/// A field path (`messages[0].content`, `forwardedProps.iacCode.cwd`; empty for the body
/// itself) and its problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub problem: Problem,
}

impl FieldError {
    /// `400 INVALID_INPUT` naming the field, in `lang`.
    pub fn response(&self, lang: Lang) -> crate::server::http::Response {
        crate::errors::ApiError::invalid_input(self.message(lang))
    }

    pub(crate) fn new(path: &str, problem: Problem) -> FieldError {
        FieldError {
            path: path.to_string(),
            problem,
        }
    }

    /// The same error seen from the object that holds this one at `prefix`.
    pub(crate) fn within(mut self, prefix: &str) -> FieldError {
        self.path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_string(),
            (false, false) if self.path.starts_with('[') => format!("{prefix}{}", self.path),
            (false, false) => format!("{prefix}.{}", self.path),
        };
        self
    }

    /// The message in `lang`, naming the field.
    pub fn message(&self, lang: Lang) -> String {
        let field = if self.path.is_empty() {
            "body"
        } else {
            self.path.as_str()
        };
        let (msg, ty) = match &self.problem {
            Problem::Required => (Msg::FieldRequired, ""),
            Problem::Type(t) => (Msg::FieldType, *t),
            Problem::Unknown => (Msg::FieldUnknown, ""),
            Problem::Duplicate => (Msg::FieldDuplicate, ""),
            Problem::Value => (Msg::FieldValue, ""),
            Problem::Id => (Msg::FieldId, ""),
            Problem::IacCodeRequired => (Msg::IacCodeRequired, ""),
            Problem::CwdRequired => (Msg::CwdRequired, ""),
        };
        msg.text(lang)
            .replace("{field}", &crate::logging::escape(field))
            .replace("{type}", ty)
            .replace("{max}", &crate::limits::MAX_ID_BYTES.to_string())
    }
}

/// A client's id (`threadId`, `runId`, `parentRunId`) as the server keeps it: at most
/// `limits::MAX_ID_BYTES` bytes, none of them a control character, a line or paragraph
/// separator or a Unicode format character (`logging::unsafe_in_line`). Every event of a run,
/// its replay log, the thread cache, the audit and text logs repeat the ids (issue 57, 3–4).
pub(crate) fn id_ok(s: &str) -> bool {
    s.len() <= crate::limits::MAX_ID_BYTES && !s.contains(crate::logging::unsafe_in_line)
}

/// [`id_ok`], or the refusal naming `path`.
pub(crate) fn check_id(path: &str, s: &str) -> Result<(), FieldError> {
    if id_ok(s) {
        Ok(())
    } else {
        Err(FieldError::new(path, Problem::Id))
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message(Lang::En))
    }
}

impl std::error::Error for FieldError {}
