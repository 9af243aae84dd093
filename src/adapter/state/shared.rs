//! What every adapter worker shares, in three parts: the run core (the thread registry, the
//! kernel, the clock and ids, the workspace roots, the running executions so the cancel route
//! can stop them), the policies (`policies.rs`: admission's gates, the decisions' record) and
//! retention (what is kept of runs, and for how long).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::a2a::client::A2aClient;
use crate::adapter::rules::env::Env;
pub(crate) use crate::adapter::state::policies::Policies;
use crate::adapter::state::replay::{ReplayBounds, ReplayLogs};
use crate::adapter::state::threads::Registry;
use crate::adapter::state::upstream::Kernel;
use crate::adapter::state::winddown::WindDowns;
use crate::agui::dialect::Dialect;
use crate::app::Readiness;
use crate::config::AguiProtocol;
use crate::life::Cell;
use crate::sync::lock;

/// A worker route of an extra's: found from a raw path (`RouteConfig::extra_routes` holds
/// `find`) and answered on a worker, where the adapter's state is (`answer`).
#[derive(Clone, Copy)]
pub struct WorkerRoute {
    /// The extra's name, as the paths `find` finds carry it (`ExtraPath::extra`).
    pub extra: &'static str,
    pub find: fn(&str) -> Option<crate::routes::ExtraPath>,
    pub answer: fn(&Shared, crate::app::ExtraRequest) -> crate::server::http::Response,
}

/// Everything the adapter's workers share: the run core here, the policies and retention in
/// their own parts.
pub struct Shared {
    pub(crate) registry: Registry,
    /// The kernel client's call threads: admission runs there (its depth and the chunks it
    /// frees stay off the run's worker), and the registry's saves (`CallThreads`).
    pub(crate) calls: crate::a2a::calls::CallPool,
    pub(crate) kernel: Arc<dyn Kernel>,
    pub(crate) env: Arc<dyn Env>,
    pub(crate) roots: Vec<PathBuf>,
    pub(crate) home: Option<String>,
    /// The dialect of a request that declares no `protocolVersion` (`--agui-protocol`); one
    /// that declares a version gets its own (`Declared`), which then travels with its run.
    pub(crate) default_dialect: Dialect,
    /// Running executions' life cells, so the cancel route can stop them: registered under
    /// the thread's lock with the admission that makes the execution findable.
    pub(in crate::adapter) runs: Mutex<HashMap<String, Arc<Cell>>>,
    /// Signalled when a run leaves `runs` (it released its thread): admission waits on it
    /// for a run whose client just left, instead of polling.
    run_left: std::sync::Condvar,
    /// Tasks the kernel is still stopping, per thread (the next turn waits for them).
    pub(crate) wind_downs: Arc<WindDowns>,
    /// How long the next turn waits for them (`limits::WIND_DOWN_BOUND`).
    pub(crate) wind_down_bound: Duration,
    /// How long the cancel route waits for the kernel's `CancelTask` answer.
    pub(crate) cancel_answer_bound: Duration,
    /// Kernel readiness: runs kick a probe when a kernel call failed.
    pub readiness: Arc<dyn Readiness>,
    /// `--default-cwd`: the workspace of requests that carry no `iacCode` properties.
    pub(crate) default_cwd: Option<String>,
    /// Keys the `rosInvocationId` the server supplies with `default_cwd`
    /// (`ThreadKey::default_ros`); random per process unless the state directory's is given.
    pub(crate) server_key: Vec<u8>,
    /// Admission's gates and the decisions' record.
    pub(crate) policies: Policies,
    /// The extras' worker routes, each answered by its extra (`Backend::extra`).
    pub(crate) worker_routes: Vec<WorkerRoute>,
    /// What is kept of runs and threads, and for how long.
    pub retention: Retention,
    /// Where a test stops a thread to order it against another (tests only).
    #[cfg(test)]
    pub(crate) points: crate::sync::Points,
}

impl Shared {
    pub fn new(
        registry: Registry,
        client: A2aClient,
        env: Arc<dyn Env>,
        roots: Vec<PathBuf>,
        home: Option<String>,
        protocol: AguiProtocol,
    ) -> Shared {
        let mut registry = registry;
        let calls = client.calls();
        registry.set_offload(Arc::new(CallThreads(calls.clone())));
        registry.set_clock(env.clone());
        let kernel: Arc<dyn Kernel> = Arc::new(client);
        Shared {
            registry,
            calls,
            kernel,
            wind_downs: Arc::new(WindDowns::new(env.clone())),
            retention: Retention {
                replay: ReplayLogs::new(ReplayBounds::default(), env.clone()),
                disconnect_grace: crate::limits::DISCONNECT_GRACE,
            },
            env,
            roots,
            home,
            default_dialect: Dialect::of(protocol),
            default_cwd: None,
            server_key: {
                let mut k = vec![0u8; 32];
                // No randomness: a key of zeros would make the supplied ids derivable; the
                // start-up probe refuses to run without it, so this only matters in tests.
                let _ = crate::ids::fill(&mut k);
                k
            },
            policies: Policies::default(),
            worker_routes: Vec::new(),
            runs: Mutex::new(HashMap::new()),
            run_left: std::sync::Condvar::new(),
            wind_down_bound: crate::limits::WIND_DOWN_BOUND,
            cancel_answer_bound: crate::limits::CANCEL_ANSWER_BOUND,
            readiness: Arc::new(crate::app::AlwaysReady),
            #[cfg(test)]
            points: Default::default(),
        }
    }

