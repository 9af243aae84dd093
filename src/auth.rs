//! Who is calling: the server's identity mode, decided once, and the principal of a request
//! decided from its head on the loop (no I/O there).
//!
//! - `Identity::Shared`: no auth, or the one `IAC_CODE_AGUI_AUTH_TOKEN` (reference §1.5);
//!   every request is `Caller::Shared`.
//! - `Identity::PerCaller`: callers told apart (the `identity` extra, `callers.rs`): a tokens
//!   file (`--auth-tokens-file`, read by its own watcher thread: `tokens.rs`), or the
//!   principal a trusted proxy's header names (`--identity-header`).
//!
//! A header that says who is calling (`Authorization`, the identity header) counts only when
//! sent once: a proxy that appends its copy after the client's would otherwise let the client's
//! first copy win.

use std::sync::Arc;

use crate::principal::{BadName, Caller};
use crate::server::http::RequestHead;

pub(crate) mod callers;
#[cfg(feature = "identity")]
mod tokens;

#[cfg(feature = "identity")]
pub use tokens::{TokenFile, TokenTable, Tokens};

/// How the server tells callers apart.
#[derive(Debug, Clone)]
pub enum Identity {
    Shared {
        token: Option<Vec<u8>>,
    },
    /// Callers told apart (the `identity` extra).
    PerCaller(Arc<dyn PerCaller>),
}

/// What the core asks of a mode that tells callers apart (the `identity` extra: a tokens
/// file, a trusted proxy's header); the routes and the quotas name only this.
pub trait PerCaller: Send + Sync + std::fmt::Debug {
    /// The request's principal, from its head alone (on the loop: no I/O).
    fn caller(&self, head: &RequestHead) -> Result<Caller, Refusal>;
    /// Whether requests can be authenticated now (`/health`).
    fn usable(&self) -> bool;
    /// Whether `caller` may read `/metrics` (`--metrics-principals`).
    fn reads_metrics(&self, caller: &Caller) -> bool;
    /// The request header that names the caller, lowercase (a CORS page may send it).
    fn header(&self) -> Option<&str>;
    /// Whether the callers are a list the operator wrote (a tokens file: `/metrics` may name
    /// them, a bounded set).
    fn listed(&self) -> bool;
    /// What `caller`'s credentials say of its own quotas.
    fn own_limits(&self, caller: &Caller) -> OwnLimits;
}

/// What a caller's credentials say of its own quotas (a tokens-file line's `max_runs=N`,
/// `rate=N`; issue 44), for the quota gate to put over its options: where the extra that
/// reads credentials and the one that counts runs meet. `None`: nothing said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnLimits {
    pub max_runs: Option<u32>,
    /// Run admissions per minute.
    pub rate_per_min: Option<u32>,
}

/// The shared token's bytes; an empty token counts as none.
pub(crate) fn shared_token(token: Option<String>) -> Option<Vec<u8>> {
    token.filter(|t| !t.is_empty()).map(String::into_bytes)
}

/// Why a request has no principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no token, or not one of ours (or the tokens file cannot be used).
    Unauthorized,
    /// 401 naming the identity header the request lacks.
    NoHeader { header: String },
    /// 400: the identity header is there but cannot name a principal.
    BadHeader { header: String, why: BadName },
    /// 400: a header that says who is calling was sent more than once.
    Repeated { header: String },
    /// 403: a known caller that may not read `/metrics`.
    Forbidden,
}

/// Who may read `/metrics` besides what the identity mode says: the metrics token (once
/// callers are told apart, also the principals the mode lists: `PerCaller::reads_metrics`).
#[derive(Debug, Clone, Default)]
pub struct MetricsAccess {
    pub(crate) token: Option<Vec<u8>>,
}

/// The one value of `name`, if any; `Repeated` when sent more than once.
pub(crate) fn single<'h>(head: &'h RequestHead, name: &str) -> Result<Option<&'h [u8]>, Refusal> {
    if head.header_count(name) > 1 {
        return Err(Refusal::Repeated {
            header: name.to_string(),
        });
    }
    Ok(head.header(name))
}

impl Identity {
    /// One shared token (an empty one counts as none).
    pub fn shared(token: Option<String>) -> Identity {
        Identity::Shared {
            token: shared_token(token),
        }
    }

