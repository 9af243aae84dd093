//! Random identifiers and secrets, only ever from the OS (the `getrandom` system call; works
//! without `/dev/urandom`). There is no fallback generator: a predictable bearer token or execution id
//! is worse than refusing to start (`check`) or failing the one run that needed it.

use std::fmt;

/// The OS random source failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RandomUnavailable;

impl fmt::Display for RandomUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the operating system's random source is unavailable")
    }
}

impl std::error::Error for RandomUnavailable {}

/// Fill `buf` with OS randomness: the `getrandom` system call itself (rustix's raw Linux
/// backend), which works in an empty root and in a static build. The `getrandom` crate looks
/// the libc function up dynamically, finds nothing in a static binary and falls back to
/// `/dev/urandom`, which an empty root does not have.
pub(crate) fn fill(buf: &mut [u8]) -> Result<(), RandomUnavailable> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::rand::getrandom(&mut buf[done..], rustix::rand::GetRandomFlags::empty()) {
            Ok(0) => return Err(RandomUnavailable),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Err(RandomUnavailable),
        }
    }
    Ok(())
}

/// Start-up probe: the server refuses to start when the OS cannot give randomness.
pub(crate) fn check() -> Result<(), RandomUnavailable> {
    fill(&mut [0u8; 16])
}

/// OS randomness for an identifier. The start-up probe makes a failure here practically
/// impossible; should it happen, the panic is contained by the worker and ends only the run
/// that needed the id (never a guessable id).
fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if let Err(e) = fill(&mut b) {
        panic!("{e}: refusing to make a predictable identifier");
    }
    b
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// A random UUID version 4, lowercase and hyphenated (Python `str(uuid4())`).
pub(crate) fn uuid4() -> String {
    let mut b: [u8; 16] = random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// 32 random lowercase hex digits (Python `uuid4().hex`).
pub(crate) fn hex32() -> String {
    uuid4().replace('-', "")
}

/// A URL-safe random secret of 43 characters (like Python `secrets.token_urlsafe(32)`).
pub(crate) fn token_urlsafe() -> Result<String, RandomUnavailable> {
    token_from(fill)
}

fn token_from(
    source: impl FnOnce(&mut [u8]) -> Result<(), RandomUnavailable>,
) -> Result<String, RandomUnavailable> {
    use base64::Engine;
    let mut b = [0u8; 32];
    source(&mut b)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// 32 bytes from 64 hex digits (either case); `None` for anything else.
pub(crate) fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(data))
}

/// HMAC-SHA-256 (RFC 2104): eleven lines here against a crate and its trait stack.
pub(crate) fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| k.map(|x| x ^ b);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhex32_reads_what_hex_writes() {
        let k: Vec<u8> = (0u8..32).map(|i| i.wrapping_mul(37)).collect();
        assert_eq!(unhex32(&hex(&k)).map(|a| a.to_vec()), Some(k.clone()));
        assert_eq!(
            unhex32(&hex(&k).to_uppercase()).map(|a| a.to_vec()),
            Some(k)
        );
        assert_eq!(unhex32(&"g".repeat(64)), None);
        assert_eq!(unhex32("00"), None);
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn uuid_shape() {
        let u = uuid4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid4(), uuid4());
        assert_eq!(hex32().len(), 32);
        assert_eq!(token_urlsafe().unwrap().len(), 43);
        assert!(check().is_ok());
    }

    #[test]
    fn a_failing_random_source_gives_no_token() {
        // Regression: a clock-seeded fallback once made the kernel's bearer token guessable.
        assert_eq!(
            token_from(|_| Err(RandomUnavailable)),
            Err(RandomUnavailable)
        );
        let zeros = token_from(|b| {
            b.fill(0);
            Ok(())
        });
        assert_eq!(zeros.unwrap(), "A".repeat(43));
    }

    #[test]
    fn sha256_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
