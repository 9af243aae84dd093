//! Process metrics in the Prometheus text format 0.0.4 (`GET /metrics`).
//!
//! Plain atomics in one static, so the loop renders them without blocking and no code path
//! needs a handle. Labels only ever take server-defined values (outcomes, error codes, kinds)
//! or, for usage, the principal names of the operator's tokens file (a bounded set): never a
//! thread or run id, never anything a client chose (identity-header names stay out).

mod process;
pub(crate) use process::sampler as process_sampler;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::sync::lock;

pub struct Counter(AtomicU64);

impl Counter {
    pub(crate) const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub struct Gauge(AtomicI64);

impl Gauge {
    pub(crate) const fn new(v: i64) -> Gauge {
        Gauge(AtomicI64::new(v))
    }
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter per label value (values are `'static`: server-defined).
pub struct Labeled(Mutex<BTreeMap<&'static str, u64>>);

impl Labeled {
    const fn new() -> Labeled {
        Labeled(Mutex::new(BTreeMap::new()))
    }
    pub fn inc(&self, label: &'static str) {
        *lock(&self.0).entry(label).or_insert(0) += 1;
    }
}

/// Upper bounds in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; BUCKETS.len()],
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Every metric of the process.
pub struct Metrics {
    pub connections_open: Gauge,
    pub connections_total: Counter,
    pub heartbeats: Counter,
    pub runs_active: Gauge,
    pub runs: Labeled,
    pub subscriptions: Labeled,
    pub events_sent: Counter,
    pub bytes_sent: Counter,
    pub upstream_errors: Labeled,
    pub unavailable: Labeled,
    pub run_duration: Histogram,
    pub first_event: Histogram,
    pub replay_bytes: Gauge,
    /// Output held for clients (unsent, plus queued by workers), and its budget.
    pub output_buffered: Gauge,
    pub output_budget: Gauge,
    pub reads_waiting: Gauge,
    pub subscribers: Gauge,
    pub kernel_up: Gauge,
    pub kernel_restarts: Counter,
    /// What a run pays besides its events (issue 37): a worker thread started for a request,
    /// a call handed to a call thread (and its answer handed back: two wake-ups), a worker
    /// waking the loop; and fsyncs of the state store.
    pub worker_starts: Counter,
    pub call_handoffs: Counter,
    pub loop_wakes: Counter,
    pub fsyncs: Counter,
    /// How each upstream stream frame was read, counted where `a2a/frame.rs` takes the way
    /// (docs/performance.md, "What each special case buys"): checked against the burst's last delta frame (`Template`), read by the
    /// hand-written delta reader, or read as a `Value` on the worker (shallow) or on a call
    /// thread (deep). The benchmark and `tests/it/tuning.rs` fail when the first two stop
    /// carrying a text stream.
    pub frames_template: Counter,
    pub frames_delta: Counter,
    pub frames_shallow: Counter,
    pub frames_deep: Counter,
    /// Connections to the kernel made by the lean transport (`a2a/transport.rs`).
    pub lean_connects: Counter,
    /// Per-caller quotas (issue 44): refusals by quota; usage summed over every caller, and
    /// per principal when principals come from the tokens file.
    pub quota_refusals: Labeled,
    pub usage_runs: Counter,
    pub usage_input_tokens: Counter,
    pub usage_output_tokens: Counter,
    pub usage_by_principal: Mutex<BTreeMap<String, [u64; 3]>>,
    /// Audit records that could not be written (issue 44).
    pub audit_failures: Counter,
    /// `--otlp-endpoint`: spans the collector took, and spans lost (queue full, export failed).
    pub otlp_spans_exported: Counter,
    pub otlp_spans_dropped: Counter,
}

pub static M: Metrics = Metrics {
    connections_open: Gauge::new(0),
    connections_total: Counter::new(),
    heartbeats: Counter::new(),
    runs_active: Gauge::new(0),
    runs: Labeled::new(),
    subscriptions: Labeled::new(),
    events_sent: Counter::new(),
    bytes_sent: Counter::new(),
    upstream_errors: Labeled::new(),
    unavailable: Labeled::new(),
    run_duration: Histogram::new(),
    first_event: Histogram::new(),
    replay_bytes: Gauge::new(0),
    output_buffered: Gauge::new(0),
    output_budget: Gauge::new(0),
    reads_waiting: Gauge::new(0),
    subscribers: Gauge::new(0),
    kernel_up: Gauge::new(1),
    kernel_restarts: Counter::new(),
    worker_starts: Counter::new(),
    call_handoffs: Counter::new(),
    loop_wakes: Counter::new(),
    fsyncs: Counter::new(),
    frames_template: Counter::new(),
    frames_delta: Counter::new(),
    frames_shallow: Counter::new(),
    frames_deep: Counter::new(),
    lean_connects: Counter::new(),
    quota_refusals: Labeled::new(),
    usage_runs: Counter::new(),
    usage_input_tokens: Counter::new(),
    usage_output_tokens: Counter::new(),
    usage_by_principal: Mutex::new(BTreeMap::new()),
    audit_failures: Counter::new(),
    otlp_spans_exported: Counter::new(),
    otlp_spans_dropped: Counter::new(),
};

/// A label value as the text format writes it.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The extras' series, each only in a build with its extra (the counters are there in
/// every build, and stay at zero without it).
fn usage(o: &mut String, m: &Metrics) {
    if cfg!(feature = "audit") {
        scalar(
            o,
            "iac_agui_audit_write_failures_total",
            "counter",
            "Audit records that could not be written (each refused its decision, or a run's end went unrecorded).",
            m.audit_failures.get() as i64,
        );
    }
    if !cfg!(feature = "quotas") {
        return;
    }
    labeled(
        o,
        "iac_agui_caller_quota_refusals_total",
        "quota",
        "429 RATE_LIMITED answers, by the quota refused (runs, rate).",
        &m.quota_refusals,
    );
    scalar(
        o,
        "iac_agui_usage_runs_total",
        "counter",
        "Runs ended with their usage counted (every caller).",
        m.usage_runs.get() as i64,
    );
    head(
        o,
        "iac_agui_usage_tokens_total",
        "counter",
        "Tokens the kernel reported in RUN_FINISHED.usage (every caller).",
    );
    let _ = writeln!(
        o,
        "iac_agui_usage_tokens_total{{direction=\"input\"}} {}\niac_agui_usage_tokens_total{{direction=\"output\"}} {}",
        m.usage_input_tokens.get(),
        m.usage_output_tokens.get()
    );
    let by = lock(&m.usage_by_principal);
    if by.is_empty() {
        return;
    }
    head(
        o,
        "iac_agui_principal_runs_total",
        "counter",
        "Runs ended, per principal of the tokens file.",
    );
    for (p, v) in by.iter() {
        let _ = writeln!(
            o,
            "iac_agui_principal_runs_total{{principal=\"{}\"}} {}",
            label_value(p),
            v[0]
        );
    }
    head(
        o,
        "iac_agui_principal_tokens_total",
        "counter",
        "Tokens the kernel reported, per principal of the tokens file.",
    );
    for (p, v) in by.iter() {
        let p = label_value(p);
        let _ = writeln!(
            o,
            "iac_agui_principal_tokens_total{{principal=\"{p}\",direction=\"input\"}} {}\niac_agui_principal_tokens_total{{principal=\"{p}\",direction=\"output\"}} {}",
            v[1], v[2]
        );
    }
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(crate) fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: i64) {
    head(out, name, kind, help);
    let _ = writeln!(out, "{name} {v}");
}

fn labeled(out: &mut String, name: &str, label: &str, help: &str, l: &Labeled) {
    head(out, name, "counter", help);
    for (k, v) in lock(&l.0).iter() {
        let _ = writeln!(out, "{name}{{{label}=\"{k}\"}} {v}");
    }
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    head(out, name, "histogram", help);
    let mut cumulative = 0;
    for (i, b) in BUCKETS.iter().enumerate() {
        cumulative += h.buckets[i].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
    }
    let count = h.count();
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
    let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
}

/// The whole exposition.
pub fn render(extras: &[fn(&mut String)]) -> String {
    let m = &M;
    let mut o = String::with_capacity(4096);
    head(&mut o, "iac_agui_build_info", "gauge", "Build information.");
    let _ = writeln!(
        o,
        "iac_agui_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let c = |v: u64| v as i64;
    scalar(
        &mut o,
        "iac_agui_connections_open",
        "gauge",
        "Open client connections.",
        m.connections_open.get(),
    );
    scalar(
        &mut o,
        "iac_agui_connections_total",
        "counter",
        "Client connections accepted.",
        c(m.connections_total.get()),
    );
    scalar(
        &mut o,
        "iac_agui_runs_active",
        "gauge",
        "Runs being driven now (detached ones included).",
        m.runs_active.get(),
    );
    // The extras' series (stored conversations: `threads`).
    for s in extras {
        s(&mut o);
    }
    head(
        &mut o,
        "iac_agui_thread_handoffs_total",
        "counter",
        "Work moved between threads: worker started for a request, call handed to a call thread and back (counted once), worker waking the loop.",
    );
    for (kind, v) in [
        ("worker_start", &m.worker_starts),
        ("call", &m.call_handoffs),
        ("loop_wake", &m.loop_wakes),
    ] {
        let _ = writeln!(
            o,
            "iac_agui_thread_handoffs_total{{kind=\"{kind}\"}} {}",
            v.get()
        );
    }
    scalar(
        &mut o,
        "iac_agui_fsyncs_total",
        "counter",
        "fsync calls of the state store (files and directories).",
        c(m.fsyncs.get()),
    );
    if cfg!(feature = "otlp") {
        scalar(
            &mut o,
            "iac_agui_otlp_spans_exported_total",
            "counter",
            "Spans the OTLP collector accepted (--otlp-endpoint).",
            c(m.otlp_spans_exported.get()),
        );
        scalar(
            &mut o,
            "iac_agui_otlp_spans_dropped_total",
            "counter",
            "Spans lost: the export queue was full or the collector failed (runs never wait for it).",
            c(m.otlp_spans_dropped.get()),
        );
    }
    head(
        &mut o,
        "iac_agui_upstream_frames_total",
        "counter",
        "Upstream stream frames by how they were read: template (checked against the burst's last text delta), delta (the text-delta reader), shallow / deep (read as JSON on the worker / on a call thread).",
    );
    for (read, v) in [
        ("template", &m.frames_template),
        ("delta", &m.frames_delta),
        ("shallow", &m.frames_shallow),
        ("deep", &m.frames_deep),
    ] {
        let _ = writeln!(
            o,
            "iac_agui_upstream_frames_total{{read=\"{read}\"}} {}",
            v.get()
        );
    }
    scalar(
        &mut o,
        "iac_agui_kernel_connections_total",
        "counter",
        "Connections to the kernel, made by the adapter's own transport (buffers sized for a stream that mostly waits).",
        c(m.lean_connects.get()),
    );
    labeled(
        &mut o,
        "iac_agui_runs_total",
        "outcome",
        "Runs ended, by outcome (success, interrupt, cancelled, client_disconnected, or the error code).",
        &m.runs,
    );
    labeled(
        &mut o,
        "iac_agui_subscriptions_total",
        "mode",
        "Re-attachments, by mode.",
        &m.subscriptions,
    );
    scalar(
        &mut o,
        "iac_agui_events_sent_total",
        "counter",
        "SSE events queued for clients.",
        c(m.events_sent.get()),
    );
    scalar(
        &mut o,
        "iac_agui_event_bytes_sent_total",
        "counter",
        "Bytes of SSE events queued for clients.",
        c(m.bytes_sent.get()),
    );
    labeled(
        &mut o,
        "iac_agui_upstream_errors_total",
        "kind",
        "Failed kernel calls, by kind.",
        &m.upstream_errors,
    );
    labeled(
        &mut o,
        "iac_agui_unavailable_responses_total",
        "reason",
        "503 answers, by reason.",
        &m.unavailable,
    );
    histogram(
        &mut o,
        "iac_agui_run_duration_seconds",
        "From admission to the terminal event.",
        &m.run_duration,
    );
    histogram(
        &mut o,
        "iac_agui_time_to_first_event_seconds",
        "From admission to the first event after RUN_STARTED.",
        &m.first_event,
    );
    scalar(
        &mut o,
        "iac_agui_heartbeats_total",
        "counter",
        "SSE heartbeat comments written.",
        c(m.heartbeats.get()),
    );
    scalar(
        &mut o,
        "iac_agui_replay_log_bytes",
        "gauge",
        "Bytes held by the replay logs.",
        m.replay_bytes.get(),
    );
    scalar(
        &mut o,
        "iac_agui_output_buffered_bytes",
        "gauge",
        "Bytes held for clients: unsent output, output queued by runs for the server loop, and large upstream events being read.",
        m.output_buffered.get(),
    );
    scalar(
        &mut o,
        "iac_agui_output_budget_bytes",
        "gauge",
        "The output budget (--output-budget); past it new streams get 503 (reason output_budget).",
        m.output_budget.get(),
    );
    scalar(
        &mut o,
        "iac_agui_reads_waiting_for_memory",
        "gauge",
        "Runs waiting for room in the output budget before reading a large upstream event.",
        m.reads_waiting.get(),
    );
    scalar(
        &mut o,
        "iac_agui_subscribers",
        "gauge",
        "Subscribers attached to runs now.",
        m.subscribers.get(),
    );
    scalar(
        &mut o,
        "iac_agui_kernel_up",
        "gauge",
        "1 when the A2A kernel answers its health check.",
        m.kernel_up.get(),
    );
    scalar(
        &mut o,
        "iac_agui_kernel_restarts_total",
        "counter",
        "Restarts of the managed kernel.",
        c(m.kernel_restarts.get()),
    );
    usage(&mut o, m);
    process::render(&mut o);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_end_with_inf() {
        let h = Histogram::new();
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_millis(700));
        h.observe(Duration::from_secs(1000));
        let mut o = String::new();
        histogram(&mut o, "x", "h", &h);
        assert!(o.contains("x_bucket{le=\"0.005\"} 1\n"));
        assert!(o.contains("x_bucket{le=\"1\"} 2\n"));
        assert!(o.contains("x_bucket{le=\"300\"} 2\n"));
        assert!(o.contains("x_bucket{le=\"+Inf\"} 3\n"));
        assert!(o.contains("x_count 3\n"));
    }

    /// Issue 58: an extra's series are in `/metrics` only in a build with it (run in both
    /// builds: `cargo test` and `cargo test --no-default-features`).
    #[test]
    fn an_extras_series_are_rendered_only_in_a_build_with_it() {
        let text = render(&crate::extras::series());
        let has = |family: &str| text.contains(&format!("# TYPE {family} "));
        for family in [
            "iac_agui_caller_quota_refusals_total",
            "iac_agui_usage_runs_total",
            "iac_agui_usage_tokens_total",
        ] {
            assert_eq!(has(family), cfg!(feature = "quotas"), "{family}");
        }
        assert_eq!(
            has("iac_agui_audit_write_failures_total"),
            cfg!(feature = "audit")
        );
        for family in [
            "iac_agui_otlp_spans_exported_total",
            "iac_agui_otlp_spans_dropped_total",
        ] {
            assert_eq!(has(family), cfg!(feature = "otlp"), "{family}");
        }
        for family in ["iac_agui_threads", "iac_agui_history_bytes"] {
            assert_eq!(has(family), cfg!(feature = "threads"), "{family}");
        }
    }

    #[test]
    fn every_sample_line_belongs_to_a_declared_family() {
        M.runs.inc("success");
        let text = render(&crate::extras::series());
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.push(rest.split(' ').next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .filter(|f| declared.iter().any(|d| d == f))
                    .unwrap_or(name);
                assert!(declared.iter().any(|d| d == family), "{line}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert!(text.contains("iac_agui_runs_total{outcome=\"success\"}"));
    }
}
