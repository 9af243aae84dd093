//! A run's life as one value (issue 43): who decided how it ends, and where its client is.
//! Every actor — the run's driver, the cancel route, the loop's stop (client gone, grace
//! over, shutdown), a subscriber that adopts a detached run, the panic guard — sends the
//! cell an [`Event`]; [`step`] (pure) gives the next [`Life`] and the [`Effect`]s to carry
//! out, which the caller performs after the transition (never under a lock). The table of
//! every (state, event) pair is `tests::every_state_and_event_has_one_outcome`, and
//! docs/LIFECYCLE.md names it instead of describing the orderings in prose.
//!
//! The state lives in one atomic word ([`RunCell`]), so the loop can move it (a client gone,
//! a grace deadline) without taking a lock a worker takes.

use std::sync::atomic::{AtomicU64, Ordering};

/// Who decided how the run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    /// The run itself: its terminal event (or interrupt) is on its way. A client that
    /// leaves after this point cancels nothing.
    Own,
    /// The cancel route claimed the end; its save is under way (taken back if it fails).
    Cancel,
    /// The cancel route's claim is saved: the run ends `CANCELLED`, and a task id the kernel
    /// names from now on is cancelled at once.
    Cancelled,
    /// The run panicked: its task is cancelled and its execution retired.
    Panic,
}

/// Where the run's client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    Attached,
    /// Gone, and the run goes on for the disconnect grace; the deadline is the loop's alarm
    /// (`RunTee` arms it through `Outbox::alarm`).
    Detached,
    /// Gone, and a subscriber re-attached within the grace: the run goes on to its end.
    Adopted,
    /// Gone for good (no grace, or the grace ran out): upstream is aborted, the run ends as a
    /// disconnect.
    Gone,
}

/// A run's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// Admitted and streaming; nobody has decided its end.
    Streaming(Client),
    /// Its end is decided (and by whom); its stream may still be going out.
    Ending(By, Client),
    /// It released its thread: late events change nothing.
    Ended,
}

/// What happened to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The driver reached its end (a terminal outcome or an interrupt is known).
    OwnEnd,
    /// The cancel route claims the end (before it saves the retirement).
    Cancel,
    /// The cancel route's save failed: its claim is taken back.
    CancelUnsaved,
    /// The cancel route's claim is saved.
    CancelSaved,
    /// The client's connection went away; `grace`: a disconnect grace is configured.
    ClientGone { grace: bool },
    /// The grace deadline passed (the loop's timer).
    GraceOver,
    /// A subscriber attached to the run.
    Adopted,
    /// The drain's grace ended: every run is aborted and ends `SERVER_SHUTTING_DOWN`.
    Shutdown,
    /// The run panicked.
    Panicked,
    /// The run released its thread.
    Released,
}

/// What the caller of a transition carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Cut the run's upstream I/O short (its worker then reaches its end).
    Abort,
    /// Keep the run for the disconnect grace: arm its deadline.
    ArmGrace,
    /// The cancel route was first: it answers `cancelled`.
    CancelClaimed,
    /// The run had decided its own end: the cancel route answers `already_terminal`.
    AlreadyTerminal,
    /// The driver's end is `CANCELLED`, whatever the kernel said last.
    EndCancelled,
    /// The driver's end is its own.
    EndOwn,
    /// After a panic: cancel the task and retire the execution (fail closed).
    FailClosed,
}

