//! A run's whole life as one value (issue 56): whether the cancel route can find it, whether
//! its task is named, whether its session went out, who decided its end, where its client
//! is, whether the server stops it, whether its end is in the replay log. Every actor — the
//! loop (a client gone, a grace over, a shutdown), the run's driver, the cancel route, a
//! subscriber, the panic guard — sends its cell an [`Event`]; [`transition`] (pure) gives the next
//! [`Life`] and the [`Effects`] to carry out. Two actors racing are two transitions of one
//! atomic word, so whichever comes second sees the first: a Stop before the task is named
//! makes the naming cancel it, a Stop after it cancels it directly, and nobody decides by
//! reading a flag another thread is about to change.
//!
//! Every job has a cell (the server makes it with the job): the loop sends it `ClientGone`
//! and `Shutdown` and arms the grace [`Effect::ArmGrace`] asks for on its own timers — it runs
//! no closure of anyone's. The one effect the cell carries out itself is [`Effect::Abort`]:
//! it cuts the upstream sessions registered with [`Cell::arm_abort`] (a socket shutdown, never
//! blocking). The others are the caller's: its answer to give (`CancelClaimed`, `EndOwn`…) or
//! the kernel call to make (`CancelTask`).
//!
//! The table of every (life, event) pair is `tests::every_life_and_event_has_one_outcome`;
//! docs/LIFECYCLE.md names it instead of describing the orderings in prose.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::sync::lock;

/// Who decided how the run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Nobody yet.
    Open,
    /// The run itself: its terminal event (or interrupt) is on its way, or its client left
    /// with nothing decided. A client that leaves after this point cancels nothing.
    Own,
    /// The cancel route claimed the end; its save is under way (taken back if it fails).
    Cancel,
    /// The cancel route's claim is saved: the run ends `CANCELLED`, and its task is cancelled
    /// by whoever of the two (route, run) learns second that it is named.
    Cancelled,
    /// The run panicked: its task is cancelled and its execution retired.
    Panic,
}

/// Where the run's client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    Attached,
    /// Gone, and the run goes on for the disconnect grace (a deadline on the loop's timers).
    Detached,
    /// Gone, and a subscriber watches: the run goes on to its end.
    Adopted,
    /// Gone for good (no grace, or the grace ran out): the upstream is cut.
    Gone,
}

/// A run's life. Plain data: [`transition`] is the only thing that makes a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life {
    /// The cancel route can find the run (registered under its thread's lock, with the
    /// admission that made its execution findable).
    pub(crate) registered: bool,
    /// A departed client is waited for (`--disconnect-grace`, not for guidance).
    pub(crate) graced: bool,
    /// The kernel named the run's task and the mapping is saved (the id is in the cell).
    pub(crate) task: bool,
    /// The session event went out.
    pub(crate) session: bool,
    pub(crate) end: End,
    pub(crate) client: Client,
    /// A subscriber attached: the run is adopted when its client leaves.
    pub(crate) watched: bool,
    /// The drain's grace ended: the run is cut and ends `SERVER_SHUTTING_DOWN`.
    pub(crate) shutdown: bool,
    /// Its terminal event is in the replay log: a client leaving now changes nothing.
    pub(crate) logged: bool,
    /// It released its thread: nothing moves any more.
    pub(crate) released: bool,
}

/// What happened to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Admission registered the run, under the thread's lock, after its save: from now on
    /// the cancel route finds it. `task`: the execution's task is already named (a resume).
    Registered { graced: bool, task: bool },
    /// The run saved the task id the kernel named (the id is in the cell first).
    TaskNamed,
    /// The run is about to send its session event.
    RevealSession,
    /// The driver reached its end (an outcome or an interrupt is known).
    OwnEnd,
    /// The driver found its client gone (its stream refused an event).
    Departed,
    /// The cancel route claims the end (under the thread's lock, before it saves).
    Cancel,
    /// The cancel route's save failed: its claim is taken back.
    CancelUnsaved,
    /// The cancel route's claim is saved.
    CancelSaved,
    /// The loop: the client's connection went away.
    ClientGone,
    /// The loop: the grace's deadline passed.
    GraceOver,
    /// A subscriber attached to the run's log.
    Subscribed,
    /// The loop: the drain's grace ended.
    Shutdown,
    /// An upstream session was registered with the cell ([`Cell::arm_abort`]).
    UpstreamOpened,
    /// The run panicked.
    Panicked,
    /// The run's terminal event reached its replay log.
    LogEnded,
    /// The run released its thread.
    Released,
}

