//! The loop's deadlines: what fires (read, heartbeat, write stall) and re-arming them after
//! a connection's state changed.

use super::super::conn::State;
use super::super::http;
use super::super::timers::{TimerKind, TimerSet};
use super::{Handler, Server, push_out};

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

    /// Move the alarms set since the last turn onto the loop's own timers.
    pub(super) fn take_alarms(&mut self, now: std::time::Instant) {
        for (delay, hook) in self.inbox.take_alarms() {
            self.alarms.set(now + delay, hook);
        }
    }

    /// Run the alarms that are due (stop hooks may have set more since the turn began).
    pub(super) fn process_alarms(&mut self) {
        let now = self.clock.now();
        self.take_alarms(now);
        while let Some(hook) = self.alarms.pop_due(now) {
            hook();
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
