//! The two ways callers are told apart, their settings read from the sources and checked, and
//! what the core asks of them (`PerCaller`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::auth::{
    Identity, OwnLimits, PerCaller, Refusal, TokenFile, Tokens, bearer, bearer_matches, single,
};
use crate::config::{ConfigError, Sources, as_string};
use crate::principal::Caller;
use crate::server::http::RequestHead;
use crate::startup::StartError;

/// `--auth-tokens-file` or `--identity-header`, checked, and who of the callers reads
/// `/metrics`.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    way: Way,
    /// `--metrics-principals`.
    metrics_principals: Vec<Caller>,
    /// `IAC_CODE_AGUI_METRICS_TOKEN` is set (without it or a principal `/metrics` has no
    /// reader: a warning).
    metrics_token: bool,
}

#[derive(Debug, Clone)]
enum Way {
    Tokens(PathBuf),
    Header {
        /// Lowercase.
        name: String,
        /// The shared token, which then authenticates the proxy.
        token: Option<Vec<u8>>,
        /// `--trust-identity-header`: the operator confirms only the proxy reaches the port.
        trusted: bool,
    },
}

/// The extra's settings: `None` when callers are not told apart.
pub(crate) fn configure(s: &Sources) -> Result<Option<Settings>, ConfigError> {
    let mut tokens_file = None;
    if let Some(v) = s.pick("auth_tokens_file") {
        let text = as_string(&v)?;
        if !text.trim().is_empty() {
            tokens_file = Some(PathBuf::from(text.trim()));
        }
    }
    let header = s.pick("identity_header").map(header_name).transpose()?;
    let trusted = s.switch("trust_identity_header")?;
    let mut metrics_principals = Vec::new();
    if let Some(v) = s.pick("metrics_principals") {
        let text = as_string(&v)?;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let caller = Caller::named(name.as_bytes()).map_err(|_| {
                v.err(format_args!(
                    "takes principal names (comma-separated), not {name:?}."
                ))
            })?;
            metrics_principals.push(caller);
        }
        if tokens_file.is_none() && header.is_none() {
            return Err(v.err(
                "names callers, but callers are not told apart: it needs --auth-tokens-file \
                 or --identity-header.",
            ));
        }
    }
    let token = crate::auth::shared_token(s.secret("auth_token")?);
    if tokens_file.is_some() && header.is_some() {
        return Err(ConfigError(format!(
            "{} and {} cannot be combined: pick one way to name callers.",
            s.origin("auth_tokens_file"),
            s.origin("identity_header")
        )));
    }
    if tokens_file.is_some() && token.is_some() {
        return Err(ConfigError(format!(
            "{} and {} cannot be combined: give the shared token a line of its own in \
             the tokens file.",
            s.origin("auth_tokens_file"),
            s.origin("auth_token")
        )));
    }
    let way = match (tokens_file, header) {
        (Some(path), _) => Way::Tokens(path),
        (None, Some(name)) => Way::Header {
            name,
            token,
            trusted,
        },
        (None, None) => return Ok(None),
    };
    Ok(Some(Settings {
        way,
        metrics_principals,
        metrics_token: crate::auth::shared_token(s.secret("metrics_token")?).is_some(),
    }))
}

/// `--identity-header`: an RFC 9110 token, lowercase; the headers that carry credentials or
/// routing are not names.
fn header_name(v: crate::config::Given) -> Result<String, ConfigError> {
    let s = as_string(&v)?;
    let name = s.trim().to_ascii_lowercase();
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty()
        || !name.bytes().all(token)
        || matches!(
            name.as_str(),
            "authorization" | "host" | "cookie" | "content-type"
        )
    {
        return Err(v.err(format_args!(
            "must be a header name such as X-Forwarded-User, not {}.",
            v.shown()
        )));
    }
    Ok(name)
}

impl Settings {
    /// The server's identity mode (`docs/operations.md`, "Callers"), once logging is up: the
    /// tokens file read now (from then on its own thread watches it, and SIGHUP only wakes
    /// that thread), or the header checked against the address served.
    pub(crate) fn identity(
        &self,
        addr: std::net::SocketAddr,
        signals: &crate::signals::Target,
    ) -> Result<Identity, StartError> {
        let how = match &self.way {
            Way::Tokens(path) => {
                let file = TokenFile::open(path).map_err(StartError::Identity)?;
                let f = file.clone();
                signals.on_reload(Box::new(move || f.reload_now()));
                How::Tokens(file)
            }
            Way::Header {
                name,
                token,
                trusted,
            } => {
                // Anyone who can reach the port can send the header: without a proxy in front
                // that sets it (and the shared token proving the request came through that
                // proxy), it names whoever the client says.
                if !addr.ip().is_loopback() && token.is_none() && !trusted {
                    return Err(StartError::Identity(format!(
                        "--identity-header on the non-loopback address {addr} lets any client \
                         name itself: set IAC_CODE_AGUI_AUTH_TOKEN (sent by the proxy), or \
                         confirm with --trust-identity-header that only the proxy can reach \
                         this port"
                    )));
                }
                How::Header {
                    name: name.clone(),
                    token: token.clone(),
                }
            }
        };
        if !self.metrics_token && self.metrics_principals.is_empty() {
            log::warn!(
                "callers are told apart and no metrics credential is set: /metrics answers \
                 401/403 (set IAC_CODE_AGUI_METRICS_TOKEN or --metrics-principals)"
            );
        }
        Ok(Identity::PerCaller(Arc::new(Named {
            how,
            metrics: self.metrics_principals.clone(),
        })))
    }
}

