//! `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2) in one place: the request's
//! `Host` (its syntax, then the name the Host rule compares) and the authority of the
//! `http://` URLs iac-agui calls (the kernel, the healthcheck).

/// The host (an IP literal keeps its brackets) and the port text after `:` (`None` without
/// one). `None`: an IP literal that is not closed, or followed by anything but a port.
pub(crate) fn split(a: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    if a.first() == Some(&b'[') {
        let end = a.iter().position(|&b| b == b']')?;
        let (host, rest) = a.split_at(end + 1);
        return match rest {
            [] => Some((host, None)),
            [b':', port @ ..] => Some((host, Some(port))),
            _ => None,
        };
    }
    Some(match a.iter().rposition(|&b| b == b':') {
        Some(i) => (&a[..i], Some(&a[i + 1..])),
        None => (a, None),
    })
}

/// `port = *DIGIT` that fits in 16 bits (empty is allowed: RFC 3986 §3.2.3).
pub(crate) fn valid_port(p: &[u8]) -> bool {
    p.len() <= 5
        && p.iter().all(u8::is_ascii_digit)
        && p.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 65535
}

fn ip_literal(h: &[u8]) -> bool {
    let Some(inner) = h.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]")) else {
        return false;
    };
    !inner.is_empty()
        && inner
            .iter()
            .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
}

/// Unreserved, sub-delim and percent-encoded characters.
fn reg_name(h: &[u8]) -> bool {
    h.iter().all(|&b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
    })
}

/// Whether a `Host` value (without surrounding white space) is well formed. An empty value
/// is allowed (RFC 9112 §3.2, a target without authority); a port needs a host before it.
pub(crate) fn valid_host_header(v: &[u8]) -> bool {
    if v.is_empty() {
        return true;
    }
    let Some((host, port)) = split(v) else {
        return false;
    };
    !host.is_empty() && port.is_none_or(valid_port) && (ip_literal(host) || reg_name(host))
}

/// The name a `Host` value names, lowercased, without its port and its one trailing dot (the
/// DNS root: `localhost.`); an IP literal keeps its brackets. `None` when there is no name.
pub(crate) fn host_name(v: &[u8]) -> Option<String> {
    let v = v.trim_ascii();
    let (name, port) = split(v)?;
    if !port.is_none_or(valid_port) || !(ip_literal(name) || reg_name(name)) {
        return None;
    }
    let name = std::str::from_utf8(name).ok()?;
    let name = name.strip_suffix('.').unwrap_or(name);
    let empty_label = !name.starts_with('[') && name.split('.').any(str::is_empty);
    (!name.is_empty() && !empty_label).then(|| name.to_ascii_lowercase())
}

/// `http://authority/rest` (the scheme in any case) → the authority and what follows it
/// (path, query, fragment; may be empty). `None` for any other scheme.
pub(crate) fn http_url(url: &str) -> Option<(&str, &str)> {
    let scheme = url.get(..7)?;
    if !scheme.eq_ignore_ascii_case("http://") {
        return None;
    }
    let rest = &url[7..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(rest.split_at(end))
}

/// Accept only `http(s)://` URLs on 127.0.0.1, localhost or ::1 (reference §8.4); return the
/// normalised base URL ending with exactly one `/`.
pub(crate) fn loopback_base_url(raw: &str) -> Result<String, String> {
    const MSG: &str = "The AG-UI adapter may connect only to a loopback A2A HTTP(S) URL.";
    let raw = raw.trim();
    if raw
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    {
        return Err(format!(
            "{MSG} (https is not supported by this build: the kernel is on loopback, use http)"
        ));
    }
    let (authority, tail) = http_url(raw).ok_or(MSG)?;
    if authority.contains('@') {
        return Err(format!("{MSG} (credentials in the URL are not allowed)"));
    }
    let (host, port) = split(authority.as_bytes()).ok_or(MSG)?;
    if port.is_some_and(|p| p.is_empty() || !valid_port(p)) {
        return Err(format!("{MSG} (invalid port)"));
    }
    if !matches!(
        host.to_ascii_lowercase().as_slice(),
        b"127.0.0.1" | b"localhost" | b"[::1]"
    ) {
        return Err(MSG.into());
    }
    if tail.contains(['?', '#']) {
        return Err(format!("{MSG} (no query or fragment)"));
    }
    Ok(format!("{}/", raw.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values_follow_rfc_3986_and_ports_fit_16_bits() {
        for ok in [
            "localhost",
            "localhost:8000",
            "LOCALHOST.",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:65535",
            "a-b_c~d.example",
            "",
            "localhost:",
            "localhost..",
        ] {
            assert!(valid_host_header(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "localhost:99999999999999999999",
            "localhost:65536",
            "localhost:8o",
            "localhost:+1",
            "localhost@evil",
            "local host",
            "[::1",
            "[]",
            "[::1]x",
            "[zz]",
            ":80",
            "a/b",
            "a\u{7f}",
        ] {
            assert!(!valid_host_header(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn names_lose_their_port_case_and_root_dot() {
        for (v, want) in [
            ("LOCALHOST:8000", Some("localhost")),
            ("localhost.", Some("localhost")),
            (" [::1]:80 ", Some("[::1]")),
            ("localhost..", None),
            (".localhost", None),
            ("", None),
            (":80", None),
            ("a@b", None),
            ("\u{e9}", None),
        ] {
            assert_eq!(host_name(v.as_bytes()).as_deref(), want, "{v:?}");
        }
    }

    #[test]
    fn http_urls_split_at_the_authority() {
        assert_eq!(
            http_url("HTTP://127.0.0.1:9/health?x"),
            Some(("127.0.0.1:9", "/health?x"))
        );
        assert_eq!(http_url("http://[::1]"), Some(("[::1]", "")));
        assert_eq!(http_url("https://x/"), None);
        assert_eq!(http_url("http:/"), None);
    }

    #[test]
    fn loopback_rule() {
        for ok in [
            "http://127.0.0.1:41242",
            "http://127.0.0.1:41242/",
            "http://localhost:1//",
            "HTTP://LOCALHOST:8080/",
            "http://[::1]:8080/",
            "http://127.0.0.1:41242/a2a",
        ] {
            assert!(loopback_base_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            loopback_base_url("http://127.0.0.1:41242/a2a").unwrap(),
            "http://127.0.0.1:41242/a2a/"
        );
        assert_eq!(
            loopback_base_url("http://localhost:1//").unwrap(),
            "http://localhost:1/"
        );
        for bad in [
            "http://127.0.0.2:1/",
            "http://10.0.0.1:1/",
            "http://example.com/",
            "ftp://127.0.0.1/",
            "127.0.0.1:8080",
            "http://user:pw@127.0.0.1:1/",
            "http://localhost.evil.com/",
            "http://127.0.0.1:x/",
            "http://127.0.0.1:1/?q=1",
            "https://127.0.0.1:1/",
        ] {
            assert!(loopback_base_url(bad).is_err(), "{bad}");
        }
    }
}
