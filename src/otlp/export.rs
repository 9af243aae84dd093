//! The exporter: a run never waits for the collector. Spans go into a bounded queue with
//! `try_send` (a full queue drops the span and counts it in
//! `iac_agui_otlp_spans_dropped_total`), and one exporter thread of its own sends them in
//! batches with short timeouts, so a dead collector costs a refused connection per batch.

use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use serde_json::{Value, json};

use crate::metrics::M;
use crate::trace::{Attr, Span};

/// Spans waiting for the exporter; past it they are dropped (and counted).
const QUEUE: usize = 4096;
/// The most spans in one request to the collector.
const BATCH: usize = 512;
/// How long a span waits for its batch to fill before it is sent anyway.
const LINGER: Duration = Duration::from_secs(1);
/// Connecting to the collector, and the whole export request: a collector that does not
/// answer in this time loses the batch (counted), the queue goes on filling meanwhile.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

static QUEUE_TX: OnceLock<SyncSender<Span>> = OnceLock::new();

/// Queue `span` for export; a full queue drops it.
fn submit(span: Span) {
    let Some(tx) = QUEUE_TX.get() else { return };
    match tx.try_send(span) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            M.otlp_spans_dropped.inc();
        }
    }
}

/// `raw` as the collector's base URL (without a trailing `/`): `http://` only (this build
/// speaks no TLS), no credentials, query or fragment; on loopback unless `allow_remote`
/// (spans name principals and runs).
pub(crate) fn endpoint(raw: &str, allow_remote: bool) -> Result<String, String> {
    let raw = raw.trim();
    let (authority, tail) = crate::authority::http_url(raw)
        .ok_or("must be an http:// URL such as http://127.0.0.1:4318 (this build has no TLS)")?;
    if authority.contains('@') {
        return Err("must not carry credentials".into());
    }
    let (host, port) = crate::authority::split(authority.as_bytes())
        .ok_or("must name a host such as 127.0.0.1:4318")?;
    if port.is_some_and(|p| p.is_empty() || !crate::authority::valid_port(p)) || host.is_empty() {
        return Err("has an invalid host or port".into());
    }
    if tail.contains(['?', '#']) {
        return Err("must have no query or fragment".into());
    }
    let loopback = matches!(
        host.to_ascii_lowercase().as_slice(),
        b"localhost" | b"[::1]"
    ) || std::str::from_utf8(host)
        .ok()
        .and_then(|h| h.parse::<std::net::Ipv4Addr>().ok())
        .is_some_and(|ip| ip.is_loopback());
    if !loopback && !allow_remote {
        return Err(
            "is not a loopback address: spans name callers and runs, so sending them off this \
             host needs --otlp-allow-remote"
                .into(),
        );
    }
    Ok(raw.trim_end_matches('/').to_string())
}

/// Start the exporter thread for `base` (from [`endpoint`]). Once per process.
pub(crate) fn start(base: String) -> std::io::Result<()> {
    let (tx, rx) = sync_channel(QUEUE);
    std::thread::Builder::new()
        .name("iac-agui-otlp".into())
        .stack_size(crate::limits::WORKER_STACK_BYTES)
        .spawn(move || export_loop(&format!("{base}/v1/traces"), &rx))?;
    let _ = QUEUE_TX.set(tx);
    crate::trace::export_to(Box::new(submit));
    Ok(())
}

