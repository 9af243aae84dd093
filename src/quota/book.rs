//! The books, pure: each caller's place in its quotas (concurrent runs; admissions per
//! minute, a token bucket holding one minute's worth, so a caller may burst up to the rate
//! and then goes at it), and its usage per UTC day, kept in memory and written to the
//! caller's directory (`~usage.json`) by the chores thread (`Quotas::flush`), so a run's end
//! costs no fsync more; a crash loses at most one flush period of it. The clock is a
//! millisecond count passed in, the files a trait.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::Limits;
use crate::agui::events::RunUsage;
use crate::principal::Caller;
use crate::sync::lock;

/// `Retry-After` of a `429 RATE_LIMITED` for a caller's concurrent runs (a run's end cannot
/// be foreseen; a short wait, as for a busy server).
const RUNS_RETRY_AFTER_S: u64 = 5;

impl Limits {
    fn none(&self) -> bool {
        self.max_runs.is_none() && self.rate_per_min.is_none()
    }
}

/// Which quota refused, and when to try again (seconds, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Runs { retry_after: u64 },
    Rate { retry_after: u64 },
}

impl Over {
    pub fn retry_after(&self) -> u64 {
        match *self {
            Over::Runs { retry_after } | Over::Rate { retry_after } => retry_after,
        }
    }

    /// The `/metrics` label.
    pub fn label(&self) -> &'static str {
        match self {
            Over::Runs { .. } => "runs",
            Over::Rate { .. } => "rate",
        }
    }
}

/// A run's concurrent-run quota is held until its worker drops this (the run ended, or its
/// worker panicked: the unwind drops it too); the drop counts the run in the caller's usage,
/// with what `Ticket::used` said it used.
#[derive(Debug)]
pub struct Ticket {
    quotas: Arc<Quotas>,
    caller: Caller,
    used: RunUsage,
    ended_ms: Option<u64>,
    /// The run was driven: it counts in usage. An admission refused after the quotas were
    /// taken (thread busy, a state write failed) gives back its token and counts nothing.
    started: bool,
    /// The milli-tokens taken from the caller's bucket.
    took: u64,
    began_ms: u64,
}

impl Ticket {
    /// The run is being driven (its worker has it).
    pub fn start(&mut self) {
        self.started = true;
    }

    /// The run ended at `now_ms` having used `used` (its terminal event's usage).
    pub fn used(&mut self, now_ms: u64, used: RunUsage) {
        self.used = used;
        self.ended_ms = Some(now_ms);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(e) = lock(&self.quotas.book).callers.get_mut(&self.caller) {
            e.running = e.running.saturating_sub(1);
            if !self.started {
                e.tokens = e.tokens.saturating_add(self.took);
            }
        }
        if !self.started {
            return;
        }
        // A run that ended without its terminal path (a panic) counts on the day it began.
        let ms = self.ended_ms.unwrap_or(self.began_ms);
        self.quotas.record(&self.caller, &utc_day(ms), self.used);
    }
}

/// A caller's totals of one UTC day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Day {
    pub runs: u64,
    pub used: RunUsage,
}

/// Milli-tokens of a full bucket for `rate` admissions per minute.
fn full(rate: u32) -> u64 {
    u64::from(rate) * 1000
}

#[derive(Debug)]
struct Entry {
    running: u32,
    /// Milli-tokens in the bucket as of `at_ms`.
    tokens: u64,
    at_ms: u64,
}

impl Entry {
    /// The bucket refilled to `now_ms` for `rate` per minute. Only the time that became
    /// whole milli-tokens is used up, so frequent asks lose nothing to rounding.
    fn refill(&mut self, rate: u32, now_ms: u64) {
        let rate128 = u128::from(rate.max(1));
        let elapsed = u128::from(now_ms.saturating_sub(self.at_ms));
        // rate per minute = rate × 1000 milli-tokens per 60 000 ms.
        let add = elapsed * rate128 / 60;
        let room = u128::from(full(rate).saturating_sub(self.tokens));
        if add >= room {
            self.tokens = full(rate);
            self.at_ms = now_ms;
        } else {
            self.tokens += add as u64;
            self.at_ms += (add * 60 / rate128) as u64;
        }
    }
}

#[derive(Debug, Default)]
struct Book {
    callers: HashMap<Caller, Entry>,
}

