//! Shared helpers for black-box tests: start a server on port 0, talk raw HTTP/1.1 to it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use iac_agui::app::{App, Backend};
use iac_agui::routes::RouteConfig;
use iac_agui::server::timers::SystemClock;
use iac_agui::server::{Server, ServerConfig, ShutdownHandle, event_loop};

pub struct TestServer {
    pub addr: SocketAddr,
    pub shutdown: ShutdownHandle,
    join: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start(
        backend: Arc<dyn Backend>,
        auth: Option<&str>,
        cfg: ServerConfig,
        max_jobs: usize,
    ) -> TestServer {
        let routes = RouteConfig::new(
            auth.map(str::to_string),
            iac_agui::cli::health_body(iac_agui::config::AguiProtocol::V0_1),
        );
        let app = App::new(routes, backend, max_jobs);
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            cfg,
            Arc::new(app),
            Arc::new(SystemClock),
        )
        .unwrap();
        let addr = server.local_addr();
        let shutdown = server.shutdown_handle();
        let join = event_loop::spawn(server).unwrap();
        TestServer {
            addr,
            shutdown,
            join: Some(join),
        }
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Stop the server and wait for its loop to return.
    pub fn stop(mut self) {
        self.shutdown.shutdown();
        if let Some(j) = self.join.take() {
            j.join().unwrap().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.shutdown();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }

    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub fn error_message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// Reads HTTP responses off one connection, keeping leftover bytes for the next one.
pub struct Reader {
    pub sock: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    pub fn new(sock: TcpStream) -> Reader {
        Reader {
            sock,
            buf: Vec::new(),
        }
    }

    fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 65536];
        match self.sock.read(&mut tmp) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }

    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn exact(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// The head of the next response (status and headers).
    pub fn head(&mut self) -> Option<(u16, Vec<(String, String)>)> {
        let status_line = self.line()?;
        let status: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let l = self.line()?;
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':')?;
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        Some((status, headers))
    }

    /// The next complete response (`head_only` for answers to HEAD).
    pub fn response(&mut self, head_only: bool) -> Option<Resp> {
        let (status, headers) = self.head()?;
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let body = if head_only || status == 100 {
            Vec::new()
        } else if get("transfer-encoding").as_deref() == Some("chunked") {
            let mut body = Vec::new();
            loop {
                let size = usize::from_str_radix(self.line()?.trim(), 16).ok()?;
                if size == 0 {
                    self.line()?;
                    break;
                }
                body.extend(self.exact(size)?);
                self.line()?;
            }
            body
        } else if let Some(n) = get("content-length") {
            self.exact(n.parse().ok()?)?
        } else {
            let mut all = std::mem::take(&mut self.buf);
            self.sock.read_to_end(&mut all).ok()?;
            all
        };
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// Read one chunk of a chunked body: `None` at the end of the stream.
    pub fn chunk(&mut self) -> Option<Vec<u8>> {
        let size = usize::from_str_radix(self.line()?.trim(), 16).ok()?;
        if size == 0 {
            self.line()?;
            return None;
        }
        let data = self.exact(size)?;
        self.line()?;
        Some(data)
    }

    /// True when the server closed the connection (EOF) within the read timeout.
    pub fn closed(&mut self) -> bool {
        let mut tmp = [0u8; 4096];
        loop {
            match self.sock.read(&mut tmp) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// Send raw bytes on a fresh connection and read one response.
pub fn raw(addr: SocketAddr, bytes: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A server may answer (413, 401, …) and close before reading everything: keep going.
    let _ = s.write_all(bytes);
    let head_only = bytes.starts_with(b"HEAD ");
    Reader::new(s).response(head_only).expect("a response")
}

/// Build a request with the usual headers.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        r.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    r.push_str("\r\n");
    let mut out = r.into_bytes();
    out.extend_from_slice(body);
    out
}

pub fn post_json(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    raw(addr, &request("POST", path, &h, body))
}

/// Parse an SSE body into its `data:` JSON payloads (and count heartbeats).
pub fn sse_events(body: &[u8]) -> (Vec<serde_json::Value>, usize) {
    let text = String::from_utf8_lossy(body);
    let mut events = Vec::new();
    let mut heartbeats = 0;
    for block in text.split("\n\n") {
        if block.is_empty() {
            continue;
        }
        if block == ": heartbeat" {
            heartbeats += 1;
            continue;
        }
        let data = block
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("unexpected SSE block {block:?}"));
        events.push(serde_json::from_str(data).unwrap());
    }
    (events, heartbeats)
}

/// Wait until `f` holds or the deadline passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}