/// The one transition function.
pub(crate) fn step(life: Life, event: Event) -> (Life, &'static [Effect]) {
    use Client::*;
    use Effect::*;
    use Event as E;
    use Life::*;
    match (life, event) {
        (Ended, E::Cancel) => (Ended, &[AlreadyTerminal]),
        (Ended, _) => (Ended, &[]),
        (_, E::Released) => (Ended, &[]),

        // The driver's end: one decision with the cancel route.
        (Streaming(c), E::OwnEnd) => (Ending(By::Own, c), &[EndOwn]),
        (Ending(by @ (By::Cancel | By::Cancelled), c), E::OwnEnd) => {
            (Ending(by, c), &[EndCancelled])
        }
        (Ending(by, c), E::OwnEnd) => (Ending(by, c), &[EndOwn]),

        // The cancel route: first claim wins; a repeated claim is the same claim.
        (Streaming(c), E::Cancel) => (Ending(By::Cancel, c), &[CancelClaimed]),
        (Ending(by @ (By::Cancel | By::Cancelled), c), E::Cancel) => {
            (Ending(by, c), &[CancelClaimed])
        }
        (Ending(by, c), E::Cancel) => (Ending(by, c), &[AlreadyTerminal]),
        // Only a claim not yet saved is taken back: a second route's failed save cannot undo
        // the first one's saved cancel.
        (Ending(By::Cancel, c), E::CancelUnsaved) => (Streaming(c), &[]),
        (l @ (Streaming(_) | Ending(..)), E::CancelUnsaved) => (l, &[]),
        (Ending(By::Cancel, c), E::CancelSaved) => (Ending(By::Cancelled, c), &[]),
        (l @ (Streaming(_) | Ending(..)), E::CancelSaved) => (l, &[]),

        // The client goes: with a grace the run goes on to its deadline (a decided end is
        // still written to the replay log for a subscriber); without one, at once.
        (Streaming(Attached), E::ClientGone { grace: true }) => (Streaming(Detached), &[ArmGrace]),
        (Ending(by, Attached), E::ClientGone { grace: true }) => {
            (Ending(by, Detached), &[ArmGrace])
        }
        (Streaming(Attached), E::ClientGone { grace: false }) => (Streaming(Gone), &[Abort]),
        (Ending(by, Attached), E::ClientGone { grace: false }) => (Ending(by, Gone), &[Abort]),
        (l @ (Streaming(_) | Ending(..)), E::ClientGone { .. }) => (l, &[]),

        // The grace: nobody came back, or somebody did.
        (Streaming(Detached), E::GraceOver) => (Streaming(Gone), &[Abort]),
        (Ending(by, Detached), E::GraceOver) => (Ending(by, Gone), &[Abort]),
        (l @ (Streaming(_) | Ending(..)), E::GraceOver) => (l, &[]),
        (Streaming(Detached), E::Adopted) => (Streaming(Adopted), &[]),
        (Ending(by, Detached), E::Adopted) => (Ending(by, Adopted), &[]),
        (l @ (Streaming(_) | Ending(..)), E::Adopted) => (l, &[]),

        // A drain's end aborts whatever runs; the run ends on its own (shutting down).
        (l @ (Streaming(_) | Ending(..)), E::Shutdown) => (l, &[Abort]),

        // A panic fails closed, whoever decided the end.
        (Streaming(c) | Ending(_, c), E::Panicked) => (Ending(By::Panic, c), &[FailClosed]),
    }
}

impl Life {
    /// Where the run's client is (`Gone` once the run released its thread).
    pub(crate) fn client(self) -> Client {
        match self {
            Life::Streaming(c) | Life::Ending(_, c) => c,
            Life::Ended => Client::Gone,
        }
    }
}

/// A run's cell: its [`Life`] in one atomic word, moved by [`RunCell::send`].
#[derive(Debug)]
pub(crate) struct RunCell {
    word: AtomicU64,
}

impl Default for RunCell {
    fn default() -> RunCell {
        RunCell {
            word: AtomicU64::new(encode(Life::Streaming(Client::Attached))),
        }
    }
}

fn encode(l: Life) -> u64 {
    let client = |c: Client| match c {
        Client::Attached => 0,
        Client::Detached => 1,
        Client::Adopted => 2,
        Client::Gone => 3,
    };
    match l {
        Life::Streaming(c) => client(c),
        Life::Ending(by, c) => {
            let by = match by {
                By::Own => 1,
                By::Cancel => 2,
                By::Panic => 3,
                By::Cancelled => 4,
            };
            (by << 4) | client(c)
        }
        Life::Ended => 0xff,
    }
}

fn decode(w: u64) -> Life {
    if w == 0xff {
        return Life::Ended;
    }
    let client = match w & 0xf {
        0 => Client::Attached,
        1 => Client::Detached,
        2 => Client::Adopted,
        _ => Client::Gone,
    };
    match w >> 4 {
        0 => Life::Streaming(client),
        1 => Life::Ending(By::Own, client),
        2 => Life::Ending(By::Cancel, client),
        3 => Life::Ending(By::Panic, client),
        _ => Life::Ending(By::Cancelled, client),
    }
}