    /// Whether requests must prove who they are (a non-loopback listener without it warns).
    pub fn authenticates(&self) -> bool {
        !matches!(self, Identity::Shared { token: None })
    }

    /// Whether requests can be authenticated at all (`/health`): not while the tokens file
    /// cannot be used.
    pub fn usable(&self) -> bool {
        match self {
            Identity::Shared { .. } => true,
            Identity::PerCaller(p) => p.usable(),
        }
    }

    /// The request header that names the caller, if one does (lowercase).
    pub fn header(&self) -> Option<&str> {
        match self {
            Identity::Shared { .. } => None,
            Identity::PerCaller(p) => p.header(),
        }
    }

    /// Whether the callers are a list the operator wrote, which `/metrics` may name.
    pub fn listed(&self) -> bool {
        match self {
            Identity::Shared { .. } => false,
            Identity::PerCaller(p) => p.listed(),
        }
    }

    /// What `caller`'s credentials say of its own quotas (nothing, with one shared caller).
    pub fn own_limits(&self, caller: &Caller) -> OwnLimits {
        match self {
            Identity::Shared { .. } => OwnLimits::default(),
            Identity::PerCaller(p) => p.own_limits(caller),
        }
    }

    /// The request's principal, from its head alone.
    pub fn caller(&self, head: &RequestHead) -> Result<Caller, Refusal> {
        match self {
            Identity::Shared { token: None } => Ok(Caller::Shared),
            Identity::Shared { token } => {
                if bearer_matches(single(head, "authorization")?, token.as_deref()) {
                    Ok(Caller::Shared)
                } else {
                    Err(Refusal::Unauthorized)
                }
            }
            Identity::PerCaller(p) => p.caller(head),
        }
    }

    /// `/metrics`: with one shared caller, whoever the mode lets in (as before); once callers
    /// are told apart, only the metrics token or a listed principal (the counts move with
    /// other callers' private threads). The metrics token opens it in every mode.
    pub fn may_read_metrics(
        &self,
        head: &RequestHead,
        access: &MetricsAccess,
    ) -> Result<(), Refusal> {
        if access.token.is_some()
            && bearer_matches(single(head, "authorization")?, access.token.as_deref())
        {
            return Ok(());
        }
        let caller = self.caller(head)?;
        match self {
            Identity::PerCaller(p) if !p.reads_metrics(&caller) => Err(Refusal::Forbidden),
            _ => Ok(()),
        }
    }
}

/// Reference §1.5: split at the first space, scheme `bearer` in any case, the rest verbatim.
pub(crate) fn bearer(header: Option<&[u8]>) -> Option<&[u8]> {
    let value = header?;
    let sp = value.iter().position(|&b| b == b' ')?;
    let (scheme, token) = (&value[..sp], &value[sp + 1..]);
    scheme.eq_ignore_ascii_case(b"bearer").then_some(token)
}

/// The shared-token rule: no token configured lets everyone in; otherwise the bearer token
/// must match, compared in constant time over raw bytes.
pub(crate) fn bearer_matches(header: Option<&[u8]>, expected: Option<&[u8]>) -> bool {
    let Some(expected) = expected else {
        return true;
    };
    bearer(header).is_some_and(|t| constant_time_eq(t, expected))
}

/// Compares every byte of the longer input whatever the contents, so timing reveals at most
/// the lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_rules() {
        let authorized = bearer_matches;
        let tok = Some(&b"secret"[..]);
        assert!(authorized(None, None));
        assert!(!authorized(None, tok));
        assert!(authorized(Some(b"Bearer secret"), tok));
        assert!(authorized(Some(b"BEARER secret"), tok));
        assert!(authorized(Some(b"bearer secret"), tok));
        assert!(!authorized(Some(b"Bearer  secret"), tok));
        assert!(!authorized(Some(b"Bearer secret x"), tok));
        assert!(!authorized(Some(b"Bearer"), tok));
        assert!(!authorized(Some(b"Basic secret"), tok));
        assert!(!authorized(Some(b"Bearer secre"), tok));
        assert!(!authorized(Some("Bearer sécret".as_bytes()), tok));
    }

    #[test]
    fn constant_time_eq_basics() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abc\0"));
    }
}
