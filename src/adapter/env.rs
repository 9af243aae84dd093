//! Time and identifiers for the adapter's decisions, injectable so projection, admission and
//! resume are deterministic under test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::clock::{Clock, ManualClock, SystemClock};

/// The adapter's clock (its windows and event timestamps) and id source.
pub trait Env: Clock {
    /// A random UUIDv4 (execution ids).
    fn uuid4(&self) -> String;
    /// 32 random hex digits (generated message and tool ids).
    fn hex32(&self) -> String;
}

/// The real clock and the OS random source.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEnv;

impl Clock for SystemEnv {
    fn now(&self) -> Instant {
        SystemClock.now()
    }
    fn wall(&self) -> SystemTime {
        SystemClock.wall()
    }
}

impl Env for SystemEnv {
    fn uuid4(&self) -> String {
        crate::ids::uuid4()
    }
    fn hex32(&self) -> String {
        crate::ids::hex32()
    }
}

/// A clock that moves only when told and counting ids, for tests. The wall time is
/// `now` (ms); the monotonic time moves with it.
#[derive(Debug, Default)]
pub struct TestEnv {
    pub(crate) now: AtomicU64,
    counter: AtomicU64,
    mono: ManualClock,
    start_ms: u64,
}

impl TestEnv {
    pub fn new(now_ms: u64) -> TestEnv {
        TestEnv {
            now: AtomicU64::new(now_ms),
            counter: AtomicU64::new(0),
            mono: ManualClock::new(),
            start_ms: now_ms,
        }
    }

    /// Move both times forward.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for TestEnv {
    fn now(&self) -> Instant {
        let ms = self
            .now
            .load(Ordering::SeqCst)
            .saturating_sub(self.start_ms);
        self.mono.now() + Duration::from_millis(ms)
    }
    fn wall(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now.load(Ordering::SeqCst))
    }
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl Env for TestEnv {
    fn uuid4(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        format!("00000000-0000-4000-8000-{n:012}")
    }
    fn hex32(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        format!("{n:032x}")
    }
}
