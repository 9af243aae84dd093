//! The only place that reads the time. Everything that decides by time (the server's
//! timeouts, the adapter's windows: replay retention, wind-down, disconnect grace, thread
//! eviction, event timestamps) takes a [`Clock`], so tests can move time by hand.
//! `clippy.toml` forbids `Instant::now`/`SystemTime::now` everywhere else.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Monotonic time for deadlines, wall time for timestamps.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn wall(&self) -> SystemTime;

    /// Unix time in milliseconds (event timestamps, interrupt expiry).
    fn now_ms(&self) -> u64 {
        self.wall()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The real clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(
        clippy::disallowed_methods,
        reason = "the clock module is where time is read"
    )]
    fn now(&self) -> Instant {
        Instant::now()
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "the clock module is where time is read"
    )]
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to (tests). Both of its times move together.
#[derive(Debug)]
pub struct ManualClock {
    origin: (Instant, SystemTime),
    offset: Mutex<Duration>,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock {
            origin: (SystemClock.now(), SystemClock.wall()),
            offset: Mutex::new(Duration::ZERO),
        }
    }

    /// A clock whose wall time starts at `ms` after the Unix epoch.
    pub fn at_ms(ms: u64) -> ManualClock {
        ManualClock {
            origin: (SystemClock.now(), UNIX_EPOCH + Duration::from_millis(ms)),
            offset: Mutex::new(Duration::ZERO),
        }
    }

    pub fn advance(&self, d: Duration) {
        *crate::sync::lock(&self.offset) += d;
    }

    fn offset(&self) -> Duration {
        *crate::sync::lock(&self.offset)
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin.0 + self.offset()
    }

    fn wall(&self) -> SystemTime {
        self.origin.1 + self.offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_both_times_only_when_told() {
        let c = ManualClock::at_ms(1_000);
        let (t0, w0) = (c.now(), c.now_ms());
        assert_eq!(w0, 1_000);
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_millis(250));
        assert_eq!(c.now() - t0, Duration::from_millis(250));
        assert_eq!(c.now_ms(), 1_250);
    }
}
