//! The demo kernel's HTTP plumbing: accept, read one request, answer or stream chunked SSE.

use super::*;

pub(super) fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let s = shared.clone();
        s.connections.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("demo-conn".into())
            .stack_size(512 * 1024)
            .spawn(move || {
                let _ = serve(conn, &s);
                s.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Largest request body the demo kernel reads (the adapter's bodies are far smaller).
pub(super) const MAX_DEMO_BODY: usize = 64 << 20;

pub(super) struct Req {
    pub(super) head: http::RequestHead,
    pub(super) body: Vec<u8>,
}

pub(super) fn read_request(sock: &mut TcpStream) -> io::Result<Option<Req>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let (head, used) = loop {
        if let Ok(Some(h)) = http::parse_head(&buf) {
            break h;
        }
        if buf.len() > 64 * 1024 {
            return Ok(None);
        }
        let n = sock.read(&mut tmp)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let mut rest = buf.split_off(used);
    let mut body = Vec::new();
    match head.framing {
        Framing::Length(n) => {
            if n > MAX_DEMO_BODY as u64 {
                return Ok(None);
            }
            while (rest.len() as u64) < n {
                let k = sock.read(&mut tmp)?;
                if k == 0 {
                    return Ok(None);
                }
                rest.extend_from_slice(&tmp[..k]);
            }
            rest.truncate(n as usize);
            body = rest;
        }
        Framing::Chunked => {
            let mut dec = ChunkedDecoder::default();
            loop {
                dec.decode(&rest, &mut body, MAX_DEMO_BODY)
                    .map_err(|_| io::Error::other("bad chunked body"))?;
                if dec.is_done() {
                    break;
                }
                let k = sock.read(&mut tmp)?;
                if k == 0 {
                    return Ok(None);
                }
                rest = tmp[..k].to_vec();
            }
        }
    }
    Ok(Some(Req { head, body }))
}

pub(super) fn respond(sock: &mut TcpStream, status: u16, body: &Value) -> io::Result<()> {
    let b = serde_json::to_vec(body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        http::reason(status),
        b.len()
    );
    sock.write_all(head.as_bytes())?;
    sock.write_all(&b)
}

pub(super) fn serve(mut sock: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    let _ = sock.set_nodelay(true);
    let Some(req) = read_request(&mut sock)? else {
        return Ok(());
    };
    if let Some(tok) = &shared.cfg.token {
        let want = format!("Bearer {tok}");
        if req.head.header("authorization") != Some(want.as_bytes()) {
            return respond(&mut sock, 401, &json!({"error": "Unauthorized"}));
        }
    }
    let path = req.head.raw_path().to_string();
    match (req.head.method.as_str(), path.as_str()) {
        ("GET", "/health") => respond(
            &mut sock,
            200,
            &json!({"status": "healthy", "version": "0.16.0", "mode": "normal"}),
        ),
        ("GET", "/iac-code/pipeline/state") => pipeline_state(&mut sock, shared, &req),
        ("POST", "/iac-code/session/ensure-restored") => ensure_restored(&mut sock, shared, &req),
        ("POST", "/") => rpc(sock, shared, req),
        _ => respond(&mut sock, 404, &json!({"error": "Not Found"})),
    }
}

pub(super) fn write_chunk(sock: &mut TcpStream, data: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    sock.write_all(&out)
}

pub(super) const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\nconnection: close\r\nx-accel-buffering: no\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";
