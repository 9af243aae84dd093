//! HTTP/1.1 request heads (httparse), body framing, a streaming chunked decoder and response
//! writers. Pure functions over byte slices: no sockets, so every rule is unit- and fuzz-testable.

use crate::authority;
use crate::limits;

/// Why a request cannot be served; each maps to one status and always closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpError {
    /// Malformed syntax or ambiguous framing (400).
    BadRequest,
    /// Request target too long (414).
    UriTooLong,
    /// Head too large or too many fields (431).
    HeadersTooLarge,
    /// Transfer-Encoding other than `chunked` (501).
    NotImplemented,
    /// HTTP version other than 1.0/1.1 (505).
    VersionNotSupported,
}

impl HttpError {
    pub(crate) fn status(self) -> u16 {
        match self {
            HttpError::BadRequest => 400,
            HttpError::UriTooLong => 414,
            HttpError::HeadersTooLarge => 431,
            HttpError::NotImplemented => 501,
            HttpError::VersionNotSupported => 505,
        }
    }
}

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(u64),
    Chunked,
}

/// A parsed request head. Header names are lowercased; values are raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub(crate) method: String,
    /// The raw request target (path and query) as sent.
    pub(crate) target: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) minor_version: u8,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) framing: Framing,
    pub(crate) keep_alive: bool,
    pub(crate) expect_continue: bool,
}

impl RequestHead {
    /// First value of a header (names are matched lowercased), as the reference's frameworks do.
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// How many fields are named `name`: a credential or identity sent twice is refused,
    /// since a proxy that appends rather than replaces leaves the client's copy first.
    pub(crate) fn header_count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n == name).count()
    }

    /// First value as text; header bytes outside ASCII are read as Latin-1 like Starlette does.
    pub(crate) fn header_str(&self, name: &str) -> Option<String> {
        self.header(name)
            .map(|v| v.iter().map(|&b| b as char).collect())
    }

    /// The path part of the target (before `?`).
    pub(crate) fn raw_path(&self) -> &str {
        match self.target.find('?') {
            Some(i) => &self.target[..i],
            None => &self.target,
        }
    }

    pub(crate) fn query(&self) -> Option<&str> {
        self.target.find('?').map(|i| &self.target[i + 1..])
    }

    pub(crate) fn has_body(&self) -> bool {
        !matches!(self.framing, Framing::Length(0))
    }
}

/// Parse a request head from the start of `buf`.
///
/// `Ok(None)` means more bytes are needed; `Ok(Some((head, n)))` means the head used `n` bytes.
pub fn parse_head(buf: &[u8]) -> Result<Option<(RequestHead, usize)>, HttpError> {
    // Ignore empty lines before a request line (RFC 9112 §2.2), which some clients send after a body.
    let skip = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let buf_rest = &buf[skip..];
    check_uri_length(buf_rest)?;
    let mut headers = [httparse::EMPTY_HEADER; limits::MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let status = match req.parse(buf_rest) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadersTooLarge),
        Err(httparse::Error::Version) => return Err(version_error(buf_rest)),
        Err(_) => return Err(HttpError::BadRequest),
    };
    let used = match status {
        httparse::Status::Partial => {
            if buf.len() > limits::MAX_HEAD_BYTES {
                return Err(HttpError::HeadersTooLarge);
            }
            return Ok(None);
        }
        httparse::Status::Complete(n) => n,
    };
    if used > limits::MAX_HEAD_BYTES {
        return Err(HttpError::HeadersTooLarge);
    }
    let method = req.method.unwrap_or("").to_string();
    let target = req.path.unwrap_or("").to_string();
    let minor_version = req.version.unwrap_or(1);
    if target.is_empty() || !(target.starts_with('/') || target == "*") {
        return Err(HttpError::BadRequest);
    }
    let mut out = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        out.push((h.name.to_ascii_lowercase(), h.value.to_vec()));
    }
    let framing = body_framing(&out)?;
    let connection_tokens = tokens(&out, "connection");
    let keep_alive = if minor_version == 0 {
        connection_tokens.iter().any(|t| t == "keep-alive")
    } else {
        !connection_tokens.iter().any(|t| t == "close")
    };
    let expect_continue = minor_version == 1
        && out
            .iter()
            .any(|(n, v)| n == "expect" && v.eq_ignore_ascii_case(b"100-continue"));
    // RFC 9112 §3.2: a 1.1 request without Host, any request with two Host fields or an
    // invalid Host value is malformed.
    let mut hosts = out.iter().filter(|(n, _)| n == "host");
    match (hosts.next(), hosts.next()) {
        (None, _) if minor_version == 1 => return Err(HttpError::BadRequest),
        (Some(_), Some(_)) => return Err(HttpError::BadRequest),
        (Some((_, v)), None) if !authority::valid_host_header(trim_ows(v)) => {
            return Err(HttpError::BadRequest);
        }
        _ => {}
    }
    Ok(Some((
        RequestHead {
            method,
            target,
            minor_version,
            headers: out,
            framing,
            keep_alive,
            expect_continue,
        },
        skip + used,
    )))
}