/// One thing for the caller of a transition to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Effect {
    /// Cut the run's upstream I/O (the cell does it: its registered sessions).
    Abort = 1,
    /// The loop: keep the run for the grace, a deadline on its timers.
    ArmGrace = 1 << 1,
    /// The cancel route made the claim: it answers `cancelled` (and takes it back if its
    /// save fails).
    CancelClaimed = 1 << 2,
    /// Another cancel of this run made the claim: this one answers as it does, and takes
    /// nothing back.
    CancelJoined = 1 << 3,
    /// The run had decided its own end: the cancel route answers `already_terminal`.
    AlreadyTerminal = 1 << 4,
    /// Not registered: the cancel route cannot know it (never happens under the thread's
    /// lock; answering `cancelled` here would be a Stop nobody carries out).
    NotFound = 1 << 5,
    /// The driver's end is its own.
    EndOwn = 1 << 6,
    /// The driver's end is `CANCELLED`, whatever the kernel said last.
    EndCancelled = 1 << 7,
    /// Cancel the run's task now (the id is in the cell): the sender learnt second of the
    /// two facts "the Stop is saved" and "the task is named".
    CancelTask = 1 << 8,
    /// The client left with nothing decided: cancel the task unless an interrupt waits, and
    /// retire the execution.
    AbandonTask = 1 << 9,
    /// Send the session event (the first time only).
    EmitSession = 1 << 10,
    /// After a panic: cancel the task and retire the execution.
    FailClosed = 1 << 11,
}

/// A set of effects.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Effects(u16);

impl Effects {
    pub(crate) const NONE: Effects = Effects(0);

    pub(crate) fn has(self, e: Effect) -> bool {
        self.0 & e as u16 != 0
    }

    fn of(list: &[Effect]) -> Effects {
        Effects(list.iter().fold(0, |a, e| a | *e as u16))
    }
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = [
            Effect::Abort,
            Effect::ArmGrace,
            Effect::CancelClaimed,
            Effect::CancelJoined,
            Effect::AlreadyTerminal,
            Effect::NotFound,
            Effect::EndOwn,
            Effect::EndCancelled,
            Effect::CancelTask,
            Effect::AbandonTask,
            Effect::EmitSession,
            Effect::FailClosed,
        ];
        f.debug_list()
            .entries(all.iter().filter(|e| self.has(**e)))
            .finish()
    }
}

/// Why a run's upstream reads failed, as its life says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The cancel route's saved claim: the run ends `CANCELLED`.
    Cancel,
    /// The drain's grace ended: `SERVER_SHUTTING_DOWN`.
    Shutdown,
    /// The client is gone for good.
    Client,
}

impl Life {
    /// A job's life as the server makes it: nothing registered, the client attached.
    pub(crate) const NEW: Life = Life {
        registered: false,
        graced: false,
        task: false,
        session: false,
        end: End::Open,
        client: Client::Attached,
        watched: false,
        shutdown: false,
        logged: false,
        released: false,
    };

    /// The cancel route's saved claim: the run ends `CANCELLED`.
    pub(crate) fn cancelled(self) -> bool {
        self.end == End::Cancelled
    }

    /// Why its upstream would be cut, the cancel's claim first (the order the driver's
    /// endings take: a cancelled run ends `CANCELLED` whatever else happened).
    pub(crate) fn cut(self) -> Option<Cut> {
        if self.cancelled() {
            Some(Cut::Cancel)
        } else if self.shutdown {
            Some(Cut::Shutdown)
        } else if self.client == Client::Gone {
            Some(Cut::Client)
        } else {
            None
        }
    }

    /// Whether the upstream is to be cut now (what a newly opened session is told).
    fn severed(self) -> bool {
        !self.released
            && (self.shutdown
                || (self.client == Client::Gone && !self.logged)
                || (self.cancelled() && self.task))
    }

    /// The client's connection is gone but the run goes on (its events reach the log only).
    pub(crate) fn detached(self) -> bool {
        matches!(self.client, Client::Detached | Client::Adopted)
    }

    /// Nobody reads the client's queue any more: gone, detached or adopted.
    pub(crate) fn unattended(self) -> bool {
        self.client != Client::Attached
    }