impl RunCell {
    /// Apply `event`; the effects for the caller to carry out.
    pub(crate) fn send(&self, event: Event) -> &'static [Effect] {
        let mut now = self.word.load(Ordering::SeqCst);
        loop {
            let (next, effects) = step(decode(now), event);
            match self
                .word
                .compare_exchange(now, encode(next), Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return effects,
                Err(seen) => now = seen,
            }
        }
    }

    pub(crate) fn life(&self) -> Life {
        decode(self.word.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Client::*;
    use Effect::*;
    use Event as E;
    use Life::*;

    const CLIENTS: [Client; 4] = [Attached, Detached, Adopted, Gone];
    const EVENTS: [Event; 11] = [
        E::OwnEnd,
        E::Cancel,
        E::CancelUnsaved,
        E::CancelSaved,
        E::ClientGone { grace: true },
        E::ClientGone { grace: false },
        E::GraceOver,
        E::Adopted,
        E::Shutdown,
        E::Panicked,
        E::Released,
    ];

    fn lives() -> Vec<Life> {
        let mut v: Vec<Life> = CLIENTS.iter().map(|c| Streaming(*c)).collect();
        for by in [By::Own, By::Cancel, By::Cancelled, By::Panic] {
            v.extend(CLIENTS.iter().map(|c| Ending(by, *c)));
        }
        v.push(Ended);
        v
    }

    #[test]
    fn every_state_and_event_has_one_outcome() {
        // The rows that matter, written out; every other pair changes nothing and does
        // nothing (checked below), so a new arm that does something shows here.
        let table: &[(Life, Event, Life, &[Effect])] = &[
            // Cancel vs the natural end: the first claim decides both answers.
            (
                Streaming(Attached),
                E::OwnEnd,
                Ending(By::Own, Attached),
                &[EndOwn],
            ),
            (
                Streaming(Attached),
                E::Cancel,
                Ending(By::Cancel, Attached),
                &[CancelClaimed],
            ),
            (
                Ending(By::Cancel, Attached),
                E::OwnEnd,
                Ending(By::Cancel, Attached),
                &[EndCancelled],
            ),
            (
                Ending(By::Own, Attached),
                E::Cancel,
                Ending(By::Own, Attached),
                &[AlreadyTerminal],
            ),
            (
                Ending(By::Cancel, Attached),
                E::Cancel,
                Ending(By::Cancel, Attached),
                &[CancelClaimed],
            ),
            // A cancel whose save failed takes its claim back: the run ends on its own.
            (
                Ending(By::Cancel, Attached),
                E::CancelUnsaved,
                Streaming(Attached),
                &[],
            ),
            // The claim saved: the run ends cancelled; a second route's failed save changes
            // nothing; the run's own end after it is cancelled.
            (
                Ending(By::Cancel, Attached),
                E::CancelSaved,
                Ending(By::Cancelled, Attached),
                &[],
            ),
            (
                Ending(By::Cancelled, Attached),
                E::CancelUnsaved,
                Ending(By::Cancelled, Attached),
                &[],
            ),
            (
                Ending(By::Cancelled, Detached),
                E::OwnEnd,
                Ending(By::Cancelled, Detached),
                &[EndCancelled],
            ),
            (
                Streaming(Attached),
                E::CancelSaved,
                Streaming(Attached),
                &[],
            ),
            // Client gone, with and without a grace; after the end is decided.
            (
                Streaming(Attached),
                E::ClientGone { grace: false },
                Streaming(Gone),
                &[Abort],
            ),
            (
                Streaming(Attached),
                E::ClientGone { grace: true },
                Streaming(Detached),
                &[ArmGrace],
            ),
            // A decided end still goes to the replay log: the grace holds until it is there.
            (
                Ending(By::Own, Attached),
                E::ClientGone { grace: true },
                Ending(By::Own, Detached),
                &[ArmGrace],
            ),
            (
                Ending(By::Cancel, Attached),
                E::ClientGone { grace: false },
                Ending(By::Cancel, Gone),
                &[Abort],
            ),
            // A subscriber came within the grace: the deadline finds the run adopted.
            (
                Ending(By::Own, Detached),
                E::Adopted,
                Ending(By::Own, Adopted),
                &[],
            ),
            (Streaming(Detached), E::GraceOver, Streaming(Gone), &[Abort]),
            (Streaming(Detached), E::Adopted, Streaming(Adopted), &[]),
            (Streaming(Adopted), E::GraceOver, Streaming(Adopted), &[]),
            (
                Ending(By::Own, Detached),
                E::GraceOver,
                Ending(By::Own, Gone),
                &[Abort],
            ),
            // A subscriber after the grace ran out is too late: the run is already stopping.
            (Streaming(Gone), E::Adopted, Streaming(Gone), &[]),
            // A subscriber of an attached run changes nothing.
            (Streaming(Attached), E::Adopted, Streaming(Attached), &[]),
            // Drain: every live run is aborted, whatever its state.
            (
                Streaming(Detached),
                E::Shutdown,
                Streaming(Detached),
                &[Abort],
            ),
            (
                Ending(By::Cancel, Gone),
                E::Shutdown,
                Ending(By::Cancel, Gone),
                &[Abort],
            ),
            // Panic: fail closed, even after a cancel's claim.
            (
                Streaming(Attached),
                E::Panicked,
                Ending(By::Panic, Attached),
                &[FailClosed],
            ),
            (
                Ending(By::Cancel, Gone),
                E::Panicked,
                Ending(By::Panic, Gone),
                &[FailClosed],
            ),
            // Released: the end of every life; after it nothing moves.
            (Streaming(Detached), E::Released, Ended, &[]),
            (Ended, E::Cancel, Ended, &[AlreadyTerminal]),
            (Ended, E::ClientGone { grace: false }, Ended, &[]),
            (Ended, E::Panicked, Ended, &[]),
        ];
        for (from, ev, to, effects) in table {
            assert_eq!(step(*from, *ev), (*to, *effects), "{from:?} + {ev:?}");
        }
        let mut rows = 0;
        for from in lives() {
            for ev in EVENTS {
                rows += 1;
                let (to, effects) = step(from, ev);
                // Every outcome is a state of the machine and round-trips through the word.
                assert_eq!(decode(encode(to)), to);
                if table.iter().any(|(f, e, ..)| *f == from && *e == ev) {
                    continue;
                }
                // Pairs outside the table follow the table's rules for their kind.
                match (from, ev) {
                    (_, E::Released) => assert_eq!(to, Ended),
                    (Ended, _) => assert_eq!((to, effects), (Ended, &[][..])),
                    (_, E::Shutdown) => assert_eq!((to, effects), (from, &[Abort][..])),
                    (_, E::Panicked) => assert_eq!(effects, &[FailClosed]),
                    (Streaming(_), E::OwnEnd) => assert_eq!(effects, &[EndOwn]),
                    (Streaming(_), E::Cancel) => assert_eq!(effects, &[CancelClaimed]),
                    (Ending(By::Cancel | By::Cancelled, _), E::OwnEnd) => {
                        assert_eq!(effects, &[EndCancelled])
                    }
                    (Ending(..), E::OwnEnd) => assert_eq!(effects, &[EndOwn]),
                    (Ending(By::Cancel | By::Cancelled, _), E::Cancel) => {
                        assert_eq!(effects, &[CancelClaimed])
                    }
                    (Ending(..), E::Cancel) => assert_eq!(effects, &[AlreadyTerminal]),
                    (Ending(By::Cancel, c), E::CancelUnsaved) => assert_eq!(to, Streaming(c)),
                    (Ending(By::Cancel, c), E::CancelSaved) => {
                        assert_eq!(to, Ending(By::Cancelled, c))
                    }
                    (Streaming(Detached) | Ending(_, Detached), E::GraceOver) => {
                        assert_eq!(effects, &[Abort])
                    }
                    (Streaming(Detached) | Ending(_, Detached), E::Adopted) => {
                        assert!(effects.is_empty())
                    }
                    (Streaming(Attached) | Ending(_, Attached), E::ClientGone { .. }) => {
                        assert!(!effects.is_empty())
                    }
                    _ => assert_eq!((to, effects), (from, &[][..]), "{from:?} + {ev:?}"),
                }
            }
        }
        assert_eq!(rows, 21 * 11);
    }

    #[test]
    fn the_cell_moves_as_the_table_says_from_any_thread() {
        let cell = std::sync::Arc::new(RunCell::default());
        // A cancel and the run's own end at once: exactly one of them wins.
        let c = cell.clone();
        let route = std::thread::spawn(move || c.send(E::Cancel));
        let own = cell.send(E::OwnEnd);
        let cancel = route.join().unwrap();
        match (own, cancel) {
            ([EndOwn], [AlreadyTerminal]) | ([EndCancelled], [CancelClaimed]) => {}
            other => panic!("both or neither won: {other:?}"),
        }
        assert_eq!(cell.send(E::Released), &[]);
        assert_eq!(cell.life(), Ended);
    }
}
