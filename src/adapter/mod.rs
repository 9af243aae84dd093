//! The AG-UI adapter: admission (everything before the first SSE byte, `routes/run/`), the
//! run driver, the cancel extension. Pure decisions live in `admission`, `reconcile`,
//! `identity`, `projection` and `interrupts`; the routes, `driver` and `threads` are the I/O
//! around them.

// The groups, each using only those below it: rules < state < audited < run < routes < this
// root (docs/ARCHITECTURE.md, "Dependencies").
pub(crate) mod audited;
pub(crate) mod routes;
pub(crate) mod rules;
pub(crate) mod run;
pub(crate) mod state;

// The names the crate's outside uses (tests, benches, fuzz targets, the binary's wiring); the
// groups name each other by their own paths.
pub use rules::{admission, env, interrupts, projection};
pub use state::shared::{Shared, WorkerRoute};
pub use state::{replay, threads};

use std::sync::Arc;

use crate::agui::dialect::Declared;
use crate::app::{Backend, CancelRequest, RunRequest, RunStream, SubscribeRequest};
use crate::server::http::Response;
use routes::{cancel, subscribe};
use run::driver::{Admitted, Run};

/// The AG-UI backend behind `POST /` and the cancel route.
pub struct AguiBackend {
    pub shared: Arc<Shared>,
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
        self.shared.answer_extra(req)
    }
}

/// The run on its worker, its state on the heap.
fn drive(sh: &Shared, stream: &mut RunStream<'_>, mut admitted: Box<Admitted>) {
    for h in &mut admitted.args.holds {
        h.started();
    }
    Run::boxed(sh, stream, admitted).run();
}