    /// On its way out: its client gone for good, or the cancel route claimed its end (the
    /// route answers before the run released its thread); the next turn's admission waits.
    pub(crate) fn departing(self) -> bool {
        self.client == Client::Gone || matches!(self.end, End::Cancel | End::Cancelled)
    }
}

/// The one transition function.
pub(crate) fn transition(life: Life, event: Event) -> (Life, Effects) {
    use Effect::*;
    use Event as E;
    let mut l = life;
    let none = Effects::NONE;
    if l.released {
        return match event {
            E::Cancel => (l, Effects::of(&[AlreadyTerminal])),
            _ => (l, none),
        };
    }
    let fx = match event {
        E::Registered { graced, task } => {
            l.registered = true;
            l.graced = graced;
            l.task |= task;
            none
        }
        E::TaskNamed => {
            l.task = true;
            // Second of the two: the Stop was saved first, so the run cancels its task.
            match (life.task, l.end) {
                (false, End::Cancelled) => Effects::of(&[CancelTask, Abort]),
                _ => none,
            }
        }
        E::RevealSession => {
            l.session = true;
            if life.session {
                none
            } else {
                Effects::of(&[EmitSession])
            }
        }
        E::OwnEnd => match l.end {
            End::Open => {
                l.end = End::Own;
                Effects::of(&[EndOwn])
            }
            End::Cancel | End::Cancelled => Effects::of(&[EndCancelled]),
            End::Own | End::Panic => Effects::of(&[EndOwn]),
        },
        E::Departed => match l.end {
            End::Open => {
                l.end = End::Own;
                Effects::of(&[AbandonTask])
            }
            // The route's claim may still be taken back (its save failing): the run does not
            // count on it. A second CancelTask is harmless; a task nobody cancels is not.
            End::Cancel => Effects::of(&[AbandonTask]),
            End::Own | End::Cancelled | End::Panic => none,
        },
        E::Cancel if !l.registered => Effects::of(&[NotFound]),
        E::Cancel => match l.end {
            End::Open => {
                l.end = End::Cancel;
                Effects::of(&[CancelClaimed])
            }
            End::Cancel | End::Cancelled => Effects::of(&[CancelJoined]),
            End::Own | End::Panic => Effects::of(&[AlreadyTerminal]),
        },
        E::CancelUnsaved => {
            if l.end == End::Cancel {
                l.end = End::Open;
            }
            none
        }
        E::CancelSaved => match l.end {
            End::Cancel => {
                l.end = End::Cancelled;
                // Second of the two: the task was named first, so the route cancels it and
                // the run stops reading at once.
                if l.task {
                    Effects::of(&[CancelTask, Abort])
                } else {
                    none
                }
            }
            _ => none,
        },
        E::ClientGone => match l.client {
            Client::Attached if l.logged => {
                l.client = Client::Gone;
                none
            }
            Client::Attached if l.graced && l.watched => {
                l.client = Client::Adopted;
                none
            }
            Client::Attached if l.graced => {
                l.client = Client::Detached;
                Effects::of(&[ArmGrace])
            }
            Client::Attached => {
                l.client = Client::Gone;
                Effects::of(&[Abort])
            }
            Client::Detached | Client::Adopted | Client::Gone => none,
        },
        E::GraceOver => match l.client {
            Client::Detached => {
                l.client = Client::Gone;
                if l.logged {
                    none
                } else {
                    Effects::of(&[Abort])
                }
            }
            _ => none,
        },
        E::Subscribed => {
            l.watched = true;
            if l.client == Client::Detached {
                l.client = Client::Adopted;
            }
            none
        }
        E::Shutdown => {
            l.shutdown = true;
            if life.shutdown {
                none
            } else {
                Effects::of(&[Abort])
            }
        }
        E::UpstreamOpened => {
            if l.severed() {
                Effects::of(&[Abort])
            } else {
                none
            }
        }
        E::Panicked => {
            l.end = End::Panic;
            Effects::of(&[FailClosed])
        }
        E::LogEnded => {
            l.logged = true;
            none
        }
        E::Released => {
            l.released = true;
            none
        }
    };
    (l, fx)
}