/// Callers' usage: loaded from their file on first use, written back when changed.
#[derive(Debug, Default)]
struct UsageBook {
    callers: HashMap<Caller, Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// `YYYY-MM-DD` → totals; the oldest days go past `DAYS_KEPT`.
    days: BTreeMap<String, Day>,
    dirty: bool,
}

/// Days of usage kept per caller.
pub const DAYS_KEPT: usize = 400;
/// Entries without a running run are dropped past this many callers (their buckets are
/// full again by the time they come back, or nearly: see `Quotas::prune`).
const MAX_IDLE_ENTRIES: usize = 4096;

/// Where usage is kept between processes (the state directory's `FileStore`).
pub trait UsageFiles: Send + Sync {
    fn load_usage(&self, caller: &Caller) -> std::io::Result<Option<Vec<u8>>>;
    fn save_usage(&self, caller: &Caller, bytes: &[u8]) -> std::io::Result<()>;
}

/// The quotas and the usage of every caller.
pub struct Quotas {
    defaults: Limits,
    book: Mutex<Book>,
    usage: Mutex<UsageBook>,
    files: Option<Arc<dyn UsageFiles>>,
    /// Principals come from the tokens file: a bounded set, so `/metrics` may name them.
    named_metrics: bool,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quotas")
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl Default for Quotas {
    fn default() -> Quotas {
        Quotas::new(Limits::default(), None)
    }
}

impl Quotas {
    pub fn new(defaults: Limits, files: Option<Arc<dyn UsageFiles>>) -> Quotas {
        Quotas {
            defaults,
            book: Mutex::default(),
            usage: Mutex::default(),
            files,
            named_metrics: false,
        }
    }

    /// Name principals in `/metrics` (only with a tokens file: its names are a bounded set).
    pub fn with_named_metrics(mut self, on: bool) -> Quotas {
        self.named_metrics = on;
        self
    }

    pub fn defaults(&self) -> Limits {
        self.defaults
    }

    /// Admit one run of `caller` under `limits` (the options with the caller's own over
    /// them) at `now_ms`: a ticket to hold for the run's life, or the quota it is over.
    /// Nothing is taken when it is refused.
    pub fn admit(
        self: &Arc<Self>,
        caller: &Caller,
        limits: Limits,
        now_ms: u64,
    ) -> Result<Ticket, Over> {
        let mut book = lock(&self.book);
        if book.callers.len() > MAX_IDLE_ENTRIES {
            prune(&mut book, limits, now_ms);
        }
        if limits.none() {
            // Still counted, so that a limit given later by a reload sees the runs.
            book.callers
                .entry(caller.clone())
                .or_insert(Entry {
                    running: 0,
                    tokens: 0,
                    at_ms: now_ms,
                })
                .running += 1;
            let mut t = self.ticket(caller);
            t.began_ms = now_ms;
            return Ok(t);
        }
        let e = book.callers.entry(caller.clone()).or_insert(Entry {
            running: 0,
            tokens: limits.rate_per_min.map_or(0, full),
            at_ms: now_ms,
        });
        if let Some(max) = limits.max_runs
            && e.running >= max
        {
            // A run's end is not foreseeable: a short wait, as for a busy server.
            return Err(Over::Runs {
                retry_after: RUNS_RETRY_AFTER_S,
            });
        }
        if let Some(rate) = limits.rate_per_min {
            e.refill(rate, now_ms);
            if e.tokens < 1000 {
                let missing = u128::from(1000 - e.tokens);
                // ms until the bucket holds one token again: missing × 60 / rate.
                let ms = (missing * 60).div_ceil(u128::from(rate.max(1)));
                let secs = u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX).max(1);
                return Err(Over::Rate { retry_after: secs });
            }
            e.tokens -= 1000;
        }
        e.running += 1;
        drop(book);
        let mut t = self.ticket(caller);
        t.began_ms = now_ms;
        t.took = if limits.rate_per_min.is_some() {
            1000
        } else {
            0
        };
        Ok(t)
    }

    fn ticket(self: &Arc<Self>, caller: &Caller) -> Ticket {
        Ticket {
            quotas: self.clone(),
            caller: caller.clone(),
            used: RunUsage::default(),
            ended_ms: None,
            started: false,
            took: 0,
            began_ms: 0,
        }
    }

    /// Runs of `caller` going on now.
    pub fn running(&self, caller: &Caller) -> u32 {
        lock(&self.book)
            .callers
            .get(caller)
            .map_or(0, |e| e.running)
    }

