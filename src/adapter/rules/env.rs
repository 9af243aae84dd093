//! Time and identifiers for the adapter's decisions, injectable so projection, admission and
//! resume are deterministic under test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

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

/// A fixed clock (wall time `now_ms` at the start) and counting ids, for tests.
#[derive(Debug)]
pub struct TestEnv {
    clock: ManualClock,
    counter: AtomicU64,
}

impl TestEnv {
    pub fn new(now_ms: u64) -> TestEnv {
        TestEnv {
            clock: ManualClock::at_ms(now_ms),
            counter: AtomicU64::new(0),
        }
    }
}

impl Clock for TestEnv {
    fn now(&self) -> Instant {
        self.clock.now()
    }
    fn wall(&self) -> SystemTime {
        self.clock.wall()
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