fn version_error(buf: &[u8]) -> HttpError {
    // httparse reports any non-1.x version as a version error; say 505 only for a well-formed
    // `HTTP/d.d` token, everything else is plain garbage.
    let line_end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let line = &buf[..line_end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match line.rsplit(|&b| b == b' ').next() {
        Some(v)
            if v.len() == 8
                && v.starts_with(b"HTTP/")
                && v[5].is_ascii_digit()
                && v[6] == b'.'
                && v[7].is_ascii_digit() =>
        {
            HttpError::VersionNotSupported
        }
        _ => HttpError::BadRequest,
    }
}

/// 414 as soon as the request line's target is known to exceed the bound, even before the
/// head is complete (a slow client must not hold a huge target in memory).
fn check_uri_length(buf: &[u8]) -> Result<(), HttpError> {
    let Some(sp) = buf.iter().take(64).position(|&b| b == b' ') else {
        return Ok(());
    };
    let rest = &buf[sp + 1..];
    let end = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n');
    let len = end.unwrap_or(rest.len());
    if len > limits::MAX_URI_BYTES {
        return Err(HttpError::UriTooLong);
    }
    Ok(())
}

/// Comma-separated tokens of every field named `name`, trimmed and lowercased.
fn tokens(headers: &[(String, Vec<u8>)], name: &str) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n == name)
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t).trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// RFC 9112 §6: Transfer-Encoding must be exactly `chunked` and must not come with
/// Content-Length; Content-Length must be one plain decimal. Anything else is a smuggling
/// shape and is refused.
fn body_framing(headers: &[(String, Vec<u8>)]) -> Result<Framing, HttpError> {
    let te_fields = headers
        .iter()
        .filter(|(n, _)| n == "transfer-encoding")
        .count();
    let cl: Vec<&[u8]> = headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_slice())
        .collect();
    if te_fields > 0 {
        if !cl.is_empty() {
            return Err(HttpError::BadRequest);
        }
        let te = tokens(headers, "transfer-encoding");
        if te.len() == 1 && te[0] == "chunked" {
            return Ok(Framing::Chunked);
        }
        if te.last().map(String::as_str) != Some("chunked") {
            return Err(HttpError::BadRequest);
        }
        return Err(HttpError::NotImplemented);
    }
    match cl.as_slice() {
        [] => Ok(Framing::Length(0)),
        [one] => parse_content_length(one).map(Framing::Length),
        _ => Err(HttpError::BadRequest),
    }
}

fn parse_content_length(v: &[u8]) -> Result<u64, HttpError> {
    let v = trim_ows(v);
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::BadRequest);
    }
    let mut n: u64 = 0;
    for &b in v {
        n = n * 10 + u64::from(b - b'0');
    }
    Ok(n)
}

fn trim_ows(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &v[start..end]
}

/// Streaming decoder for `Transfer-Encoding: chunked` bodies. Feed it bytes in any split; it
/// appends payload to `out` and reports how many input bytes it consumed.
#[derive(Debug, Clone, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    line: Vec<u8>,
    trailer_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataCr,
    DataLf,
    Trailer,
    Done,
}

/// Outcome of one decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// Malformed chunk framing (400).
    Malformed,
    /// Decoded payload exceeded the route's limit (413).
    TooLarge,
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decode from `input`, appending at most `limit - out.len()` payload bytes to `out`.
    /// Returns the number of bytes consumed; stops early once the body is complete.
    pub fn decode(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                ChunkState::Done => return Ok(i),
                ChunkState::Size | ChunkState::Trailer => {
                    let b = input[i];
                    i += 1;
                    if b != b'\n' {
                        self.line.push(b);
                        let cap = if self.state == ChunkState::Size {
                            limits::MAX_CHUNK_LINE
                        } else {
                            limits::MAX_TRAILER_BYTES
                        };
                        if self.line.len() > cap {
                            return Err(ChunkError::Malformed);
                        }
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    if self.state == ChunkState::Size {
                        let size = parse_chunk_size(line)?;
                        if size == 0 {
                            self.state = ChunkState::Trailer;
                        } else {
                            if (out.len() as u64).saturating_add(size) > limit as u64 {
                                return Err(ChunkError::TooLarge);
                            }
                            self.state = ChunkState::Data(size);
                        }
                    } else if line.is_empty() {
                        self.state = ChunkState::Done;
                        return Ok(i);
                    } else {
                        self.trailer_bytes += line.len();
                        if self.trailer_bytes > limits::MAX_TRAILER_BYTES {
                            return Err(ChunkError::Malformed);
                        }
                    }
                }
                ChunkState::Data(left) => {
                    let take = (input.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataCr
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataCr => {
                    let b = input[i];
                    i += 1;
                    self.state = match b {
                        b'\r' => ChunkState::DataLf,
                        b'\n' => ChunkState::Size,
                        _ => return Err(ChunkError::Malformed),
                    };
                }
                ChunkState::DataLf => {
                    let b = input[i];
                    i += 1;
                    if b != b'\n' {
                        return Err(ChunkError::Malformed);
                    }
                    self.state = ChunkState::Size;
                }
            }
        }
        Ok(i)
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    let size_part = match line.iter().position(|&b| b == b';') {
        Some(p) => &line[..p],
        None => line,
    };
    let size_part = trim_ows(size_part);
    if size_part.is_empty() || size_part.len() > 15 {
        return Err(ChunkError::Malformed);
    }
    let mut n: u64 = 0;
    for &b in size_part {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err(ChunkError::Malformed),
        };
        n = n * 16 + u64::from(d);
    }
    Ok(n)
}