fn encode(l: Life) -> u64 {
    let end = match l.end {
        End::Open => 0,
        End::Own => 1,
        End::Cancel => 2,
        End::Cancelled => 3,
        End::Panic => 4,
    };
    let client = match l.client {
        Client::Attached => 0,
        Client::Detached => 1,
        Client::Adopted => 2,
        Client::Gone => 3,
    };
    let bits = [
        l.registered,
        l.graced,
        l.task,
        l.session,
        l.watched,
        l.shutdown,
        l.logged,
        l.released,
    ];
    let flags = bits
        .iter()
        .enumerate()
        .fold(0u64, |a, (i, b)| a | (u64::from(*b) << i));
    flags | (client << 8) | (end << 10)
}

fn decode(w: u64) -> Life {
    let bit = |i: u32| w & (1 << i) != 0;
    Life {
        registered: bit(0),
        graced: bit(1),
        task: bit(2),
        session: bit(3),
        watched: bit(4),
        shutdown: bit(5),
        logged: bit(6),
        released: bit(7),
        client: match (w >> 8) & 3 {
            0 => Client::Attached,
            1 => Client::Detached,
            2 => Client::Adopted,
            _ => Client::Gone,
        },
        end: match (w >> 10) & 7 {
            0 => End::Open,
            1 => End::Own,
            2 => End::Cancel,
            3 => End::Cancelled,
            _ => End::Panic,
        },
    }
}

/// What cuts one upstream session short (a2a's aborter: a socket shutdown).
pub(crate) type Abort = Box<dyn FnOnce() + Send>;

/// A run's cell: its [`Life`] in one atomic word, and what its effects need — the upstream
/// sessions to cut, the task's id once named, the grace the loop waits.
pub(crate) struct Cell {
    word: AtomicU64,
    aborts: Mutex<Vec<Abort>>,
    task_id: OnceLock<String>,
    grace: OnceLock<Duration>,
    /// What the loop's log lines call the run (its id, set at registration).
    label: OnceLock<String>,
}

impl Default for Cell {
    fn default() -> Cell {
        Cell {
            word: AtomicU64::new(encode(Life::NEW)),
            aborts: Mutex::new(Vec::new()),
            task_id: OnceLock::new(),
            grace: OnceLock::new(),
            label: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell").field("life", &self.life()).finish()
    }
}

impl Cell {
    /// Apply `event`; `Abort` is carried out here, the other effects are the caller's.
    pub(crate) fn send(&self, event: Event) -> Effects {
        let mut now = self.word.load(Ordering::SeqCst);
        let effects = loop {
            let (next, effects) = transition(decode(now), event);
            let next = encode(next);
            // Nothing changes (the hot path's questions once answered): no write.
            if next == now {
                break effects;
            }
            match self
                .word
                .compare_exchange(now, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break effects,
                Err(seen) => now = seen,
            }
        };
        if effects.has(Effect::Abort) {
            let cut = std::mem::take(&mut *lock(&self.aborts));
            for abort in cut {
                abort();
            }
        }
        effects
    }

    pub(crate) fn life(&self) -> Life {
        decode(self.word.load(Ordering::SeqCst))
    }

    /// Register the run (see [`Event::Registered`]) with what its effects will need: its
    /// grace, its task's id when the execution already has one, its name for log lines.
    pub(crate) fn register(&self, grace: Duration, task: Option<&str>, label: &str) -> Effects {
        let _ = self.grace.set(grace);
        let _ = self.label.set(label.to_string());
        if let Some(t) = task {
            let _ = self.task_id.set(t.to_string());
        }
        self.send(Event::Registered {
            graced: !grace.is_zero(),
            task: task.is_some(),
        })
    }

    /// The kernel named the run's task and it is saved (see [`Event::TaskNamed`]).
    pub(crate) fn name_task(&self, id: &str) -> Effects {
        let _ = self.task_id.set(id.to_string());
        self.send(Event::TaskNamed)
    }

    /// The task's id, once named.
    pub(crate) fn task_id(&self) -> Option<&str> {
        self.task_id.get().map(String::as_str)
    }

    /// How long the loop waits for a departed client ([`Effect::ArmGrace`]).
    pub(crate) fn grace(&self) -> Duration {
        self.grace.get().copied().unwrap_or_default()
    }

    pub(crate) fn label(&self) -> &str {
        self.label.get().map_or("", String::as_str)
    }

    /// Cut `abort`'s session when the run's upstream is cut; at once if it already is.
    pub(crate) fn arm_abort(&self, abort: Abort) {
        lock(&self.aborts).push(abort);
        self.send(Event::UpstreamOpened);
    }
}

#[cfg(test)]
mod tests;