fn export_loop(url: &str, rx: &Receiver<Span>) {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_global(Some(EXPORT_TIMEOUT))
        .user_agent(concat!("iac-agui/", env!("CARGO_PKG_VERSION")))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let mut failing = false;
    loop {
        let first = match rx.recv() {
            Ok(s) => s,
            Err(_) => return,
        };
        let mut batch = vec![first];
        let until = crate::clock::Clock::now(&crate::clock::SystemClock) + LINGER;
        while batch.len() < BATCH {
            let now = crate::clock::Clock::now(&crate::clock::SystemClock);
            match rx.recv_timeout(until.saturating_duration_since(now)) {
                Ok(s) => batch.push(s),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let body = serde_json::to_vec(&encode(&batch)).unwrap_or_default();
        let sent = agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(&body[..]);
        let n = batch.len() as u64;
        match sent {
            Ok(r) if r.status().is_success() => {
                M.otlp_spans_exported.add(n);
                if failing {
                    log::info!("OTLP export to {url} works again");
                    failing = false;
                }
            }
            other => {
                M.otlp_spans_dropped.add(n);
                // Once per outage, not once per batch.
                if !failing {
                    let why = match other {
                        Ok(r) => format!("HTTP {}", r.status().as_u16()),
                        Err(e) => e.to_string(),
                    };
                    log::warn!("OTLP export to {url} failed ({why}); spans are dropped");
                    failing = true;
                }
            }
        }
    }
}

fn attr(key: &str, v: &Attr) -> Value {
    let value = match v {
        Attr::Str(s) => json!({"stringValue": s}),
        // OTLP/JSON writes 64-bit integers as decimal strings.
        Attr::Int(i) => json!({"intValue": i.to_string()}),
    };
    json!({"key": key, "value": value})
}

/// The OTLP/JSON `ExportTraceServiceRequest` of `spans`: ids as lowercase hex, times as
/// decimal strings of Unix nanoseconds, `kind` and status codes as integers.
pub(crate) fn encode(spans: &[Span]) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let mut o = json!({
                "traceId": crate::ids::hex(&s.ctx.trace_id),
                "spanId": crate::ids::hex(&s.ctx.span_id),
                "name": s.name,
                "kind": s.kind as i64,
                "startTimeUnixNano": s.start_ns.to_string(),
                "endTimeUnixNano": s.end_ns.to_string(),
                "attributes": s.attrs.iter().map(|(k, v)| attr(k, v)).collect::<Vec<_>>(),
                "flags": u32::from(s.ctx.flags),
            });
            if let Some(p) = &s.parent {
                o["parentSpanId"] = crate::ids::hex(p).into();
            }
            if let Some(ts) = &s.ctx.state {
                o["traceState"] = ts.to_string().into();
            }
            o["status"] = match &s.error {
                Some(m) => json!({"code": 2, "message": m}),
                None => json!({"code": 1}),
            };
            o
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                attr("service.name", &Attr::Str("iac-agui".into())),
                attr("service.version", &Attr::Str(env!("CARGO_PKG_VERSION").into())),
            ]},
            "scopeSpans": [{
                "scope": {"name": "iac-agui", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Kind, SpanContext};

    #[test]
    fn the_endpoint_is_loopback_http_unless_remote_is_allowed() {
        assert_eq!(
            endpoint("http://127.0.0.1:4318/", false).as_deref(),
            Ok("http://127.0.0.1:4318")
        );
        assert!(endpoint("http://localhost:4318", false).is_ok());
        assert!(endpoint("http://[::1]:4318", false).is_ok());
        assert!(endpoint("http://127.0.0.2:4318", false).is_ok());
        let remote = endpoint("http://collector.example:4318", false).unwrap_err();
        assert!(remote.contains("--otlp-allow-remote"), "{remote}");
        assert!(endpoint("http://collector.example:4318", true).is_ok());
        for bad in [
            "https://127.0.0.1:4318",
            "127.0.0.1:4318",
            "http://u:p@127.0.0.1:4318",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:4318/?x",
            "http://",
        ] {
            assert!(endpoint(bad, true).is_err(), "{bad}");
        }
    }

    #[test]
    fn spans_are_written_in_the_otlp_json_mapping() {
        let ctx = SpanContext {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
            flags: 1,
            state: Some("rojo=1".into()),
            principal: None,
        };
        let mut s = Span::child(&ctx, "SendMessage".into(), Kind::Client);
        // What `Span::attr` and the name keep while an exporter runs (none runs in this test).
        s.name = "SendMessage".into();
        s.attrs.push(("n", Attr::Int(7)));
        s.start_ns = 1_700_000_000_000_000_001;
        s.end_ns = s.start_ns + 5;
        s.fail("down");
        let v = encode(&[s]);
        let span = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "ab".repeat(16));
        assert_eq!(span["parentSpanId"], "0101010101010101");
        assert_eq!(span["kind"], 3);
        assert_eq!(span["startTimeUnixNano"], "1700000000000000001");
        assert_eq!(span["attributes"][0]["value"]["intValue"], "7");
        assert_eq!(span["status"]["code"], 2);
        assert_eq!(span["traceState"], "rojo=1");
        assert_eq!(
            v["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
            "iac-agui"
        );
    }
}
