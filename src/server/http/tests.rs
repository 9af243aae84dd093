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
