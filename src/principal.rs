//! Who a request acts for, and the key a thread is known by.
//!
//! A thread belongs to the principal that created it: alice's thread `T` and bob's thread `T`
//! are two threads (two state files, two kernel contexts). With no auth or one shared token
//! there is one principal, `Caller::Shared`, and everything is keyed as in the reference, so
//! its state files stay those of iac-code 0.16.0.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The principal a request acts for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Caller {
    /// The one principal of a server without per-caller identity (no auth, or the single
    /// shared `IAC_CODE_AGUI_AUTH_TOKEN`).
    #[default]
    Shared,
    /// A principal named by `--auth-tokens-file` or `--identity-header`.
    Named(Arc<str>),
}

/// Longest principal name, in bytes (a header value or a token-file name).
pub const MAX_NAME: usize = 256;

/// Why a principal name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadName {
    Empty,
    TooLong,
    /// A control character, a space or a byte that is not UTF-8 (names end up in logs and
    /// directory names; a proxy never sets such a value).
    Character,
}

impl Caller {
    /// A named principal, if `name` is a valid one: 1..=`MAX_NAME` bytes of UTF-8 with no
    /// whitespace or control characters.
    pub fn named(name: &[u8]) -> Result<Caller, BadName> {
        if name.is_empty() {
            return Err(BadName::Empty);
        }
        if name.len() > MAX_NAME {
            return Err(BadName::TooLong);
        }
        let s = std::str::from_utf8(name).map_err(|_| BadName::Character)?;
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BadName::Character);
        }
        Ok(Caller::Named(s.into()))
    }

    /// The name, for logs and listings (`None` for the shared principal).
    pub fn name(&self) -> Option<&str> {
        match self {
            Caller::Shared => None,
            Caller::Named(n) => Some(n),
        }
    }

    /// Bytes that tell principals apart in derived identifiers: empty for the shared one
    /// (so its identifiers are the reference's), the name after a tag otherwise.
    fn tag(&self) -> Vec<u8> {
        match self {
            Caller::Shared => Vec::new(),
            Caller::Named(n) => {
                let mut v = b"principal\0".to_vec();
                v.extend_from_slice(n.as_bytes());
                v.push(0);
                v
            }
        }
    }
}

/// A thread as the server knows it: its owner and its AG-UI id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadKey {
    pub caller: Caller,
    pub id: String,
}

impl ThreadKey {
    pub fn new(caller: &Caller, id: &str) -> ThreadKey {
        ThreadKey {
            caller: caller.clone(),
            id: id.to_string(),
        }
    }

    /// The shared principal's thread `id` (a server without per-caller identity).
    pub fn shared(id: &str) -> ThreadKey {
        ThreadKey::new(&Caller::Shared, id)
    }

    /// The kernel context: `agui-` + 40 hex digits of SHA-256 of the thread id (reference
    /// §3.2), with the principal's tag before the id for a named one, so two principals'
    /// threads of one id are two conversations in the kernel too.
    pub fn context_id(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.caller.tag());
        h.update(self.id.as_bytes());
        format!("agui-{}", &crate::ids::hex(&h.finalize())[..40])
    }

    /// The `rosInvocationId` the server supplies for a thread of a request without iacCode
    /// properties (`--default-cwd`): `agui-default-` + 16 hex digits of HMAC-SHA-256 under the
    /// server's own key, so only the server can name it (a hash of the thread id alone let
    /// anyone who knew the id cancel or replay the thread's runs).
    pub fn default_ros(&self, server_key: &[u8]) -> String {
        let mut msg = self.caller.tag();
        msg.extend_from_slice(b"default-ros\0");
        msg.extend_from_slice(self.id.as_bytes());
        let mac = crate::ids::hmac_sha256(server_key, &msg);
        format!("agui-default-{}", crate::ids::hex(&mac[..8]))
    }

    /// The `rosInvocationId` earlier builds supplied (SHA-256 of the thread id alone),
    /// still accepted for a thread whose stored execution carries it, so an interrupt
    /// pending across the upgrade can be answered.
    pub fn legacy_default_ros(&self) -> String {
        let h = Sha256::digest(self.id.as_bytes());
        format!("agui-default-{}", crate::ids::hex(&h[..8]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: &str) -> Caller {
        Caller::named(n.as_bytes()).unwrap()
    }

    #[test]
    fn the_shared_principals_context_is_the_references() {
        let k = ThreadKey::new(&Caller::Shared, "th");
        assert_eq!(
            k.context_id(),
            format!("agui-{}", &crate::ids::sha256_hex(b"th")[..40])
        );
    }

    #[test]
    fn two_principals_threads_of_one_id_are_two_contexts() {
        let a = ThreadKey::new(&named("alice"), "T");
        let b = ThreadKey::new(&named("bob"), "T");
        let s = ThreadKey::new(&Caller::Shared, "T");
        assert_ne!(a.context_id(), b.context_id());
        assert_ne!(a.context_id(), s.context_id());
        assert_ne!(a, b);
        // A name cannot be chosen so that its tag and id read as another pair.
        assert!(Caller::named(b"a\0b").is_err());
        let c = ThreadKey::new(&named("a"), "b");
        assert_ne!(
            c.context_id(),
            ThreadKey::new(&named("ab"), "").context_id()
        );
    }

    #[test]
    fn the_default_ros_needs_the_server_key() {
        let k = ThreadKey::new(&Caller::Shared, "victim");
        let one = k.default_ros(b"key one");
        assert!(
            one.starts_with("agui-default-") && one.len() == 13 + 16,
            "{one}"
        );
        assert_eq!(one, k.default_ros(b"key one"), "stable per thread");
        assert_ne!(one, k.default_ros(b"key two"));
        assert_ne!(one, k.legacy_default_ros(), "not the derivable one");
        assert_ne!(
            one,
            ThreadKey::new(&named("bob"), "victim").default_ros(b"key one")
        );
        // The red-team's derivation: "agui-default-" + sha256(threadId)[:16].
        assert_eq!(
            k.legacy_default_ros(),
            format!("agui-default-{}", &crate::ids::sha256_hex(b"victim")[..16])
        );
    }

    #[test]
    fn principal_names_are_bounded_printable_utf8() {
        assert!(Caller::named(b"alice@example.com").is_ok());
        assert!(Caller::named("名前".as_bytes()).is_ok());
        assert!(Caller::named(b"github|1234").is_ok());
        assert_eq!(Caller::named(b""), Err(BadName::Empty));
        assert_eq!(Caller::named(&[b'a'; 257]), Err(BadName::TooLong));
        assert!(Caller::named(&[b'a'; 256]).is_ok());
        for bad in [&b"a b"[..], b"a\tb", b"a\x7f", b"\xff", b"a\nb"] {
            assert_eq!(Caller::named(bad), Err(BadName::Character), "{bad:?}");
        }
    }
}
