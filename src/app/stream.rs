//! The worker's side of one streaming exchange: reject it, or open the SSE stream, number and
//! send its events and end it with exactly one terminal event. What rides along (the adapter's
//! replay log) plugs in as a [`StreamTap`]; whether the client still reads — or left, and the
//! run goes on for its log within a disconnect grace — is the job's life cell's
//! (`crate::life`).

use std::sync::Arc;

use crate::agui::events::{Event, Stamped, frame};
use crate::catalog::Msg;
use crate::clock::Clock;
use crate::errors::{ApiError, Code};
use crate::i18n::Lang;
use crate::logging::Field;
use crate::server::http::Response;
use crate::server::job::{Frame, Outbox, Reply, Stopped};

/// Sees every event of a stream before the client does (the adapter's replay log).
pub(crate) trait StreamTap: Send + Sync {
    /// Event `id` of the stream, framed, before it is queued for the client; `event` is the
    /// event itself when the producer built one (not for raw JSON such as a terminal).
    fn event(&self, id: u64, frame: &Frame, event: Option<&Event>);
    /// No more events: the terminal event went out to the client (`delivered`), or the run
    /// ended without it, or the producer is gone.
    fn end(&self, delivered: bool);
    /// `end` was called.
    fn ended(&self) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamState {
    NotStarted,
    Open,
    Done,
}

/// One `POST /` or subscribe exchange as the backend drives it.
pub struct RunStream<'a> {
    outbox: &'a Outbox,
    state: StreamState,
    pub(super) terminal_sent: bool,
    /// The id of the next event (`id:` line).
    next_id: u64,
    /// Headers every answer of this request carries (the routing key echoed).
    pub(super) echo: Vec<(&'static str, String)>,
    /// For the access log: the SSE stream started (not answered with an error).
    streamed: bool,
    execution_id: Option<String>,
    outcome: Option<String>,
    thread_id: String,
    run_id: String,
    lang: Lang,
    /// AG-UI 1.0 events only (no threadId/runId on RUN_ERROR): set by the backend.
    /// `RUN_ERROR` carries the ids (`Dialect::error_ids`; the reference's until told).
    error_ids: bool,
    tap: Option<Arc<dyn StreamTap>>,
    clock: Arc<dyn Clock>,
}

impl<'a> RunStream<'a> {
    pub(crate) fn new(
        outbox: &'a Outbox,
        thread_id: String,
        run_id: String,
        lang: Lang,
        clock: Arc<dyn Clock>,
    ) -> RunStream<'a> {
        RunStream {
            outbox,
            state: StreamState::NotStarted,
            terminal_sent: false,
            next_id: 0,
            echo: Vec::new(),
            streamed: false,
            execution_id: None,
            outcome: None,
            thread_id,
            run_id,
            lang,
            error_ids: true,
            tap: None,
            clock,
        }
    }

    /// The backend's dialect (the terminal written here after a panic speaks it too).
    pub(crate) fn set_dialect(&mut self, dialect: crate::agui::dialect::Dialect) {
        self.error_ids = dialect.error_ids;
    }

    /// Let `tap` see every event from now on.
    pub(crate) fn set_tap(&mut self, tap: Arc<dyn StreamTap>) {
        self.tap = Some(tap);
    }

    /// The job's life cell (a run registers it; its stops and cuts go through it).
    pub(crate) fn cell(&self) -> &Arc<crate::life::Cell> {
        self.outbox.cell()
    }

    /// Queue one framed event: to the tap, then to the client unless it left and the run
    /// goes on without it (detached within its grace, or adopted).
    fn send_event(&self, id: u64, data: Vec<u8>, event: Option<&Event>) -> Result<(), Stopped> {
        let data: Frame = data.into();
        if let Some(tap) = &self.tap {
            tap.event(id, &data, event);
        }
        crate::metrics::M.events_sent.inc();
        crate::metrics::M.bytes_sent.add(data.len() as u64);
        match self.outbox.send(Reply::Event(data)) {
            Err(Stopped) if self.cell().life().detached() => Ok(()),
            r => r,
        }
    }

