//! Trace context end to end (issue 44): each request joins the caller's W3C trace (or starts
//! one), its kernel calls carry it on (`traceparent` with the call's own span id,
//! `tracestate` as received), its log records and the 1.0 session event name the trace id,
//! and an exporter, when one is given (the `otlp` extra), takes its finished spans (request →
//! run → kernel calls): [`export_to`].
//!
//! The span in force is a thread-local of the worker: the work of one request runs on its
//! worker thread, and a kernel call hands it to its call thread for the call's length
//! (`with_current`). Nothing here runs on the event loop.

pub mod context;

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use crate::clock::{Clock, SystemClock};

/// A span as its children and the kernel see it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpanContext {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    pub(crate) flags: u8,
    /// The caller's `tracestate`, passed on unchanged.
    pub(crate) state: Option<Arc<str>>,
    /// The principal of the request, an attribute of every span under it.
    pub(crate) principal: Option<Arc<str>>,
}

impl SpanContext {
    /// The `traceparent` that makes this span the parent of what receives it.
    pub(crate) fn traceparent(&self) -> String {
        context::format(&self.trace_id, &self.span_id, self.flags)
    }

    pub(crate) fn trace_id_hex(&self) -> String {
        crate::ids::hex(&self.trace_id)
    }
}

/// OTLP's `SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An attribute value (OTLP `stringValue` or `intValue`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    Str(String),
    Int(i64),
}

/// Where finished spans go, once an exporter is given; until then spans carry only ids.
static EXPORT: OnceLock<Box<dyn Fn(Span) + Send + Sync>> = OnceLock::new();

/// Hand every finished, sampled span to `export` from now on (once per process; it must never
/// wait: a run ends its spans on its own thread).
#[cfg_attr(
    not(feature = "otlp"),
    allow(dead_code, reason = "the otlp extra gives the exporter")
)]
pub(crate) fn export_to(export: Box<dyn Fn(Span) + Send + Sync>) {
    let _ = EXPORT.set(export);
}

/// Spans are exported.
pub(crate) fn exporting() -> bool {
    EXPORT.get().is_some()
}

/// A span being timed; [`Span::end`] hands it to the exporter (when one runs). Without the
/// `otlp` extra only its context is read: the rest is the exporter's.
#[derive(Debug)]
#[cfg_attr(
    not(feature = "otlp"),
    allow(
        dead_code,
        reason = "the fields beside the context are read by the exporter"
    )
)]
pub(crate) struct Span {
    pub(crate) ctx: SpanContext,
    pub(crate) parent: Option<[u8; 8]>,
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) attrs: Vec<(&'static str, Attr)>,
    /// `Some(message)`: the span ended in error (OTLP status code 2).
    pub(crate) error: Option<String>,
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // Not a secret: should the OS source fail, an id from the clock still links the spans.
    if crate::ids::fill(&mut b).is_err() {
        let t = now_ns().to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = t[i % 8] ^ (i as u8);
        }
    }
    // The specification makes all-zero ids invalid.
    if b.iter().all(|&x| x == 0) {
        b[N - 1] = 1;
    }
    b
}

