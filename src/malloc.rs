//! glibc malloc tuning, so that memory a burst of large events used goes back to the system.
//!
//! By default glibc raises its mmap threshold to the size of the largest block freed (up to
//! 32 MiB): after one multi-MiB event every later large buffer comes from the heap arenas,
//! and freed arena memory is not returned. Measured after a burst of `big 10 10` and `flood
//! 100000` runs (the adapter alone, logs expired): RSS 64 MiB after the burst, 112 MiB at
//! its peak; with `mmap_threshold=65536` (which also pins it) and `trim_threshold=131072`:
//! 14 MiB after, 26 MiB at the peak. `tcache_max=64`: a thread's own cache of freed chunks
//! keeps only those of 64 B or less. Each run's worker blocks for its stream's life holding
//! up to seven freed chunks of every size class it used (request parse, state writes,
//! growing buffers): 12.7 KiB of resident heap per open stream at 1 000 streams, which
//! `make bench` no longer shows with this setting, for no measurable CPU per event (the hot
//! allocations of the event path are the small ones; docs/performance.md). Tunables are read
//! only at process start, and std has no safe `mallopt`: the server re-executes itself once
//! with them set (`execve` keeps the pid).
//! Measured again in issue 37 (shipped build, K = 1 000): 23.5 KiB per open stream with the
//! tunables, 42.3 without (heap 11.5 against 30.4 KiB). `tests/it/tuning.rs` fails when the
//! built binary serves without them (its `/proc/PID/environ`).
//! Settings already in `GLIBC_TUNABLES` come after ours, so they win. The managed kernel gets
//! the environment's original value back.

use std::ffi::OsString;

pub const TUNABLES: &str = "glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=131072:glibc.malloc.tcache_max=64";
/// Set on the re-executed process: the original `GLIBC_TUNABLES` (maybe empty).
pub const ORIGINAL: &str = "IAC_AGUI_ORIGINAL_GLIBC_TUNABLES";

/// Re-execute this process once with the tunables; returns when that is not possible (no
/// `/proc` for `current_exe`, an exec failure) or already done.
pub(crate) fn tune_once(env: impl Fn(&str) -> Option<OsString>) {
    use std::os::unix::process::CommandExt;
    if env(ORIGINAL).is_some() {
        return;
    }
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    let original = env("GLIBC_TUNABLES").unwrap_or_default();
    let mut tunables = OsString::from(TUNABLES);
    if !original.is_empty() {
        tunables.push(":");
        tunables.push(&original);
    }
    let err = std::process::Command::new(me)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", tunables)
        .env(ORIGINAL, &original)
        .exec();
    // Not fatal: the server runs as well, only with glibc's default thresholds.
    eprintln!("iac-agui: cannot re-execute with malloc tunables ({err}); going on without");
}

/// Give a child process the environment's own `GLIBC_TUNABLES` (not this process's).
pub(crate) fn restore_for_child(
    cmd: &mut std::process::Command,
    env: impl Fn(&str) -> Option<OsString>,
) {
    let Some(original) = env(ORIGINAL) else {
        return;
    };
    cmd.env_remove(ORIGINAL);
    if original.is_empty() {
        cmd.env_remove("GLIBC_TUNABLES");
    } else {
        cmd.env("GLIBC_TUNABLES", original);
    }
}
