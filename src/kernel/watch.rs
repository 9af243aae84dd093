//! Kernel readiness: `GET /health` tells the truth about the kernel without blocking the
//! loop. A watcher thread probes the kernel's `/health` on a timer and whenever a run's call
//! failed; a managed child's exit is noticed within a fraction of a second and the child is
//! restarted with backoff (1 s doubling to 30 s), on the same port with the same token.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::a2a::client::A2aClient;
use crate::clock::{Clock, SystemClock};
use crate::sync::lock;

/// What the loop reads (an atomic) and what runs poke when a kernel call failed.
pub struct Probes {
    up: AtomicBool,
    /// The state store can be written (every run needs it): probed with the kernel.
    store_up: AtomicBool,
    store_probe: Mutex<Option<StoreProbe>>,
    kick: crate::sync::Kick,
    stop: AtomicBool,
}

/// Whether the state store takes a write now (`FileStore::probe`).
pub type StoreProbe = Box<dyn Fn() -> bool + Send>;

impl Default for Probes {
    fn default() -> Self {
        Probes {
            up: AtomicBool::new(true),
            store_up: AtomicBool::new(true),
            store_probe: Mutex::new(None),
            kick: crate::sync::Kick::default(),
            stop: AtomicBool::new(false),
        }
    }
}

impl crate::app::Readiness for Probes {
    fn kernel_up(&self) -> bool {
        Probes::kernel_up(self)
    }

    fn store_up(&self) -> bool {
        Probes::store_up(self)
    }

    fn kick(&self) {
        Probes::kick(self)
    }
}

impl Probes {
    pub fn kernel_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    pub fn store_up(&self) -> bool {
        self.store_up.load(Ordering::SeqCst)
    }

    /// Probe the state store too (with every kernel probe, and when kicked).
    pub fn set_store_probe(&self, probe: StoreProbe) {
        *lock(&self.store_probe) = Some(probe);
    }

    fn probe_store(&self) {
        let Some(up) = lock(&self.store_probe).as_ref().map(|p| p()) else {
            return;
        };
        let was = self.store_up.swap(up, Ordering::SeqCst);
        if was != up {
            if up {
                log::info!("the state directory takes writes again");
            } else {
                log::warn!(
                    "the state directory cannot be written (read-only, full, or locked by \
                     another process): /health answers 503 until it can"
                );
            }
        }
    }

    fn set(&self, up: bool) {
        let was = self.up.swap(up, Ordering::SeqCst);
        if was != up {
            if up {
                log::info!("the A2A kernel is reachable again");
            } else {
                log::warn!("the A2A kernel is unavailable: /health answers 503 until it is back");
            }
            crate::metrics::M.kernel_up.set(i64::from(up));
        }
    }

    /// A kernel call failed: probe now rather than at the next tick.
    pub fn kick(&self) {
        self.kick.kick();
    }

    /// Stop the watcher (at exit, before the managed kernel is stopped).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.kick();
    }

    /// Sleep until `d` passed or someone kicked; true when kicked.
    fn sleep(&self, d: Duration) -> bool {
        self.kick.sleep(d)
    }
}

/// The managed child, if any, shared with the code that stops it at exit.
pub type Managed = Arc<Mutex<super::process::ManagedKernel>>;

/// Start the watcher thread.
pub fn start(
    ready: Arc<Probes>,
    client: A2aClient,
    managed: Option<Managed>,
    interval: Duration,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("iac-agui-kernel-watch".into())
        .stack_size(crate::limits::SMALL_WORKER_STACK_BYTES)
        .spawn(move || watch(&ready, &client, managed.as_ref(), interval))
        .map(|_| ())
}

fn watch(ready: &Probes, client: &A2aClient, managed: Option<&Managed>, interval: Duration) {
    // A managed child is polled often (its exit is seen at once); the health probe runs on
    // the interval or when a run's call failed.
    let tick = if managed.is_some() {
        Duration::from_millis(200)
    } else {
        interval
    };
    let mut next_probe = SystemClock.now() + interval;
    let mut backoff = crate::limits::KERNEL_RESTART_FIRST;
    let mut restart_at: Option<Instant> = None;
    loop {
        let kicked = ready.sleep(tick);
        if ready.stop.load(Ordering::SeqCst) {
            return;
        }
        // A managed child that is not running has no health to probe (it is down until it
        // restarts); the store is probed on the interval either way.
        let mut kernel_running = true;
        if let Some(m) = managed {
            let mut k = lock(m);
            if let Some(code) = k.exited() {
                log::error!("the local A2A process exited unexpectedly (exit code {code})");
                ready.set(false);
                restart_at = Some(SystemClock.now() + backoff);
            }
            if !k.running()
                && let Some(at) = restart_at
                && SystemClock.now() >= at
            {
                log::info!("restarting the local A2A process");
                match k.restart() {
                    Ok(()) => {
                        restart_at = None;
                        backoff = crate::limits::KERNEL_RESTART_FIRST;
                        ready.set(true);
                        crate::metrics::M.kernel_restarts.inc();
                        continue;
                    }
                    Err(e) => {
                        backoff = (backoff * 2).min(crate::limits::KERNEL_RESTART_MAX);
                        log::error!("{e}; next try in {backoff:?}");
                        restart_at = Some(SystemClock.now() + backoff);
                    }
                }
            }
            kernel_running = k.running();
        }
        let now = SystemClock.now();
        if kicked || now >= next_probe {
            next_probe = now + interval;
            ready.probe_store();
            if kernel_running {
                ready.set(client.session().health() == Ok(200));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kick_wakes_the_sleeper_at_once() {
        let r = Arc::new(Probes::default());
        let r2 = r.clone();
        let t = std::thread::spawn(move || {
            let t0 = SystemClock.now();
            let kicked = r2.sleep(Duration::from_secs(30));
            (kicked, t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        r.kick();
        let (kicked, took) = t.join().unwrap();
        assert!(kicked && took < Duration::from_secs(5));
        assert!(!r.sleep(Duration::from_millis(1)), "a kick counts once");
    }
}