    /// A run of `caller` ended on `day` (`YYYY-MM-DD`, UTC) having used `used`.
    pub fn record(&self, caller: &Caller, day: &str, used: RunUsage) {
        let mut usage = lock(&self.usage);
        let kept = self.kept(&mut usage, caller);
        let d = kept.days.entry(day.to_string()).or_default();
        d.runs += 1;
        d.used.input_tokens += used.input_tokens;
        d.used.output_tokens += used.output_tokens;
        d.used.total_tokens += used.total_tokens;
        d.used.cached_input_tokens += used.cached_input_tokens;
        while kept.days.len() > DAYS_KEPT {
            kept.days.pop_first();
        }
        kept.dirty = true;
        let totals = used;
        drop(usage);
        crate::metrics::M.usage_runs.inc();
        crate::metrics::M
            .usage_input_tokens
            .add(totals.input_tokens);
        crate::metrics::M
            .usage_output_tokens
            .add(totals.output_tokens);
        if self.named_metrics
            && let Caller::Named(name) = caller
        {
            let mut by = lock(&crate::metrics::M.usage_by_principal);
            let v = by.entry(name.to_string()).or_insert([0; 3]);
            v[0] += 1;
            v[1] += totals.input_tokens;
            v[2] += totals.output_tokens;
        }
    }

    /// `caller`'s days, oldest first, the last `days` of them.
    pub fn days(&self, caller: &Caller, days: usize) -> Vec<(String, Day)> {
        let mut usage = lock(&self.usage);
        let kept = self.kept(&mut usage, caller);
        let skip = kept.days.len().saturating_sub(days);
        kept.days
            .iter()
            .skip(skip)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Every caller's totals over the days kept (the `/metrics` series per principal).
    pub fn totals(&self) -> Vec<(Caller, Day)> {
        let usage = lock(&self.usage);
        let mut out: Vec<(Caller, Day)> = usage
            .callers
            .iter()
            .map(|(c, k)| (c.clone(), sum(k.days.values())))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Write every changed caller's usage; what fails stays changed for the next flush.
    pub fn flush(&self) {
        let Some(files) = &self.files else { return };
        let dirty: Vec<(Caller, Vec<u8>)> = {
            let mut usage = lock(&self.usage);
            usage
                .callers
                .iter_mut()
                .filter(|(_, k)| k.dirty)
                .map(|(c, k)| {
                    k.dirty = false;
                    (c.clone(), encode(&k.days))
                })
                .collect()
        };
        for (caller, bytes) in dirty {
            if let Err(e) = files.save_usage(&caller, &bytes) {
                log::warn!("usage of {}: not written ({e}); tried again", who(&caller));
                if let Some(k) = lock(&self.usage).callers.get_mut(&caller) {
                    k.dirty = true;
                }
            }
        }
    }

    /// The caller's kept usage, read from its file the first time.
    fn kept<'u>(&self, usage: &'u mut UsageBook, caller: &Caller) -> &'u mut Kept {
        usage.callers.entry(caller.clone()).or_insert_with(|| {
            let days = match self.files.as_ref().map(|f| f.load_usage(caller)) {
                None | Some(Ok(None)) => BTreeMap::new(),
                Some(Ok(Some(bytes))) => decode(&bytes).unwrap_or_else(|| {
                    log::warn!(
                        "usage of {}: the file cannot be read; counting starts again",
                        who(caller)
                    );
                    BTreeMap::new()
                }),
                Some(Err(e)) => {
                    log::warn!(
                        "usage of {}: not read ({e}); counting starts again",
                        who(caller)
                    );
                    BTreeMap::new()
                }
            };
            Kept { days, dirty: false }
        })
    }
}

/// Drop the entries of callers with no running run whose bucket is full by now.
fn prune(book: &mut Book, limits: Limits, now_ms: u64) {
    book.callers.retain(|_, e| {
        if e.running > 0 {
            return true;
        }
        match limits.rate_per_min {
            Some(rate) => {
                e.refill(rate, now_ms);
                e.tokens < full(rate)
            }
            None => false,
        }
    });
}

fn who(caller: &Caller) -> String {
    crate::logging::escape(caller.name().unwrap_or("shared")).to_string()
}

