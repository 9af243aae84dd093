//! Process signals, from the first moment of `serve` to the exit.
//!
//! - SIGTERM, SIGINT, SIGHUP, SIGQUIT: drain (a second one stops at once) — except SIGHUP
//!   with `--auth-tokens-file` (feature `identity`), which re-reads that file
//!   (`Target::on_reload`). HUP and QUIT are handled like TERM so that no signal a
//!   supervisor or a closing terminal sends can end the process without stopping the
//!   managed kernel; QUIT writes no core dump.
//! - SIGUSR1, SIGUSR2: ignored (logged), never fatal.
//! - During start-up (before the server listens) a stop signal ends the kernel's start-up
//!   wait: the child is stopped and the process exits 0.
//! - SIGKILL cannot be caught: the managed kernel gets a parent-death signal instead
//!   (`kernel_child_main`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};

use crate::server::ShutdownHandle;
use crate::sync::lock;

/// A stop signal arrived (also before the server existed).
static STOP: AtomicBool = AtomicBool::new(false);

/// Whether a stop signal has arrived.
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// What SIGHUP does instead of a drain.
type Reload = Box<dyn Fn() + Send>;

/// Where stop signals go once the server runs.
#[derive(Clone, Default)]
pub(crate) struct Target(
    Arc<Mutex<Option<ShutdownHandle>>>,
    Arc<Mutex<Option<Reload>>>,
);

impl Target {
    /// SIGHUP calls `reload` from now on instead of draining (an extra's: the tokens file).
    #[cfg_attr(
        not(feature = "identity"),
        allow(dead_code, reason = "the identity extra's")
    )]
    pub(crate) fn on_reload(&self, reload: Reload) {
        *lock(&self.1) = Some(reload);
    }

    /// Route stop signals to `handle` from now on; one that came earlier stops it at once.
    pub(crate) fn set(&self, handle: ShutdownHandle) {
        *lock(&self.0) = Some(handle.clone());
        if stop_requested() {
            handle.shutdown();
        }
    }
}

/// Install the handlers and their thread. Call first thing in `serve`.
pub(crate) fn install() -> std::io::Result<Target> {
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2])?;
    let target = Target::default();
    let t = target.clone();
    std::thread::Builder::new()
        .name("iac-agui-signals".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut stops = 0;
            for sig in signals.forever() {
                if sig == SIGUSR1 || sig == SIGUSR2 {
                    log::info!("signal {sig} received: ignored");
                    continue;
                }
                log::info!("signal {sig} received");
                if sig == SIGHUP
                    && let Some(reload) = lock(&t.1).as_ref()
                {
                    reload();
                    continue;
                }
                STOP.store(true, Ordering::SeqCst);
                crate::notify::stopping();
                // The first signal drains, a second one stops at once.
                if let Some(h) = lock(&t.0).as_ref() {
                    h.shutdown();
                }
                stops += 1;
                if stops >= 2 {
                    return;
                }
            }
        })?;
    Ok(target)
}

/// The argument that makes this binary the managed kernel's launcher.
pub(crate) const KERNEL_CHILD_ARG: &str = "__kernel-child";

/// `iac-agui __kernel-child PPID PROGRAM ARGS…`: ask for SIGTERM when the parent dies
/// (even by SIGKILL, which no handler sees), then become PROGRAM (same pid, same
/// environment). The death signal survives `execve`. Only returns on failure.
pub(crate) fn kernel_child_main(mut args: impl Iterator<Item = std::ffi::OsString>) -> u8 {
    use std::os::unix::process::CommandExt;
    let parent = args
        .next()
        .and_then(|a| a.into_string().ok())
        .and_then(|a| a.parse::<i32>().ok());
    let Some(program) = args.next() else {
        eprintln!("iac-agui {KERNEL_CHILD_ARG}: no program");
        return 2;
    };
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
    {
        eprintln!("iac-agui {KERNEL_CHILD_ARG}: cannot set the parent-death signal: {e}");
    }
    // The parent may have died before the request took effect: then go no further.
    let ppid = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if parent.is_some() && ppid != parent {
        return 1;
    }
    let e = std::process::Command::new(&program).args(args).exec();
    eprintln!(
        "iac-agui {KERNEL_CHILD_ARG}: cannot run {}: {e}",
        program.to_string_lossy()
    );
    127
}
