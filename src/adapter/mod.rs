//! The AG-UI adapter: admission (everything before the first SSE byte, `routes/run/`), the
//! run driver, the cancel extension. Pure decisions live in `admission`, `reconcile`,
//! `identity`, `projection` and `interrupts`; the routes, `driver` and `threads` are the I/O
//! around them.

// The decisions handed to their record (the audit log) before they are acknowledged.
pub(crate) mod audited;
pub(crate) mod routes;
mod rules;
mod run;
pub(crate) mod state;

// The modules under their old names: grouped by kind on disk, one namespace for their users.
pub(crate) use routes::cancel;
use routes::subscribe;
pub(crate) use rules::schema;
pub use rules::{admission, interrupts, projection};
use rules::{identity, reconcile};
pub(crate) use run::upstream;
use run::{driver, ending, tee, winddown};
pub use state::{env, replay, threads};
pub(crate) use state::{policies, shared};

use std::sync::Arc;

use crate::agui::dialect::Declared;
use crate::app::{Backend, CancelRequest, RunRequest, RunStream, SubscribeRequest};
use crate::server::http::Response;
use driver::{Run, RunArgs};
pub use shared::Shared;

/// The AG-UI backend behind `POST /` and the cancel route.
pub struct AguiBackend {
    pub shared: Arc<Shared>,
}

/// An admitted run, handed from admission (on a call thread) to its worker.
pub(crate) struct Admitted {
    pub(crate) args: RunArgs,
    pub(crate) tap: Arc<tee::RunTee>,
    /// Made here, on the call thread: building an agent is deeper than anything the worker
    /// does later.
    pub(crate) session: Box<dyn upstream::Upstream>,
}

impl Backend for AguiBackend {
    fn run(&self, req: Box<RunRequest>, stream: &mut RunStream<'_>) {
        let sh = &*self.shared;
        // The dialect the request declares, decided once and before anything else reads it:
        // the envelope is read by its rules, and the run carries it (issue 57).
        let declared = match Declared::read(&req.body) {
            Ok(d) => d,
            Err(e) => return stream.reject(e.response(req.payload_lang)),
        };
        stream.set_dialect(declared.dialect_or(sh.default_dialect));
        match routes::run::admit_on_call_thread(&self.shared, req, declared, stream.cell().clone())
        {
            Ok(admitted) => drive(sh, stream, admitted),
            Err(refusal) => stream.reject(refusal.into_response()),
        }
    }

    fn cancel(&self, req: CancelRequest) -> Response {
        cancel::cancel(&self.shared, req)
    }

    fn subscribe(&self, req: SubscribeRequest, stream: &mut RunStream<'_>) {
        subscribe::subscribe(&self.shared, req, stream)
    }

    fn extra(&self, req: crate::app::ExtraRequest) -> Response {
        crate::extras::answer(&self.shared, req)
    }
}

/// The run on its worker, its state on the heap.
fn drive(sh: &Shared, stream: &mut RunStream<'_>, mut admitted: Box<Admitted>) {
    for h in &mut admitted.args.holds {
        h.started();
    }
    Run::boxed(sh, stream, admitted).run();
}