fn now_ns() -> u64 {
    SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Span {
    /// The server span of a request: a child of the caller's `traceparent` when it parses,
    /// else the root of a new trace (sampled).
    pub(crate) fn incoming(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        name: String,
        principal: Option<Arc<str>>,
    ) -> Span {
        let parent = traceparent.and_then(context::parse);
        let (trace_id, parent_id, flags) = match parent {
            Some(p) => (p.trace_id, Some(p.parent_id), p.flags),
            None => (random(), None, context::SAMPLED),
        };
        // §3.3.1.1: without a valid traceparent the tracestate means nothing.
        let state = parent
            .and(tracestate)
            .and_then(context::tracestate)
            .map(Arc::from);
        let ctx = SpanContext {
            trace_id,
            span_id: random(),
            flags,
            state,
            principal,
        };
        Span::new(ctx, parent_id, name, Kind::Server)
    }

    /// A child of `parent`.
    pub(crate) fn child(parent: &SpanContext, name: String, kind: Kind) -> Span {
        let ctx = SpanContext {
            span_id: random(),
            ..parent.clone()
        };
        Span::new(ctx, Some(parent.span_id), name, kind)
    }

    /// A child of the span in force on this thread, or a new trace's root without one.
    pub(crate) fn child_of_current(name: String, kind: Kind) -> Span {
        match current() {
            Some(p) => Span::child(&p, name, kind),
            None => {
                let mut s = Span::incoming(None, None, name, None);
                s.kind = kind;
                s
            }
        }
    }

    fn new(ctx: SpanContext, parent: Option<[u8; 8]>, name: String, kind: Kind) -> Span {
        // Without an exporter a span only carries ids: a stream holds its request's span for
        // hours, and its name and attributes would be heap kept for nothing.
        let name = if exporting() { name } else { String::new() };
        Span {
            ctx,
            parent,
            name,
            kind,
            start_ns: now_ns(),
            end_ns: 0,
            attrs: Vec::new(),
            error: None,
        }
    }

    pub(crate) fn attr(&mut self, key: &'static str, value: Attr) {
        if exporting() {
            self.attrs.push((key, value));
        }
    }

    pub(crate) fn str(&mut self, key: &'static str, value: impl Into<String>) {
        if exporting() {
            self.attrs.push((key, Attr::Str(value.into())));
        }
    }

    pub(crate) fn fail(&mut self, message: impl Into<String>) {
        self.error = Some(message.into());
    }

    /// The span is over: to the exporter's queue, never waiting for it.
    pub(crate) fn end(mut self) {
        // A caller that did not sample its trace asked for no spans of it (the context
        // still goes on to the kernel).
        if !exporting() || self.ctx.flags & context::SAMPLED == 0 {
            return;
        }
        self.end_ns = now_ns().max(self.start_ns);
        if let Some(p) = &self.ctx.principal {
            self.attrs.push(("enduser.id", Attr::Str(p.to_string())));
        }
        if let Some(export) = EXPORT.get() {
            export(self);
        }
    }
}

thread_local! {
    /// The span in force on this thread (the request's, its run's, a kernel call's).
    static CURRENT: RefCell<Option<SpanContext>> = const { RefCell::new(None) };
    /// What the run in force reported for its span (outcome aside): usage.
    static NOTES: RefCell<Vec<(&'static str, Attr)>> = const { RefCell::new(Vec::new()) };
}

/// The span in force on this thread.
pub(crate) fn current() -> Option<SpanContext> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The trace id in force on this thread, for log records.
pub(crate) fn current_trace_id() -> Option<String> {
    CURRENT.with(|c| c.borrow().as_ref().map(SpanContext::trace_id_hex))
}

/// Puts back the span that was in force, also when what ran under it panicked.
#[must_use = "the span is in force only while this lives"]
pub(crate) struct Entered(Option<SpanContext>);

impl Drop for Entered {
    fn drop(&mut self) {
        let before = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = before);
    }
}

/// `ctx` is the span in force on this thread until the guard drops. A guard, not a closure:
/// a run's request and stream stay where they are instead of being moved into one, which
/// on a worker is a deeper resident stack for the stream's whole life (docs/performance.md).
pub(crate) fn enter(ctx: Option<SpanContext>) -> Entered {
    Entered(CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), ctx)))
}

/// `f` with `ctx` as the span in force on this thread.
pub(crate) fn with_current<T>(ctx: Option<SpanContext>, f: impl FnOnce() -> T) -> T {
    let _entered = enter(ctx);
    f()
}

/// A run's token usage, for its span (the worker's run reports it on its terminal path).
pub(crate) fn note_usage(input_tokens: u64, output_tokens: u64) {
    NOTES.with(|n| {
        let mut n = n.borrow_mut();
        n.push(("gen_ai.usage.input_tokens", Attr::Int(input_tokens as i64)));
        n.push((
            "gen_ai.usage.output_tokens",
            Attr::Int(output_tokens as i64),
        ));
    });
}

/// What was noted on this thread since the last call.
pub(crate) fn take_notes() -> Vec<(&'static str, Attr)> {
    NOTES.with(|n| std::mem::take(&mut *n.borrow_mut()))
}

/// The headers a kernel call carries: the span in force as the kernel's parent.
pub(crate) fn outgoing() -> Option<(String, Option<Arc<str>>)> {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map(|s| (s.traceparent(), s.state.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_joined_and_a_malformed_one_starts_a_new_trace() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let s = Span::incoming(Some(tp), Some("rojo=1"), "POST /".into(), None);
        assert_eq!(s.ctx.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(
            s.parent.map(|p| crate::ids::hex(&p)).as_deref(),
            Some("b7ad6b7169203331")
        );
        assert_ne!(crate::ids::hex(&s.ctx.span_id), "b7ad6b7169203331");
        assert_eq!(s.ctx.state.as_deref(), Some("rojo=1"));

        let bad = Span::incoming(Some("00-xyz"), Some("rojo=1"), "POST /".into(), None);
        assert_ne!(bad.ctx.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(bad.parent, None);
        assert_eq!(bad.ctx.state, None, "no tracestate without a traceparent");
        assert_eq!(bad.ctx.flags, context::SAMPLED);
    }

    #[test]
    fn the_span_in_force_is_put_back_after_a_panic() {
        let s = Span::incoming(None, None, "r".into(), None);
        let child = Span::child(&s.ctx, "k".into(), Kind::Client);
        assert_eq!(child.parent, Some(s.ctx.span_id));
        assert_eq!(child.ctx.trace_id, s.ctx.trace_id);
        with_current(Some(s.ctx.clone()), || {
            let r = std::panic::catch_unwind(|| {
                with_current(Some(child.ctx.clone()), || panic!("inner"))
            });
            assert!(r.is_err());
            assert_eq!(current(), Some(s.ctx.clone()));
            let (tp, _) = outgoing().unwrap();
            assert_eq!(tp, s.ctx.traceparent());
        });
        assert_eq!(current(), None);
    }
}
