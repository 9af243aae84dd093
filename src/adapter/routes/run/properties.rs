//! Stage 2: the iac-code properties (`forwardedProps.iacCode`, or what `--default-cwd`
//! supplies for a client that sends none), the workspace they name, the run's language, and
//! the tools the reference refuses.

use crate::adapter::state::shared::Shared;
use crate::agui::cwd;
use crate::agui::input::{self, IacProps};
use crate::catalog::Msg;
use crate::errors::{ApiError, Code};
use crate::i18n::{self, Lang};

use super::parse::Parsed;
use crate::adapter::state::policies::Refusal;

pub(super) struct Props {
    pub(super) props: IacProps,
    /// The workspace, resolved inside the allowed roots.
    pub(super) cwd: String,
    /// The run's language (reference §1.7).
    pub(super) lang: Lang,
    /// The server supplied the properties (`--default-cwd`): the `rosInvocationId` is its.
    pub(super) supplied: bool,
}

pub(super) fn properties(sh: &Shared, p: &Parsed) -> Result<Props, Refusal> {
    let forwarded = &p.inp.forwarded_props;
    // A stock AG-UI client sends no iacCode properties: with `--default-cwd` the server
    // supplies them (a browser must not choose server paths); a request that carries them
    // is validated as sent.
    let defaulted = match &sh.default_cwd {
        Some(cwd) if !has_iac_props(forwarded) => {
            Some(default_props(cwd, &p.key.default_ros(&sh.server_key)))
        }
        _ => None,
    };
    let supplied = defaulted.is_some();
    // iacCode without a cwd (a client with its own rosInvocationId or model but no say in
    // the workspace): the server's directory, the rest as sent.
    let filled = match &sh.default_cwd {
        Some(cwd) if !supplied => with_default_cwd(forwarded, cwd),
        _ => None,
    };
    let forwarded = defaulted.as_ref().or(filled.as_ref()).unwrap_or(forwarded);
    let props = input::parse_iac_props(forwarded).map_err(|e| Refusal::from(e.response(p.lang)))?;
    // Run language (reference §1.7): the parsed preference, whichever container and key
    // spelling carried it, else the payload language.
    let lang = props
        .preferred_language
        .as_deref()
        .and_then(i18n::normalize)
        .unwrap_or(p.lang);
    let refuse = |m: Msg| Refusal::of(ApiError::new(Code::InvalidInput, m), p.lang);
    let cwd = cwd::resolve_cwd(&props.cwd, &sh.roots, sh.home.as_deref()).map_err(refuse)?;
    if p.inp.tools_len > 0 {
        return Err(refuse(Msg::ToolsUnsupported));
    }
    Ok(Props {
        props,
        cwd,
        lang,
        supplied,
    })
}

/// Whether forwardedProps carries the iac-code properties (either spelling).
fn has_iac_props(forwarded: &serde_json::Value) -> bool {
    forwarded
        .as_object()
        .is_some_and(|o| o.contains_key("iacCode") || o.contains_key("iac_code"))
}

/// The properties `--default-cwd` supplies: schema 1, the workspace, and a rosInvocationId
/// stable per thread that only this server can name (`ThreadKey::default_ros`), so a
/// thread's resumes and cancels match its runs and nobody else's.
fn default_props(cwd: &str, ros: &str) -> serde_json::Value {
    serde_json::json!({"iacCode": {"schemaVersion": 1, "cwd": cwd, "rosInvocationId": ros}})
}

/// `forwardedProps` with `--default-cwd` as the `cwd` of iacCode properties sent without one
/// (absent or null: a client that leaves the workspace to the server); `None` when there is
/// nothing to fill (the properties are then validated as sent).
fn with_default_cwd(forwarded: &serde_json::Value, cwd: &str) -> Option<serde_json::Value> {
    let fp = forwarded.as_object()?;
    let key = match (fp.get("iacCode"), fp.get("iac_code")) {
        (Some(_), None) => "iacCode",
        (None, Some(_)) => "iac_code",
        _ => return None,
    };
    let props = fp.get(key)?.as_object()?;
    if !props.get("cwd").is_none_or(serde_json::Value::is_null) {
        return None;
    }
    let mut filled = forwarded.clone();
    filled[key]["cwd"] = cwd.into();
    Some(filled)
}
