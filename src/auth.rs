//! Who is calling: the server's identity mode, decided once, and the principal of a request
//! decided from its head on the loop (no I/O there: the tokens file is read by `TokenFile`,
//! off the loop).
//!
//! - `Identity::Shared`: no auth, or the one `IAC_CODE_AGUI_AUTH_TOKEN` (reference §1.5);
//!   every request is `Caller::Shared`.
//! - `Identity::Tokens`: `--auth-tokens-file`, one `NAME SHA256HEX` line per principal; a
//!   bearer token is hashed and compared with every line in constant time.
//! - `Identity::Header`: `--identity-header NAME`, the principal set by a trusted proxy
//!   (optionally with the shared token as well, which then authenticates the proxy).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use sha2::{Digest, Sha256};

use crate::principal::{BadName, Caller};
use crate::server::http::RequestHead;
use crate::sync::lock;

/// The largest tokens file read (one line per principal: thousands fit).
const MAX_TOKENS_FILE: u64 = 1024 * 1024;

/// How the server tells callers apart.
#[derive(Debug, Clone)]
pub enum Identity {
    Shared {
        token: Option<Vec<u8>>,
    },
    Tokens(Arc<TokenFile>),
    Header {
        /// Lowercase header name.
        name: String,
        token: Option<Vec<u8>>,
    },
}

/// The shared token's bytes; an empty token counts as none.
pub(crate) fn shared_token(token: Option<String>) -> Option<Vec<u8>> {
    token.filter(|t| !t.is_empty()).map(String::into_bytes)
}

/// Why a request has no principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no token, or not one of ours (or no identity header).
    Unauthorized,
    /// 400: the identity header is there but cannot name a principal.
    BadHeader { header: String, why: BadName },
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

    /// The request's principal, from its head alone.
    pub fn caller(&self, head: &RequestHead) -> Result<Caller, Refusal> {
        let auth = head.header("authorization");
        match self {
            Identity::Shared { token } => {
                if bearer_matches(auth, token.as_deref()) {
                    Ok(Caller::Shared)
                } else {
                    Err(Refusal::Unauthorized)
                }
            }
            Identity::Tokens(file) => bearer(auth)
                .and_then(|t| file.table().lookup(t))
                .ok_or(Refusal::Unauthorized),
            Identity::Header { name, token } => {
                if !bearer_matches(auth, token.as_deref()) {
                    return Err(Refusal::Unauthorized);
                }
                let value = head.header(name).ok_or(Refusal::Unauthorized)?;
                Caller::named(value.trim_ascii()).map_err(|why| Refusal::BadHeader {
                    header: name.clone(),
                    why,
                })
            }
        }
    }
}

/// Reference §1.5: split at the first space, scheme `bearer` in any case, the rest verbatim.
fn bearer(header: Option<&[u8]>) -> Option<&[u8]> {
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
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// The parsed tokens file: each principal with the SHA-256 of a token of theirs.
#[derive(Debug, Default)]
pub struct TokenTable {
    entries: Vec<(Caller, [u8; 32])>,
}

impl TokenTable {
    /// `NAME SHA256HEX` per line; blank lines and `#` comments skipped. A principal may have
    /// several tokens (rotation); one hash may not name two principals.
    pub fn parse(text: &str) -> Result<TokenTable, String> {
        let mut entries: Vec<(Caller, [u8; 32])> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(name), Some(hash), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("line {n}: expected `NAME SHA256HEX`"));
            };
            let caller = Caller::named(name.as_bytes())
                .map_err(|e| format!("line {n}: the principal name is not valid ({e:?})"))?;
            let digest = crate::ids::unhex32(hash).ok_or_else(|| {
                format!("line {n}: the token hash must be 64 hex digits (SHA-256 of the token)")
            })?;
            if entries.iter().any(|(_, d)| *d == digest) {
                return Err(format!("line {n}: this token hash is listed twice"));
            }
            entries.push((caller, digest));
        }
        Ok(TokenTable { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal of `token`: every entry is compared, whatever matched, so the time
    /// taken says nothing about which entry (or how much of one) matched.
    pub fn lookup(&self, token: &[u8]) -> Option<Caller> {
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = None;
        for (caller, d) in &self.entries {
            if constant_time_eq(&digest, d) {
                found = Some(caller.clone());
            }
        }
        found
    }
}

/// What tells a changed file from the one read: modification time, size, inode.
type Stamp = (Option<std::time::SystemTime>, u64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok(), m.len(), m.ino()))
}