fn sum<'a>(days: impl Iterator<Item = &'a Day>) -> Day {
    days.fold(Day::default(), |mut a, d| {
        a.runs += d.runs;
        a.used.input_tokens += d.used.input_tokens;
        a.used.output_tokens += d.used.output_tokens;
        a.used.total_tokens += d.used.total_tokens;
        a.used.cached_input_tokens += d.used.cached_input_tokens;
        a
    })
}

/// One day as JSON (the file's and `GET /usage`'s shape).
pub fn day_json(date: &str, d: &Day) -> Value {
    json!({
        "date": date,
        "runs": d.runs,
        "inputTokens": d.used.input_tokens,
        "outputTokens": d.used.output_tokens,
        "totalTokens": d.used.total_tokens,
        "cachedInputTokens": d.used.cached_input_tokens,
    })
}

/// The totals of `days` as JSON.
pub fn total_json(days: &[(String, Day)]) -> Value {
    let t = sum(days.iter().map(|(_, d)| d));
    json!({
        "runs": t.runs,
        "inputTokens": t.used.input_tokens,
        "outputTokens": t.used.output_tokens,
        "totalTokens": t.used.total_tokens,
        "cachedInputTokens": t.used.cached_input_tokens,
    })
}

fn encode(days: &BTreeMap<String, Day>) -> Vec<u8> {
    let list: Vec<Value> = days.iter().map(|(k, d)| day_json(k, d)).collect();
    serde_json::to_vec(&json!({"schemaVersion": 1, "days": list})).unwrap_or_default()
}

/// A usage file's days; `None` when it is not one this build wrote.
fn decode(bytes: &[u8]) -> Option<BTreeMap<String, Day>> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    if v.get("schemaVersion")?.as_u64()? != 1 {
        return None;
    }
    let mut out = BTreeMap::new();
    for d in v.get("days")?.as_array()? {
        let date = d.get("date")?.as_str()?;
        if !valid_date(date) {
            return None;
        }
        let n = |k: &str| d.get(k).and_then(Value::as_u64);
        out.insert(
            date.to_string(),
            Day {
                runs: n("runs")?,
                used: RunUsage {
                    input_tokens: n("inputTokens")?,
                    output_tokens: n("outputTokens")?,
                    total_tokens: n("totalTokens")?,
                    cached_input_tokens: n("cachedInputTokens")?,
                },
            },
        );
    }
    while out.len() > DAYS_KEPT {
        out.pop_first();
    }
    Some(out)
}

