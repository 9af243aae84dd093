//! Time and identifiers for the adapter's decisions, injectable so projection, admission and
//! resume are deterministic under test.

use std::sync::atomic::{AtomicU64, Ordering};

pub trait Env: Send + Sync {
    /// Unix time in milliseconds (event timestamps, interrupt expiry).
    fn now_ms(&self) -> u64;
    /// A random UUIDv4 (execution ids).
    fn uuid4(&self) -> String;
    /// 32 random hex digits (generated message and tool ids).
    fn hex32(&self) -> String;
}

/// The real clock and the OS random source.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEnv;

impl Env for SystemEnv {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
    fn uuid4(&self) -> String {
        crate::ids::uuid4()
    }
    fn hex32(&self) -> String {
        crate::ids::hex32()
    }
}

/// A fixed clock and counting ids for tests.
#[derive(Debug, Default)]
pub struct TestEnv {
    pub(crate) now: AtomicU64,
    counter: AtomicU64,
}

impl TestEnv {
    pub fn new(now_ms: u64) -> TestEnv {
        TestEnv {
            now: AtomicU64::new(now_ms),
            counter: AtomicU64::new(0),
        }
    }
}

impl Env for TestEnv {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
    fn uuid4(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        format!("00000000-0000-4000-8000-{n:012}")
    }
    fn hex32(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        format!("{n:032x}")
    }
}
