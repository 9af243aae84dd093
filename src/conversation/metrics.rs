//! The stored conversations' series of `/metrics`: how many threads have one, their bytes,
//! and the writes that failed. Kept as they change (the files' writes), from the state
//! directory's census at start-up.

use crate::metrics::{Counter, Gauge, scalar};

pub(crate) struct Series {
    /// Threads with a stored conversation (every caller's), and the bytes of those files.
    pub(crate) threads: Gauge,
    pub(crate) bytes: Gauge,
    pub(crate) write_failures: Counter,
}

pub(crate) static SERIES: Series = Series {
    threads: Gauge::new(0),
    bytes: Gauge::new(0),
    write_failures: Counter::new(),
};

impl Series {
    pub(crate) fn render(&self, o: &mut String) {
        scalar(
            o,
            "iac_agui_threads",
            "gauge",
            "Threads with a stored conversation (every caller's).",
            self.threads.get(),
        );
        scalar(
            o,
            "iac_agui_history_bytes",
            "gauge",
            "Bytes of the stored conversations.",
            self.bytes.get(),
        );
        scalar(
            o,
            "iac_agui_history_write_failures_total",
            "counter",
            "Conversation writes that failed (the run then ended with STATE_PERSISTENCE_FAILED).",
            self.write_failures.get() as i64,
        );
    }
}