/// Callers told apart, and those of them who read `/metrics`.
#[derive(Debug)]
struct Named {
    how: How,
    metrics: Vec<Caller>,
}

#[derive(Debug)]
enum How {
    /// One `NAME SHA256HEX` line per principal: a bearer token is hashed and compared with
    /// every line in constant time.
    Tokens(Arc<TokenFile>),
    /// The principal set by a trusted proxy (optionally with the shared token as well, which
    /// then authenticates the proxy).
    Header {
        name: String,
        token: Option<Vec<u8>>,
    },
}

impl PerCaller for Named {
    fn caller(&self, head: &RequestHead) -> Result<Caller, Refusal> {
        let auth = || single(head, "authorization");
        match &self.how {
            How::Tokens(file) => {
                let auth = auth()?;
                match &*file.tokens() {
                    Tokens::Table(t) => bearer(auth).and_then(|b| t.lookup(b)),
                    Tokens::Down(_) => None,
                }
                .ok_or(Refusal::Unauthorized)
            }
            How::Header { name, token } => {
                if token.is_some() && !bearer_matches(auth()?, token.as_deref()) {
                    return Err(Refusal::Unauthorized);
                }
                let value = single(head, name)?.ok_or_else(|| Refusal::NoHeader {
                    header: name.clone(),
                })?;
                Caller::named(value.trim_ascii()).map_err(|why| Refusal::BadHeader {
                    header: name.clone(),
                    why,
                })
            }
        }
    }

    fn usable(&self) -> bool {
        match &self.how {
            How::Tokens(file) => file.usable(),
            How::Header { .. } => true,
        }
    }

    fn reads_metrics(&self, caller: &Caller) -> bool {
        self.metrics.contains(caller)
    }

    fn header(&self) -> Option<&str> {
        match &self.how {
            How::Tokens(_) => None,
            How::Header { name, .. } => Some(name),
        }
    }

    fn listed(&self) -> bool {
        matches!(self.how, How::Tokens(_))
    }

    fn own_limits(&self, caller: &Caller) -> OwnLimits {
        match &self.how {
            How::Tokens(file) => match &*file.tokens() {
                Tokens::Table(t) => t.limits(caller),
                Tokens::Down(_) => OwnLimits::default(),
            },
            How::Header { .. } => OwnLimits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured(args: &[&str], env: &[(&str, &str)]) -> Result<Option<Settings>, ConfigError> {
        let env = crate::config::Environ::from_pairs(env.iter().copied());
        let args = args.iter().map(std::ffi::OsString::from);
        match crate::config::parse(args, &env, crate::extras::EXTRAS)? {
            crate::config::Command::Serve(c) => configure(&c.sources),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_metrics_principals_are_names_and_need_callers_told_apart() {
        let s = configured(
            &[
                "--identity-header",
                "X-User",
                "--metrics-principals",
                "ops, prom",
            ],
            &[],
        )
        .unwrap()
        .unwrap();
        let names: Vec<_> = s
            .metrics_principals
            .iter()
            .filter_map(|c| c.name())
            .collect();
        assert_eq!(names, ["ops", "prom"]);
        assert!(!s.metrics_token);
        // Principals only mean something when callers are told apart; names must be valid.
        let e = configured(&["--metrics-principals", "ops"], &[]).unwrap_err();
        assert!(e.0.contains("not told apart"), "{e}");
        let bad = "a\u{1}b";
        assert!(
            configured(
                &["--identity-header", "X-User", "--metrics-principals", bad],
                &[]
            )
            .is_err()
        );
        assert!(configured(&[], &[]).unwrap().is_none(), "one shared caller");
    }

    #[test]
    fn one_way_of_naming_callers_and_the_tokens_file_without_the_shared_token() {
        let e = configured(
            &["--auth-tokens-file", "/t", "--identity-header", "X-User"],
            &[],
        )
        .unwrap_err();
        assert_eq!(
            e.0,
            "--auth-tokens-file and --identity-header cannot be combined: pick one way to name \
             callers."
        );
        let e = configured(
            &["--auth-tokens-file", "/t"],
            &[("IAC_CODE_AGUI_AUTH_TOKEN", "s")],
        )
        .unwrap_err();
        assert!(
            e.0.starts_with("--auth-tokens-file and IAC_CODE_AGUI_AUTH_TOKEN cannot be combined"),
            "{e}"
        );
        // With a header the shared token authenticates the proxy; an empty one is none.
        let s = configured(
            &["--identity-header", " X-Forwarded-User "],
            &[("IAC_CODE_AGUI_AUTH_TOKEN", "s")],
        )
        .unwrap()
        .unwrap();
        assert!(
            matches!(&s.way, Way::Header { name, token: Some(_), .. } if name == "x-forwarded-user")
        );
        assert!(
            configured(
                &["--auth-tokens-file", "/t"],
                &[("IAC_CODE_AGUI_AUTH_TOKEN", "")]
            )
            .is_ok()
        );
        for bad in ["Authorization", "X User", ""] {
            let e = configured(&["--identity-header", bad], &[]).unwrap_err();
            assert!(e.0.contains("must be a header name"), "{bad:?}: {e}");
        }
    }
}
