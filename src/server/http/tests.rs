use super::*;

#[test]
fn two_host_fields_or_an_invalid_host_are_400_in_any_order() {
    for req in [
        &b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n"[..],
        b"GET /health HTTP/1.1\r\nHost: evil.example\r\nHost: localhost\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nhost: localhost\r\n\r\n",
        b"GET /health HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: localhost:99999999999999999999\r\n\r\n",
    ] {
        assert_eq!(
            parse_head(req).map(|_| ()),
            Err(HttpError::BadRequest),
            "{}",
            String::from_utf8_lossy(req)
        );
    }
    assert!(matches!(
        parse_head(b"GET /health HTTP/1.1\r\nHost: localhost:8000\r\n\r\n"),
        Ok(Some(_))
    ));
}

fn head(s: &str) -> Result<Option<(RequestHead, usize)>, HttpError> {
    parse_head(s.as_bytes())
}

#[test]
fn parses_simple_get() {
    let (h, n) = head("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(n, 33);
    assert_eq!(h.method, "GET");
    assert_eq!(h.raw_path(), "/health");
    assert!(h.keep_alive);
    assert_eq!(h.framing, Framing::Length(0));
}

#[test]
fn partial_head_needs_more() {
    assert_eq!(head("GET /health HTTP/1.1\r\nHost: x\r\n").unwrap(), None);
}

#[test]
fn http10_defaults_to_close() {
    let (h, _) = head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert!(!h.keep_alive);
    let (h, _) = head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.keep_alive);
}

