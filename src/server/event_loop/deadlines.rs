//! The loop's deadlines: what fires (read, heartbeat, write stall, a run's disconnect grace)
//! and re-arming them after a connection's state changed.

use std::sync::Arc;

use super::super::conn::State;
use super::super::http;
use super::super::job::{JobShared, StopReason};
use super::super::timers::{TimerKind, TimerSet};
use super::{Handler, Server, push_out};
use crate::life::{Effect, Event};

impl<H: Handler> Server<H> {
    pub(super) fn process_timers(&mut self) {
        let now = self.clock.now();
        while let Some((at, token, kind)) = self.timers.pop_due(now) {
            let Some(conn) = self.conns.get_mut(token).and_then(Option::as_mut) else {
                continue;
            };
            if !TimerSet::accept(&mut conn.armed, at, kind) {
                continue;
            }
            match kind {
                TimerKind::Read => {
                    if conn.read_deadline.is_some_and(|d| d <= now) {
                        self.close(token, "read timeout");
                        continue;
                    }
                }
                TimerKind::Heartbeat => {
                    if let State::Streaming { chunked, .. } = conn.state
                        && now >= conn.last_event + self.cfg.heartbeat_interval
                    {
                        push_out(conn, now, |o| {
                            o.extend_with(|b| {
                                http::write_body_piece(b, b": heartbeat\n\n", chunked)
                            })
                        });
                        crate::metrics::M.heartbeats.inc();
                        conn.last_event = now;
                    }
                }
                TimerKind::WriteStall => {
                    if conn.pending_out() > 0
                        && now >= conn.last_progress + self.cfg.write_stall_timeout
                    {
                        self.close(token, "write stalled");
                        continue;
                    }
                }
            }
            self.drive(token);
        }
    }

    /// A job's client is gone: its cell is told, and what its table asks of the loop is
    /// done here — a grace's deadline on the loop's timers, the job kept while its run goes on
    /// without a connection (the drain's end must reach it).
    pub(super) fn client_gone(&mut self, job: &Arc<JobShared>) {
        let effects = job.stop(StopReason::ClientGone);
        let cell = job.cell();
        if effects.has(Effect::ArmGrace) {
            log::info!(
                "run {}: detached, its client left; grace {:?}",
                cell.label(),
                cell.grace()
            );
            self.alarms
                .set(self.clock.now() + cell.grace(), cell.clone());
        }
        if cell.life().detached() && !self.orphans.iter().any(|j| Arc::ptr_eq(j, job)) {
            self.orphans.retain(|j| !j.worker_gone());
            self.orphans.push(job.clone());
        }
    }

    /// The graces that are due: each cell told `GraceOver` (which cuts a run nobody adopted).
    pub(super) fn process_alarms(&mut self) {
        let now = self.clock.now();
        while let Some(cell) = self.alarms.pop_due(now) {
            let effects = cell.send(Event::GraceOver);
            if effects.has(Effect::Abort) {
                log::info!(
                    "run {}: nobody re-attached within the grace; stopping it",
                    cell.label()
                );
            } else if !cell.life().logged {
                log::info!(
                    "run {}: re-attached within the grace; it goes on",
                    cell.label()
                );
            }
        }
    }

    pub(super) fn rearm(&mut self, slot: usize) {
        let hb = self.cfg.heartbeat_interval;
        let stall = self.cfg.write_stall_timeout;
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let read_deadline = match &conn.state {
            State::ReadingHead { .. } | State::Lingering { .. } => conn.read_deadline,
            State::ReadingBody(b) => Some(b.deadline),
            _ => None,
        };
        match read_deadline {
            Some(at) => self.timers.arm(&mut conn.armed, slot, TimerKind::Read, at),
            None => TimerSet::disarm(&mut conn.armed, TimerKind::Read),
        }
        if matches!(conn.state, State::Streaming { .. }) {
            self.timers.arm(
                &mut conn.armed,
                slot,
                TimerKind::Heartbeat,
                conn.last_event + hb,
            );
        } else {
            TimerSet::disarm(&mut conn.armed, TimerKind::Heartbeat);
        }
        if conn.pending_out() > 0 {
            self.timers.arm(
                &mut conn.armed,
                slot,
                TimerKind::WriteStall,
                conn.last_progress + stall,
            );
        } else {
            TimerSet::disarm(&mut conn.armed, TimerKind::WriteStall);
        }
    }
}