fn valid_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// The UTC day (`YYYY-MM-DD`) of a Unix time in milliseconds.
pub fn utc_day(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let s = crate::rfc3339::format_millis(t);
    s.get(..10).unwrap_or("1970-01-01").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Caller {
        Caller::named(b"alice").unwrap()
    }

    fn runs(n: u32) -> Limits {
        Limits {
            max_runs: Some(n),
            rate_per_min: None,
        }
    }

    fn rate(n: u32) -> Limits {
        Limits {
            max_runs: None,
            rate_per_min: Some(n),
        }
    }

    #[test]
    fn concurrent_runs_are_refused_past_the_limit_until_one_ends() {
        let q = Arc::new(Quotas::default());
        let a = q.admit(&alice(), runs(2), 0).unwrap();
        let _b = q.admit(&alice(), runs(2), 0).unwrap();
        assert!(matches!(
            q.admit(&alice(), runs(2), 0),
            Err(Over::Runs { .. })
        ));
        // Another caller is not held to alice's runs.
        assert!(q.admit(&Caller::Shared, runs(2), 0).is_ok());
        drop(a);
        assert!(q.admit(&alice(), runs(2), 0).is_ok());
    }

    #[test]
    fn a_burst_of_the_rate_then_one_admission_per_refill_with_its_retry_after() {
        let q = Arc::new(Quotas::default());
        for _ in 0..3 {
            q.admit(&alice(), rate(3), 1_000).unwrap().start();
        }
        // 3 per minute: the next token is 20 s away.
        assert_eq!(
            q.admit(&alice(), rate(3), 1_000).unwrap_err(),
            Over::Rate { retry_after: 20 }
        );
        assert_eq!(
            q.admit(&alice(), rate(3), 11_000).unwrap_err(),
            Over::Rate { retry_after: 10 }
        );
        q.admit(&alice(), rate(3), 21_000).unwrap().start();
        assert!(q.admit(&alice(), rate(3), 21_001).is_err());
        // A refusal takes nothing: the bucket refills as if it had not been asked.
        assert!(q.admit(&alice(), rate(3), 41_000).is_ok());
    }

    #[test]
    fn a_refused_admission_holds_no_run() {
        let q = Arc::new(Quotas::default());
        let l = Limits {
            max_runs: Some(5),
            rate_per_min: Some(1),
        };
        let _t = q.admit(&alice(), l, 0).unwrap();
        assert!(q.admit(&alice(), l, 0).is_err());
        assert_eq!(q.running(&alice()), 1);
    }

    #[test]
    fn an_admission_refused_after_the_quotas_gives_its_token_back_and_counts_no_usage() {
        let q = Arc::new(Quotas::default());
        drop(q.admit(&alice(), rate(1), 0).unwrap()); // never started: a busy thread
        let mut t = q.admit(&alice(), rate(1), 0).unwrap();
        t.start();
        drop(t);
        assert!(
            q.admit(&alice(), rate(1), 0).is_err(),
            "the driven one took the token"
        );
        let days = q.days(&alice(), 31);
        assert_eq!(days.iter().map(|(_, d)| d.runs).sum::<u64>(), 1);
    }

    #[test]
    fn the_callers_own_limits_win_over_the_options() {
        let opts = Limits {
            max_runs: Some(4),
            rate_per_min: Some(60),
        };
        let own = Limits {
            max_runs: Some(1),
            rate_per_min: None,
        };
        assert_eq!(
            opts.over(own),
            Limits {
                max_runs: Some(1),
                rate_per_min: Some(60)
            }
        );
    }

    #[test]
    fn many_idle_callers_are_pruned_and_running_ones_kept() {
        let q = Arc::new(Quotas::default());
        let held = q.admit(&alice(), runs(1), 0).unwrap();
        for i in 0..(MAX_IDLE_ENTRIES + 10) {
            let c = Caller::named(format!("c{i}").as_bytes()).unwrap();
            drop(q.admit(&c, runs(1), 0).unwrap());
        }
        assert!(lock(&q.book).callers.len() <= MAX_IDLE_ENTRIES + 2);
        assert!(
            q.admit(&alice(), runs(1), 0).is_err(),
            "alice's run is kept"
        );
        drop(held);
    }

    struct Mem(Mutex<HashMap<Caller, Vec<u8>>>);

    impl UsageFiles for Mem {
        fn load_usage(&self, caller: &Caller) -> std::io::Result<Option<Vec<u8>>> {
            Ok(lock(&self.0).get(caller).cloned())
        }
        fn save_usage(&self, caller: &Caller, bytes: &[u8]) -> std::io::Result<()> {
            lock(&self.0).insert(caller.clone(), bytes.to_vec());
            Ok(())
        }
    }

    #[test]
    fn usage_is_summed_per_caller_and_day_and_kept_across_a_restart() {
        let files = Arc::new(Mem(Mutex::default()));
        let q = Quotas::new(Limits::default(), Some(files.clone()));
        let used = RunUsage {
            input_tokens: 10,
            output_tokens: 3,
            total_tokens: 13,
            cached_input_tokens: 1,
        };
        q.record(&alice(), "2026-12-04", used);
        q.record(&alice(), "2026-12-05", used);
        q.record(&alice(), "2026-12-05", used);
        q.record(&Caller::Shared, "2026-12-05", used);
        q.flush();
        let again = Quotas::new(Limits::default(), Some(files));
        let days = again.days(&alice(), 31);
        assert_eq!(days.len(), 2);
        assert_eq!(days[1].0, "2026-12-05");
        assert_eq!(days[1].1.runs, 2);
        assert_eq!(days[1].1.used.input_tokens, 20);
        assert_eq!(total_json(&days)["totalTokens"], 39);
        assert_eq!(again.days(&Caller::Shared, 31)[0].1.runs, 1);
        // The last day only.
        assert_eq!(again.days(&alice(), 1).len(), 1);
    }

    #[test]
    fn a_damaged_usage_file_starts_counting_again() {
        let files = Arc::new(Mem(Mutex::default()));
        lock(&files.0).insert(
            alice(),
            b"{\"schemaVersion\":1,\"days\":[{\"date\":\"x\"}]}".to_vec(),
        );
        let q = Quotas::new(Limits::default(), Some(files));
        assert!(q.days(&alice(), 31).is_empty());
    }

    #[test]
    fn utc_days_are_dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(1_796_428_800_000), "2026-12-05");
    }
}