#[test]
fn connection_close_token() {
    let (h, _) = head("GET / HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!h.keep_alive);
}

#[test]
fn smuggling_shapes_rejected() {
    let cases = [
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\n Transfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
    ];
    for c in cases {
        assert_eq!(head(c), Err(HttpError::BadRequest), "{c:?}");
    }
}

#[test]
fn chunked_after_other_coding_is_not_implemented() {
    assert_eq!(
        head("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        Err(HttpError::NotImplemented)
    );
}

#[test]
fn too_many_headers() {
    let mut s = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..limits::MAX_HEADERS {
        s.push_str(&format!("X-{i}: y\r\n"));
    }
    s.push_str("\r\n");
    assert_eq!(head(&s), Err(HttpError::HeadersTooLarge));
}

#[test]
fn head_too_large_while_partial() {
    let mut s = String::from("GET / HTTP/1.1\r\nHost: x\r\nX-Big: ");
    s.push_str(&"a".repeat(limits::MAX_HEAD_BYTES));
    assert_eq!(head(&s), Err(HttpError::HeadersTooLarge));
}

#[test]
fn uri_too_long_even_when_partial() {
    let s = format!("GET /{} ", "a".repeat(limits::MAX_URI_BYTES + 1));
    assert_eq!(head(&s), Err(HttpError::UriTooLong));
    let s = format!("GET /{}", "a".repeat(limits::MAX_URI_BYTES + 1));
    assert_eq!(head(&s), Err(HttpError::UriTooLong));
}

#[test]
fn version_errors() {
    assert_eq!(
        head("GET / HTTP/2.0\r\nHost: x\r\n\r\n"),
        Err(HttpError::VersionNotSupported)
    );
    assert_eq!(
        head("GET / FOO/1.1\r\nHost: x\r\n\r\n"),
        Err(HttpError::BadRequest)
    );
}

#[test]
fn expect_continue_detected() {
    let (h, _) =
        head("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
    assert!(h.expect_continue);
    assert_eq!(h.framing, Framing::Length(3));
}

fn decode_all(input: &[u8], split: usize, limit: usize) -> Result<(Vec<u8>, usize), ChunkError> {
    let mut d = ChunkedDecoder::default();
    let mut out = Vec::new();
    let mut used = 0;
    for piece in input.chunks(split.max(1)) {
        let n = d.decode(piece, &mut out, limit)?;
        used += n;
        if d.is_done() {
            break;
        }
    }
    Ok((out, used))
}

#[test]
fn chunked_decodes_at_every_split() {
    let body =
        b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    for split in 1..body.len() {
        let (out, used) = decode_all(body, split, 1000).unwrap();
        assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&body[used..], b"NEXT", "split {split}");
    }
}

#[test]
fn chunked_errors() {
    let cases: [(&[u8], ChunkError); 5] = [
        (b"zz\r\n", ChunkError::Malformed),
        (b"\r\n", ChunkError::Malformed),
        (b"3\r\nabcX", ChunkError::Malformed),
        (b"ffffffffffffffff\r\n", ChunkError::Malformed),
        (b"b\r\n", ChunkError::TooLarge),
    ];
    for (input, want) in cases {
        assert_eq!(decode_all(input, 100, 10).unwrap_err(), want, "{input:?}");
    }
    // Exactly at the limit is fine.
    let (out, _) = decode_all(b"a\r\n0123456789\r\n0\r\n\r\n", 3, 10).unwrap();
    assert_eq!(out.len(), 10);
}

#[test]
fn response_serialization() {
    let mut out = Vec::new();
    Response::text(404, "Not Found").write_to(&mut out, true, false);
    assert_eq!(
        out,
        b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 9\r\nconnection: keep-alive\r\n\r\nNot Found"
    );
    let mut out = Vec::new();
    Response::json(200, b"{}".to_vec()).write_to(&mut out, false, true);
    assert!(out.ends_with(b"content-length: 2\r\nconnection: close\r\n\r\n"));
}

#[test]
fn chunk_framing() {
    let mut out = Vec::new();
    write_body_piece(&mut out, b"data: {}\n\n", true);
    assert_eq!(out, b"a\r\ndata: {}\n\n\r\n");
}

#[test]
fn percent_decoding() {
    assert_eq!(percent_decode("/a%2Fb"), "/a/b");
    assert_eq!(percent_decode("/a%2"), "/a%2");
    assert_eq!(percent_decode("/a%zz"), "/a%zz");
    assert_eq!(percent_decode("/%E6%97%A5"), "/日");
    assert_eq!(percent_decode("/%ff"), "/\u{fffd}");
}

/// The standard phrases (IANA registry) of the statuses this server sends, held apart from
/// `reason` so that each side checks the other.
const STANDARD: &[(u16, &str)] = &[
    (100, "Continue"),
    (200, "OK"),
    (202, "Accepted"),
    (204, "No Content"),
    (307, "Temporary Redirect"),
    (400, "Bad Request"),
    (401, "Unauthorized"),
    (403, "Forbidden"),
    (404, "Not Found"),
    (405, "Method Not Allowed"),
    (408, "Request Timeout"),
    (409, "Conflict"),
    (413, "Content Too Large"),
    (414, "URI Too Long"),
    (415, "Unsupported Media Type"),
    (421, "Misdirected Request"),
    (429, "Too Many Requests"),
    (431, "Request Header Fields Too Large"),
    (500, "Internal Server Error"),
    (501, "Not Implemented"),
    (503, "Service Unavailable"),
    (505, "HTTP Version Not Supported"),
];

/// A status literal (100..=599) at the start of `s`, after blanks.
fn status_at(s: &str) -> Option<u16> {
    let s = s.trim_start();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let n: u16 = s.get(..digits)?.parse().ok()?;
    (digits == 3 && (100..=599).contains(&n)).then_some(n)
}

/// Every status written anywhere in `src/`: the first two arguments of the calls that take
/// one (responses, the cancel and history answers, the demo kernel's), the arms of the
/// status tables (`=> 409`), assignments (`status = 200`) and literal status lines.
fn statuses_in_source() -> std::collections::BTreeMap<u16, String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let calls = [
        "Response::new(",
        "Response::json(",
        "Response::text(",
        "json_response(",
        "answer(",
        "respond(",
    ];
    let mut found = std::collections::BTreeMap::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut note = |n: u16, at: usize| {
            let line = text[..at].lines().count();
            found
                .entry(n)
                .or_insert_with(|| format!("{}:{line}", f.display()));
        };
        for call in calls {
            for (at, _) in text.match_indices(call) {
                let args = &text[at + call.len()..];
                for arg in args.splitn(3, ',').take(2) {
                    if let Some(n) = status_at(arg).filter(|_| arg.trim().len() == 3) {
                        note(n, at);
                    }
                }
            }
        }
        for marker in ["=> ", "status = ", "HTTP/1.1 "] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                if let Some(n) = status_at(rest)
                    && rest[3..].starts_with([',', ';', ' ', '\n'])
                {
                    note(n, at);
                }
            }
        }
    }
    found
}

/// Issue 46.13: a 204 went out as `HTTP/1.1 204 Unknown`. Every status the source writes
/// has its standard phrase.
#[test]
fn every_status_the_server_sends_has_its_standard_phrase() {
    let found = statuses_in_source();
    // The scan itself is held to statuses known to be sent, so it cannot pass by finding none.
    for n in [200, 202, 204, 400, 401, 403, 404, 409, 429, 431, 503, 505] {
        assert!(found.contains_key(&n), "the scan missed {n}: {found:?}");
    }
    for (n, at) in &found {
        let standard = STANDARD
            .iter()
            .find(|(s, _)| s == n)
            .map(|(_, p)| *p)
            .unwrap_or_else(|| panic!("{at} sends {n}: add its standard phrase to STANDARD"));
        assert_eq!(reason(*n), standard, "{n} (sent at {at})");
    }
    // Outside the registry: no made-up phrase.
    assert_eq!(reason(299), "");
}

/// Issue 46.13: a 204 has its phrase and no Content-Length (RFC 9110 §8.6).
#[test]
fn a_204_is_no_content_without_a_length() {
    let mut out = Vec::new();
    Response::new(204, "", Vec::new()).write_to(&mut out, true, false);
    assert_eq!(
        out,
        b"HTTP/1.1 204 No Content\r\nconnection: keep-alive\r\n\r\n"
    );
}