    /// Send already framed events (a subscriber replaying a log).
    pub(crate) fn raw_event(&mut self, framed: Frame) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        crate::metrics::M.events_sent.inc();
        crate::metrics::M.bytes_sent.add(framed.len() as u64);
        self.outbox.send(Reply::Event(framed))
    }

    /// The replayed log ended (its terminal event was among the raw events).
    pub(crate) fn end_raw(&mut self) {
        self.terminal_sent = true;
        self.end();
    }

    /// Give up the stream without a terminal event: the loop closes the connection.
    pub(crate) fn abandon(&mut self) {
        self.terminal_sent = true;
        self.state = StreamState::Done;
    }

    /// The run ends without its client (gone, grace over): the tap still gets one terminal
    /// event, so subscribers see how it ended.
    pub(crate) fn log_terminal(&mut self, json: &[u8]) {
        if let Some(tap) = self.tap.clone() {
            if !tap.ended() && !self.terminal_sent {
                let id = self.take_id();
                tap.event(id, &frame(id, json).into(), None);
            }
            tap.end(false);
        }
        self.terminal_sent = true;
    }

    /// Answer with an error response instead of a stream.
    pub fn reject(&mut self, response: Response) {
        if self.state == StreamState::NotStarted {
            self.state = StreamState::Done;
            let mut r = response;
            for (k, v) in &self.echo {
                r = r.with_header(k, v.clone());
            }
            let _ = self.outbox.send(Reply::Response(r));
        }
    }

    /// Hold events without waking the loop until the next upstream read (`false` flushes):
    /// a burst read in one upstream chunk costs the loop one wake.
    pub(crate) fn hold(&self, on: bool) {
        self.outbox.hold(on);
    }

    /// The output budget the run's upstream streams hold their large events against.
    pub fn budget(&self) -> std::sync::Arc<crate::budget::Budget> {
        self.outbox.budget()
    }

    /// Before an upstream read: flush held events and wait while the client is behind (see
    /// `Outbox::wait_writable`, which returns at once for a client that left).
    pub(crate) fn before_read(&self) {
        self.outbox.wait_writable();
    }

    /// Send the SSE head.
    pub fn start(&mut self) -> Result<(), Stopped> {
        if self.state != StreamState::NotStarted {
            return Ok(());
        }
        self.state = StreamState::Open;
        self.streamed = true;
        self.outbox.send(Reply::StartStream(self.echo.clone()))
    }

    /// Send one event given as compact JSON, framed here as `id: N\ndata: …\n\n`: every
    /// event of a stream is numbered, `RUN_STARTED` 0, then +1 (heartbeats carry no id).
    pub fn event(&mut self, json: &[u8]) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        let id = self.take_id();
        self.send_event(id, frame(id, json), None)
    }

    /// Send one event, framed with the stream's next id in one allocation.
    pub(crate) fn stamped_event(&mut self, ev: &Stamped) -> Result<(), Stopped> {
        if self.state != StreamState::Open || self.terminal_sent {
            return Ok(());
        }
        let id = self.take_id();
        self.send_event(id, ev.to_sse(id), Some(&ev.event))
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Send the terminal event and end the stream. Only the first terminal counts.
    pub fn terminal(&mut self, json: &[u8]) -> Result<(), Stopped> {
        if self.terminal_sent {
            return Ok(());
        }
        let r = self.event(json);
        self.terminal_sent = true;
        if let Some(tap) = &self.tap {
            tap.end(true);
        }
        self.end();
        r
    }

    fn end(&mut self) {
        if self.state == StreamState::Open {
            self.state = StreamState::Done;
            let _ = self.outbox.send(Reply::EndStream);
        }
    }

    /// Record the run's execution and outcome for its access-log line.
    pub(crate) fn note_outcome(&mut self, execution_id: &str, outcome: &str) {
        self.execution_id = Some(execution_id.to_string());
        self.outcome = Some(outcome.to_string());
    }

    /// The access-log fields of a request that streamed (thread, run, execution, outcome).
    pub(super) fn log_fields(&self) -> Vec<(&'static str, Field)> {
        if !self.streamed {
            return Vec::new();
        }
        let mut f = vec![
            ("thread_id", Field::Str(self.thread_id.clone())),
            ("run_id", Field::Str(self.run_id.clone())),
        ];
        if let Some(e) = &self.execution_id {
            f.push(("execution_id", Field::Str(e.clone())));
        }
        let outcome = self.outcome.clone().unwrap_or_else(|| "aborted".into());
        f.push(("outcome", Field::Str(outcome)));
        f
    }

    /// The client went away (EOF, error, stalled output) and no grace holds the run for it.
    pub(crate) fn client_gone(&self) -> bool {
        self.cell().life().client == crate::life::Client::Gone
    }

    /// Nobody reads this exchange any more, or the server stops it.
    pub fn stopped(&self) -> bool {
        let life = self.cell().life();
        life.unattended() || life.shutdown
    }

    /// The server is shutting down.
    pub(crate) fn shutting_down(&self) -> bool {
        self.cell().life().shutdown
    }

    /// Cut `abort`'s session when the client goes for good (after a grace, if any), the
    /// server stops, or the cancel route stops the run.
    pub(crate) fn arm_abort(&self, abort: crate::life::Abort) {
        self.outbox.arm_abort(abort);
    }

    /// After a panic or a backend that returned without finishing: close the exchange.
    pub(super) fn finish_abnormally(&mut self) {
        match self.state {
            StreamState::NotStarted => self
                .reject(ApiError::new(Code::InternalError, Msg::InternalError).response(self.lang)),
            StreamState::Open => {
                // A bug, not an outage: clients must not retry it as "unavailable".
                let _ = self.error_terminal(Code::InternalError, Msg::InternalError);
            }
            StreamState::Done => {}
        }
    }

    /// End the stream with `RUN_ERROR code` in this stream's dialect (no threadId/runId in
    /// strict 1.0).
    pub(crate) fn error_terminal(&mut self, code: Code, msg: Msg) -> Result<(), Stopped> {
        let ev = Stamped {
            ts: self.clock.now_ms(),
            event: Event::run_error(
                code,
                msg.text(self.lang),
                &self.thread_id,
                &self.run_id,
                Vec::new(),
                self.error_ids,
            ),
        };
        self.terminal(&ev.to_json())
    }
}

impl Drop for RunStream<'_> {
    /// A tap (and the subscribers of its log) never waits on a run whose worker is gone.
    fn drop(&mut self) {
        if let Some(tap) = &self.tap {
            tap.end(false);
        }
    }
}