/// The standard reason phrase of `status` (the IANA registry: RFC 9110, 6585, 7538, 8297,
/// 8470, 7725): whatever status a route picks is written with its own phrase. A status
/// outside the registry gets an empty phrase, which RFC 9112 allows, rather than a made-up one.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        511 => "Network Authentication Required",
        _ => "",
    }
}

/// A complete (non-streaming) response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
    /// Close the connection after this response even if the client wants keep-alive.
    pub(crate) close: bool,
}

impl Response {
    pub(crate) fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body,
            close: false,
        }
    }

    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response::new(status, "application/json", body)
    }

    pub(crate) fn text(status: u16, body: &str) -> Response {
        Response::new(
            status,
            "text/plain; charset=utf-8",
            body.as_bytes().to_vec(),
        )
    }

    pub(crate) fn with_header(mut self, name: &'static str, value: String) -> Response {
        self.headers.push((name, value));
        self
    }

    pub(crate) fn closing(mut self) -> Response {
        self.close = true;
        self
    }

    /// Serialize into `out`. With `head_only` the body is left out but Content-Length kept.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>, keep_alive: bool, head_only: bool) {
        write_status_line(out, self.status);
        if !self.content_type.is_empty() {
            push_header(out, "content-type", self.content_type);
        }
        for (n, v) in &self.headers {
            push_header(out, n, v);
        }
        // RFC 9110 §8.6: never on a 204 (it has no body by definition).
        if self.status != 204 {
            push_header(out, "content-length", &self.body.len().to_string());
        }
        push_header(
            out,
            "connection",
            if keep_alive { "keep-alive" } else { "close" },
        );
        out.extend_from_slice(b"\r\n");
        if !head_only {
            out.extend_from_slice(&self.body);
        }
    }
}

fn write_status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    // Values are built by this server; strip CR/LF defensively so nothing can split a header.
    out.extend(value.bytes().filter(|&b| b != b'\r' && b != b'\n'));
    out.extend_from_slice(b"\r\n");
}

/// The interim response that lets a client waiting on `Expect: 100-continue` send its body.
pub(crate) const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// SSE response head. HTTP/1.1 clients get a chunked body; HTTP/1.0 clients get a raw body
/// delimited by closing the connection.
pub(crate) fn write_sse_head(out: &mut Vec<u8>, chunked: bool, extra: &[(&'static str, String)]) {
    write_status_line(out, 200);
    for (k, v) in extra {
        push_header(out, k, v);
    }
    push_header(out, "content-type", "text/event-stream; charset=utf-8");
    push_header(out, "cache-control", "no-cache");
    push_header(out, "x-accel-buffering", "no");
    if chunked {
        push_header(out, "connection", "keep-alive");
        push_header(out, "transfer-encoding", "chunked");
    } else {
        push_header(out, "connection", "close");
    }
    out.extend_from_slice(b"\r\n");
}

/// Append one body piece, framed as a chunk when `chunked`.
/// The size line of one HTTP/1.1 chunk.
pub(crate) fn write_chunk_head(out: &mut Vec<u8>, len: usize) {
    push_hex(out, len);
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn write_body_piece(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if data.is_empty() {
        return;
    }
    if chunked {
        push_hex(out, data.len());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(data);
    }
}

fn push_hex(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The chunked-body terminator.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Percent-decode a path like the reference's ASGI server (uvicorn `unquote`): invalid escapes
/// stay literal, invalid UTF-8 becomes U+FFFD.
pub(crate) fn percent_decode(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex_val(b[i + 1]), hex_val(b[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