/// `--auth-tokens-file`: the table in use, and the file it was read from. A reload that
/// fails keeps the table in use (a half-written file must not lock everyone out, nor let
/// anyone in).
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    table: RwLock<Arc<TokenTable>>,
    read: Mutex<Option<Stamp>>,
}

impl TokenFile {
    /// Read the file; start-up fails on an unreadable or invalid file.
    pub fn open(path: &Path) -> Result<TokenFile, String> {
        let f = TokenFile {
            path: path.to_path_buf(),
            table: RwLock::new(Arc::new(TokenTable::default())),
            read: Mutex::new(None),
        };
        f.reload()?;
        Ok(f)
    }

    pub fn table(&self) -> Arc<TokenTable> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Read the file again and use it from now on. `Err`: the old table stays.
    pub fn reload(&self) -> Result<usize, String> {
        let before = stamp(&self.path);
        let text = read_bounded(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let table =
            TokenTable::parse(&text).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let n = table.len();
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
        *lock(&self.read) = before;
        Ok(n)
    }

    /// Reload when the file changed since it was last read (the watcher's tick).
    pub fn reload_if_changed(&self) {
        let now = stamp(&self.path);
        if now.is_none() || now == *lock(&self.read) {
            return;
        }
        self.reload_logged();
    }

    /// `reload`, with the outcome in the log (SIGHUP and the watcher).
    pub fn reload_logged(&self) {
        match self.reload() {
            Ok(n) => log::info!(
                "auth tokens reloaded from {}: {n} tokens",
                self.path.display()
            ),
            Err(e) => log::error!("auth tokens not reloaded, the previous ones stay in use: {e}"),
        }
    }
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(MAX_TOKENS_FILE + 1)
        .read_to_string(&mut s)?;
    if s.len() as u64 > MAX_TOKENS_FILE {
        return Err(std::io::Error::other("larger than 1 MiB"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(t: &str) -> String {
        crate::ids::sha256_hex(t.as_bytes())
    }

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

    #[test]
    fn a_token_maps_to_its_principal_and_only_its_own() {
        let text = format!(
            "# principals\n\nalice {}\nbob   {}\nalice {}\n",
            sha("a-token"),
            sha("b-token").to_uppercase(),
            sha("a-second")
        );
        let t = TokenTable::parse(&text).unwrap();
        assert_eq!(t.len(), 3);
        let name = |tok: &str| {
            t.lookup(tok.as_bytes())
                .and_then(|c| c.name().map(String::from))
        };
        assert_eq!(name("a-token").as_deref(), Some("alice"));
        assert_eq!(name("a-second").as_deref(), Some("alice"));
        assert_eq!(name("b-token").as_deref(), Some("bob"));
        assert_eq!(name("c-token"), None);
        assert_eq!(name(""), None);
        // The hash itself is not a token.
        assert_eq!(name(&sha("a-token")), None);
    }

    #[test]
    fn a_bad_tokens_file_names_the_line() {
        let h = sha("x");
        for (text, want) in [
            ("alice\n".to_string(), "line 1"),
            (format!("alice {h} extra\n"), "line 1"),
            (format!("ok {h}\nbob 1234\n"), "line 2"),
            (format!("ok {h}\nbob {h}\n"), "line 2"),
            (format!("a\u{7f}b {h}\n"), "line 1"),
            (format!("bob {}\n", "g".repeat(64)), "line 1"),
        ] {
            let e = TokenTable::parse(&text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_failed_reload_keeps_the_tokens_in_use() {
        let dir = std::env::temp_dir().join(format!("iac-agui-tokens-{}", crate::ids::hex32()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("tokens");
        std::fs::write(&p, format!("alice {}\n", sha("t1"))).unwrap();
        let f = TokenFile::open(&p).unwrap();
        assert!(f.table().lookup(b"t1").is_some());
        std::fs::write(&p, "garbage\n").unwrap();
        assert!(f.reload().is_err());
        assert!(f.table().lookup(b"t1").is_some(), "kept");
        std::fs::write(&p, format!("bob {}\n", sha("t2"))).unwrap();
        f.reload_if_changed();
        assert!(f.table().lookup(b"t1").is_none(), "alice's token is gone");
        assert!(f.table().lookup(b"t2").is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
