//! The standard `process_*` series (as Prometheus client libraries export them), read from
//! `/proc/self`: CPU seconds, resident and virtual memory, open and maximum file
//! descriptors, start time. A file that cannot be read leaves its series out. They are read
//! by a chore beside the loop (`sampler`), never on it: listing `/proc/self/fd` walks one
//! entry per connection, and the loop does no file I/O (`chores.rs`).

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use crate::sync::lock;

/// The last sample, rendered; `/metrics` copies it.
static SAMPLE: Mutex<String> = Mutex::new(String::new());

/// How often the sample is taken.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Take a sample now, then every `SAMPLE_EVERY` on the chores' thread.
pub(crate) fn sampler() -> crate::chores::Chore {
    refresh();
    crate::chores::Chore::every(SAMPLE_EVERY, || {
        refresh();
        true
    })
}

/// Built first, then swapped in: the lock is held for a move, never for the reads.
fn refresh() {
    let mut out = String::new();
    Process::read().render(&mut out);
    *lock(&SAMPLE) = out;
}

/// The last sample's series (none before the first sample).
pub(crate) fn render(out: &mut String) {
    out.push_str(&lock(&SAMPLE));
}

/// `/proc` reports times in clock ticks of `USER_HZ`, 100 on every Linux ABI.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default, PartialEq)]
pub(crate) struct Process {
    cpu_seconds: Option<f64>,
    start_time_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

/// `utime + stime` in seconds and the start time in ticks after boot, from `/proc/self/stat`
/// (the command name in parentheses may hold spaces and parentheses: fields follow the last `)`).
fn from_stat(stat: &str) -> (Option<f64>, Option<u64>) {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return (None, None);
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    let cpu = num(11)
        .zip(num(12))
        .map(|(u, s)| (u + s) as f64 / TICKS_PER_SECOND);
    (cpu, num(19))
}

/// A `Key:   N kB` line of `/proc/self/status`, in bytes.
fn status_bytes(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// `btime` of `/proc/stat`: the boot time, Unix seconds.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

impl Process {
    pub(crate) fn parse(
        stat: &str,
        status: &str,
        system_stat: &str,
        limits: &str,
        open_fds: Option<u64>,
    ) -> Process {
        let (cpu_seconds, start_ticks) = from_stat(stat);
        Process {
            cpu_seconds,
            start_time_seconds: boot_time(system_stat)
                .zip(start_ticks)
                .map(|(boot, t)| boot as f64 + t as f64 / TICKS_PER_SECOND),
            resident_bytes: status_bytes(status, "VmRSS:"),
            virtual_bytes: status_bytes(status, "VmSize:"),
            open_fds,
            max_fds: max_open_files(limits),
        }
    }

    pub(crate) fn read() -> Process {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64);
        Process::parse(
            &read("/proc/self/stat"),
            &read("/proc/self/status"),
            &read("/proc/stat"),
            &read("/proc/self/limits"),
            fds,
        )
    }

    pub(crate) fn render(&self, out: &mut String) {
        let mut series = |name: &str, kind: &str, help: &str, v: Option<String>| {
            if let Some(v) = v {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
                );
            }
        };
        let int = |v: Option<u64>| v.map(|v| v.to_string());
        let float = |v: Option<f64>| v.map(|v| format!("{v:.2}"));
        series(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            float(self.cpu_seconds),
        );
        series(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            int(self.open_fds),
        );
        series(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            int(self.max_fds),
        );
        series(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            int(self.virtual_bytes),
        );
        series(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            int(self.resident_bytes),
        );
        series(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            float(self.start_time_seconds),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (iac agui) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 \
                        20 0 12 0 123456 30000000 2000 18446744073709551615";

    #[test]
    fn proc_files_become_the_standard_series() {
        let status = "Name:\tiac-agui\nVmSize:\t   29296 kB\nVmRSS:\t    8000 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let p = Process::parse(
            STAT,
            status,
            "cpu 1 2 3\nbtime 1700000000\n",
            limits,
            Some(9),
        );
        assert_eq!(p.cpu_seconds, Some(3.25));
        assert!((p.start_time_seconds.unwrap() - 1_700_001_234.56).abs() < 1e-3);
        assert_eq!(p.resident_bytes, Some(8000 * 1024));
        assert_eq!(p.virtual_bytes, Some(29296 * 1024));
        assert_eq!(p.max_fds, Some(1024));
        let mut out = String::new();
        p.render(&mut out);
        for line in [
            "process_cpu_seconds_total 3.25",
            "process_open_fds 9",
            "process_max_fds 1024",
            "process_resident_memory_bytes 8192000",
            "process_virtual_memory_bytes 29999104",
            "process_start_time_seconds 1700001234.56",
            "# TYPE process_cpu_seconds_total counter",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }

    #[test]
    fn unreadable_files_leave_their_series_out() {
        let p = Process::parse("garbage", "", "", "", None);
        assert_eq!(p, Process::default());
        let mut out = String::new();
        p.render(&mut out);
        assert!(out.is_empty());
        let mut out = String::new();
        Process::read().render(&mut out);
        assert!(out.contains("process_resident_memory_bytes "), "{out}");
        assert!(out.contains("process_open_fds "), "{out}");
        // `/metrics` shows the sampler's last sample.
        let _ = sampler();
        let mut shown = String::new();
        render(&mut shown);
        assert!(shown.contains("process_open_fds "), "{shown}");
    }
}
