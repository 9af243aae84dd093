//! The loop's side of the jobs: replies taken from a job's queue into its connection's
//! output, within the output watermark.

use std::sync::Arc;

use super::super::conn::State;
use super::super::http;
use super::super::job::{JobShared, Reply, StopReason};
use super::{Handler, Server, push_out};
use crate::budget::Seat;
use crate::limits;

impl<H: Handler> Server<H> {
    pub(super) fn process_ready(&mut self) {
        for job in self.inbox.take_ready() {
            let id = job.conn;
            let owned = self
                .conns
                .get(id.slot)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.id == id && c.job().is_some_and(|j| Arc::ptr_eq(j, &job)));
            if !owned {
                // A job whose connection closed: its worker queued a last reply or ended.
                if job.worker_gone() {
                    self.orphans.retain(|j| !Arc::ptr_eq(j, &job));
                }
                job.stop(StopReason::ClientGone);
                continue;
            }
            self.pump(id.slot, &job);
            self.drive(id.slot);
        }
    }

    /// Move replies from a job's queue into the connection's output, up to the watermark. No
    /// event size closes a connection: above the watermark the loop stops taking replies,
    /// the job's bounded queue blocks its worker, the worker stops reading upstream, and TCP
    /// pushes back to the kernel. Only a client that takes no byte for the write-stall
    /// timeout is dropped. While the output budget is spent the limit is far lower
    /// (`out_limit`).
    fn pump(&mut self, slot: usize, job: &Arc<JobShared>) {
        let caller = self.caller_at(slot);
        let limit = self.out_limit(caller);
        loop {
            let Some(conn) = self.conn(slot) else { return };
            if !conn.job().is_some_and(|j| Arc::ptr_eq(j, job)) {
                return;
            }
            if conn.pending_out() > limit {
                // Taken off the ready list without draining: make it notifiable again, so the
                // flush that brings the output under the watermark puts it back.
                job.park();
                return;
            }
            let budget = limit - conn.pending_out();
            let mut batch = std::mem::take(&mut self.scratch);
            batch.clear();
            let closed = job.drain(limits::DRAIN_BATCH, budget, &mut batch);
            if batch.is_empty() {
                self.scratch = batch;
                if closed {
                    // The worker ended without finishing its reply (it crashed or misbehaved).
                    self.close(slot, "worker ended without a reply");
                }
                return;
            }
            for reply in batch.drain(..) {
                self.apply(slot, reply);
            }
            self.scratch = batch;
        }
    }

    pub(super) fn apply(&mut self, slot: usize, reply: Reply) {
        let now = self.clock.now();
        let draining = self.draining();
        let keepalive_timeout = self.cfg.keepalive_timeout;
        let Some(conn) = self.conn(slot) else { return };
        match (reply, &conn.state) {
            (
                Reply::Response(r),
                State::Dispatched {
                    keep_alive,
                    head_only,
                    ..
                },
            ) => {
                let (k, h) = (*keep_alive, *head_only);
                self.respond(slot, r, k, h);
            }
            (Reply::StartStream(extra), State::Dispatched { .. }) => {
                let State::Dispatched {
                    job, keep_alive, ..
                } = std::mem::replace(&mut conn.state, State::Closing)
                else {
                    return;
                };
                // HTTP/1.0 has no chunked encoding: its stream ends by closing the connection.
                let chunked = keep_alive;
                let mut extra = extra;
                extra.append(&mut conn.answer_headers);
                push_out(conn, now, |o| {
                    o.extend_with(|b| http::write_sse_head(b, chunked, &extra))
                });
                conn.last_event = now;
                conn.state = State::Streaming {
                    job,
                    keep_alive,
                    chunked,
                };
            }
            (Reply::Event(data), State::Streaming { chunked, .. }) => {
                let chunked = *chunked;
                push_out(conn, now, |o| o.push_piece(data, chunked));
                conn.last_event = now;
            }
            (
                Reply::EndStream,
                State::Streaming {
                    keep_alive,
                    chunked,
                    ..
                },
            ) => {
                let (keep, chunked) = (*keep_alive && *chunked && !draining, *chunked);
                if chunked {
                    push_out(conn, now, |o| o.extend(http::LAST_CHUNK));
                }
                if keep {
                    conn.state = State::ReadingHead { started: false };
                    conn.read_deadline = Some(now + keepalive_timeout);
                } else {
                    conn.state = State::Closing;
                }
            }
            (reply, _) => {
                log::warn!(
                    "dropping out-of-order reply {:?} in state {}",
                    std::mem::discriminant(&reply),
                    conn.state_name()
                );
            }
        }
    }

    /// The connection's limit of unsent output (`Ledger::out_limit`).
    pub(super) fn out_limit(&self, caller: Seat) -> usize {
        self.ledger.out_limit(self.cfg.max_output_bytes / 2, caller)
    }

    /// Re-decide the output budget; when the ledger says the limits changed, mark or release
    /// every run by its new limit (a released job goes back on the ready list, as the flush
    /// under the watermark does). True while spent.
    pub(super) fn settle_budget(&mut self) -> bool {
        let check = self.ledger.check();
        if check.changed {
            for conn in self.conns.iter().flatten() {
                let Some(job) = conn.job() else { continue };
                let behind = conn.held_out() > self.out_limit(conn.caller);
                job.set_congested(behind);
                if !behind {
                    job.renotify();
                }
            }
        }
        check.spent
    }

    /// Why a new stream of `caller` is refused, if it is (`Ledger::refuses_stream`).
    pub(super) fn refuses_stream(&mut self, caller: Seat) -> Option<&'static str> {
        let spent = self.settle_budget();
        let now = self.clock.now();
        let conns = &self.conns;
        self.ledger
            .refuses_stream(spent, caller, || held_behind(conns, now))
    }

    /// Count the connection for `caller` (its request's; `None`: callers are not told
    /// apart); false when the caller is past its share of the connection limit.
    pub(super) fn identify(&mut self, slot: usize, caller: Option<std::sync::Arc<str>>) -> bool {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return true;
        };
        let held = crate::budget::OutputBudget::get(&conn.share);
        self.ledger.identify(
            &mut conn.caller,
            caller,
            held,
            self.live,
            self.cfg.max_connections,
        )
    }
}

/// What clients that stopped reading hold: the unsent output of connections that made no
/// progress for `BEHIND_AFTER`, with what their workers queued for them.
fn held_behind<R>(conns: &[Option<super::super::conn::Conn<R>>], now: std::time::Instant) -> usize {
    conns
        .iter()
        .flatten()
        .filter(|c| {
            crate::budget::is_behind(
                c.pending_out(),
                now.saturating_duration_since(c.last_progress),
            )
        })
        .map(|c| c.pending_out() + c.job().map_or(0, |j| j.queued_bytes()))
        .fold(0, usize::saturating_add)
}