    /// Answer the extras' worker `routes` (`crate::extras::worker_routes`; the route
    /// configuration finds them with the same list).
    pub fn with_worker_routes(mut self, routes: Vec<WorkerRoute>) -> Shared {
        self.worker_routes = routes;
        self
    }

    /// The answer to a request on an extra's worker route: its extra's, found by name.
    pub(crate) fn answer_extra(
        &self,
        req: crate::app::ExtraRequest,
    ) -> crate::server::http::Response {
        match self
            .worker_routes
            .iter()
            .find(|r| r.extra == req.work.extra)
        {
            Some(r) => (r.answer)(self, req),
            None => crate::server::http::Response::text(404, "Not Found"),
        }
    }

    /// Another kernel than the A2A client (the driver's unit tests use an in-memory one).
    #[cfg(test)]
    pub(crate) fn with_kernel(mut self, kernel: Arc<dyn Kernel>) -> Shared {
        self.kernel = kernel;
        self
    }

    /// Share the readiness the health route reads.
    pub fn with_readiness(mut self, r: Arc<dyn Readiness>) -> Shared {
        self.readiness = r;
        self
    }

    /// Runs outlive their client's disconnect by `grace`; replay logs with these bounds.
    /// Requests without `forwardedProps.iacCode` run in `cwd` (`--default-cwd`).
    pub fn with_default_cwd(mut self, cwd: Option<String>) -> Shared {
        self.default_cwd = cwd;
        self
    }

    /// Key the supplied `rosInvocationId`s with the state directory's key (stable across
    /// restarts, so a thread's resumes and cancels still match).
    pub fn with_server_key(mut self, key: Vec<u8>) -> Shared {
        self.server_key = key;
        self
    }

    pub fn with_detach(mut self, grace: Duration, replay: ReplayBounds) -> Shared {
        self.retention.disconnect_grace = grace;
        self.retention.replay = ReplayLogs::new(replay, self.env.clone());
        self
    }

    /// Other wind-down and cancel-answer bounds (tests).
    pub fn with_stop_bounds(mut self, wind_down: Duration, cancel_answer: Duration) -> Shared {
        self.wind_down_bound = wind_down;
        self.cancel_answer_bound = cancel_answer;
        self
    }

    /// Make a run findable by the cancel route: called under its thread's lock, with the
    /// admission's save that names its execution (`Registry::admit`'s `committed`).
    pub(in crate::adapter) fn register_run(&self, execution_id: &str, cell: &Arc<Cell>) {
        lock(&self.runs).insert(execution_id.to_string(), cell.clone());
    }

    pub(in crate::adapter) fn forget_run(&self, execution_id: &str, cell: &Arc<Cell>) {
        let mut runs = lock(&self.runs);
        if runs.get(execution_id).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            runs.remove(execution_id);
            self.run_left.notify_all();
        }
    }

    /// If the thread's active run has lost its client, was cancelled (the cancel route
    /// answered, so a client sends its next turn at once: a Stop that cancels and then closes
    /// its stream got `409 THREAD_BUSY`), or the server is stopping it, wait on this worker,
    /// bounded, until that run released the thread.
    pub(in crate::adapter) fn wait_for_departing_run(
        &self,
        slot: &crate::adapter::state::threads::Slot,
    ) {
        let deadline = self.env.now() + crate::limits::DEPARTING_RUN_WAIT;
        let Some(execution) = lock(slot)
            .as_ref()
            .filter(|t| t.active_run.is_some())
            .map(|t| t.doc.execution.execution_id.clone())
        else {
            return;
        };
        // A stopped run releases its thread, then leaves `runs` and signals, under this lock.
        let mut runs = lock(&self.runs);
        while runs.get(&execution).is_some_and(|c| c.life().departing()) {
            let left = deadline.saturating_duration_since(self.env.now());
            if left.is_zero() {
                return;
            }
            runs = match self.run_left.wait_timeout(runs, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// A running execution's cell. Read under its thread's lock by the cancel route: a run
    /// is registered there with the save that makes its execution findable.
    pub(in crate::adapter) fn run_cell(&self, execution_id: &str) -> Option<Arc<Cell>> {
        lock(&self.runs).get(execution_id).cloned()
    }

    /// A test's stop point (`crate::sync::Points`); nothing outside tests.
    #[inline(always)]
    pub(in crate::adapter) fn point(&self, _name: &'static str) {
        #[cfg(test)]
        self.points.at(_name);
    }
}

/// What is kept of runs, and for how long: the replay logs and a departed client's grace
/// (re-attaching). A thread's stored conversation and its expiry are the registry's
/// (feature `threads`).
pub struct Retention {
    /// The events of live and recently ended runs, for re-attaching.
    pub replay: ReplayLogs,
    /// How long a run goes on after its producer's client left (`--disconnect-grace`).
    pub(crate) disconnect_grace: Duration,
}

/// The registry's file work on the kernel client's call threads (`threads::Offload`).
struct CallThreads(crate::a2a::calls::CallPool);

impl crate::adapter::state::threads::Offload for CallThreads {
    fn run(&self, job: Box<dyn FnOnce() + Send>) {
        self.0.run(job)
    }
}
