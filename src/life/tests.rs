use super::*;
use Effect::*;
use Event as E;

const ENDS: [End; 5] = [End::Open, End::Own, End::Cancel, End::Cancelled, End::Panic];
const CLIENTS: [Client; 4] = [
    Client::Attached,
    Client::Detached,
    Client::Adopted,
    Client::Gone,
];
const EVENTS: [Event; 19] = [
    E::Registered {
        graced: false,
        task: false,
    },
    E::Registered {
        graced: true,
        task: false,
    },
    E::Registered {
        graced: false,
        task: true,
    },
    E::Registered {
        graced: true,
        task: true,
    },
    E::TaskNamed,
    E::RevealSession,
    E::OwnEnd,
    E::Departed,
    E::Cancel,
    E::CancelUnsaved,
    E::CancelSaved,
    E::ClientGone,
    E::GraceOver,
    E::Subscribed,
    E::Shutdown,
    E::UpstreamOpened,
    E::Panicked,
    E::LogEnded,
    E::Released,
];

/// Every life the word can hold (some no run reaches; the table answers them all).
fn lives() -> Vec<Life> {
    let mut v = Vec::new();
    for end in ENDS {
        for client in CLIENTS {
            for bits in 0u32..256 {
                let b = |i: u32| bits & (1 << i) != 0;
                v.push(Life {
                    registered: b(0),
                    graced: b(1),
                    task: b(2),
                    session: b(3),
                    watched: b(4),
                    shutdown: b(5),
                    logged: b(6),
                    released: b(7),
                    end,
                    client,
                });
            }
        }
    }
    v
}

/// A registered run, streaming, nothing else happened.
fn running() -> Life {
    Life {
        registered: true,
        ..Life::NEW
    }
}

fn with(l: Life, f: impl FnOnce(&mut Life)) -> Life {
    let mut l = l;
    f(&mut l);
    l
}

fn fx(list: &[Effect]) -> Effects {
    Effects::of(list)
}

#[test]
fn every_life_and_event_has_one_outcome() {
    let r = running();
    let graced = with(r, |l| l.graced = true);
    // The rows that decide races, written out.
    let table: Vec<(Life, Event, Life, Effects)> = vec![
        // A Stop and the task's naming, in both orders: the second one cancels the task.
        (
            with(r, |l| l.end = End::Cancelled),
            E::TaskNamed,
            with(r, |l| {
                l.end = End::Cancelled;
                l.task = true
            }),
            fx(&[CancelTask, Abort]),
        ),
        (
            with(r, |l| {
                l.end = End::Cancel;
                l.task = true
            }),
            E::CancelSaved,
            with(r, |l| {
                l.end = End::Cancelled;
                l.task = true
            }),
            fx(&[CancelTask, Abort]),
        ),
        // The claim saved before the task is named: nothing to cancel yet, nothing cut (the
        // run must read on until the kernel names the task).
        (
            with(r, |l| l.end = End::Cancel),
            E::CancelSaved,
            with(r, |l| l.end = End::Cancelled),
            Effects::NONE,
        ),
        // A task named while the claim is not saved yet: the claim may be taken back.
        (
            with(r, |l| l.end = End::Cancel),
            E::TaskNamed,
            with(r, |l| {
                l.end = End::Cancel;
                l.task = true
            }),
            Effects::NONE,
        ),
        // An unregistered run cannot be cancelled: answering `cancelled` would be a lie.
        (Life::NEW, E::Cancel, Life::NEW, fx(&[NotFound])),
        // The cancel vs the natural end: the first claim decides both answers.
        (r, E::OwnEnd, with(r, |l| l.end = End::Own), fx(&[EndOwn])),
        (
            r,
            E::Cancel,
            with(r, |l| l.end = End::Cancel),
            fx(&[CancelClaimed]),
        ),
        (
            with(r, |l| l.end = End::Cancel),
            E::OwnEnd,
            with(r, |l| l.end = End::Cancel),
            fx(&[EndCancelled]),
        ),
        (
            with(r, |l| l.end = End::Own),
            E::Cancel,
            with(r, |l| l.end = End::Own),
            fx(&[AlreadyTerminal]),
        ),
        // A second cancel joins the first claim (and so never takes it back).
        (
            with(r, |l| l.end = End::Cancel),
            E::Cancel,
            with(r, |l| l.end = End::Cancel),
            fx(&[CancelJoined]),
        ),
        (
            with(r, |l| l.end = End::Cancel),
            E::CancelUnsaved,
            r,
            Effects::NONE,
        ),
        (
            with(r, |l| l.end = End::Cancelled),
            E::CancelUnsaved,
            with(r, |l| l.end = End::Cancelled),
            Effects::NONE,
        ),
        // The client gone: with a grace the run goes on to its deadline, adopted at once if
        // a subscriber watches; without one, cut.
        (
            r,
            E::ClientGone,
            with(r, |l| l.client = Client::Gone),
            fx(&[Abort]),
        ),
        (
            graced,
            E::ClientGone,
            with(graced, |l| l.client = Client::Detached),
            fx(&[ArmGrace]),
        ),
        (
            with(graced, |l| l.watched = true),
            E::ClientGone,
            with(graced, |l| {
                l.watched = true;
                l.client = Client::Adopted
            }),
            Effects::NONE,
        ),
        // Its end in the log: a client leaving changes nothing, a grace running out neither.
        (
            with(graced, |l| l.logged = true),
            E::ClientGone,
            with(graced, |l| {
                l.logged = true;
                l.client = Client::Gone
            }),
            Effects::NONE,
        ),
        (
            with(graced, |l| l.client = Client::Detached),
            E::GraceOver,
            with(graced, |l| l.client = Client::Gone),
            fx(&[Abort]),
        ),
        (
            with(graced, |l| l.client = Client::Adopted),
            E::GraceOver,
            with(graced, |l| l.client = Client::Adopted),
            Effects::NONE,
        ),
        (
            with(graced, |l| l.client = Client::Detached),
            E::Subscribed,
            with(graced, |l| {
                l.client = Client::Adopted;
                l.watched = true
            }),
            Effects::NONE,
        ),
        // A subscriber after the grace ran out is too late.
        (
            with(graced, |l| l.client = Client::Gone),
            E::Subscribed,
            with(graced, |l| {
                l.client = Client::Gone;
                l.watched = true
            }),
            Effects::NONE,
        ),
        // The driver finds its client gone: with nothing decided it abandons the task; after
        // its own end or a saved cancel, nothing.
        (
            with(r, |l| l.client = Client::Gone),
            E::Departed,
            with(r, |l| {
                l.client = Client::Gone;
                l.end = End::Own
            }),
            fx(&[AbandonTask]),
        ),
        (
            with(r, |l| l.end = End::Own),
            E::Departed,
            with(r, |l| l.end = End::Own),
            Effects::NONE,
        ),
        (
            with(r, |l| l.end = End::Cancelled),
            E::Departed,
            with(r, |l| l.end = End::Cancelled),
            Effects::NONE,
        ),
        // Shutdown cuts once, whatever else holds.
        (
            with(r, |l| l.client = Client::Detached),
            E::Shutdown,
            with(r, |l| {
                l.client = Client::Detached;
                l.shutdown = true
            }),
            fx(&[Abort]),
        ),
        // A session opened after the cut is cut at once.
        (
            with(r, |l| l.shutdown = true),
            E::UpstreamOpened,
            with(r, |l| l.shutdown = true),
            fx(&[Abort]),
        ),
        (
            with(r, |l| l.end = End::Cancelled),
            E::UpstreamOpened,
            with(r, |l| l.end = End::Cancelled),
            Effects::NONE,
        ),
        // The session event once.
        (
            r,
            E::RevealSession,
            with(r, |l| l.session = true),
            fx(&[EmitSession]),
        ),
        (
            with(r, |l| l.session = true),
            E::RevealSession,
            with(r, |l| l.session = true),
            Effects::NONE,
        ),
        // A panic fails closed, even after a cancel's claim.
        (
            with(r, |l| l.end = End::Cancel),
            E::Panicked,
            with(r, |l| l.end = End::Panic),
            fx(&[FailClosed]),
        ),
        // Released: nothing moves; a cancel answers `already_terminal`.
        (
            with(r, |l| l.released = true),
            E::Cancel,
            with(r, |l| l.released = true),
            fx(&[AlreadyTerminal]),
        ),
        (
            with(r, |l| l.released = true),
            E::ClientGone,
            with(r, |l| l.released = true),
            Effects::NONE,
        ),
    ];
    for (from, ev, to, effects) in &table {
        assert_eq!(transition(*from, *ev), (*to, *effects), "{from:?} + {ev:?}");
    }

    // Every pair: the rules each kind of event keeps.
    let mut rows = 0;
    for from in lives() {
        for ev in EVENTS {
            rows += 1;
            let (to, effects) = transition(from, ev);
            let at = format!("{from:?} + {ev:?} -> {to:?} {effects:?}");
            assert_eq!(decode(encode(to)), to, "{at}");
            if from.released {
                let expect = match ev {
                    E::Cancel => fx(&[AlreadyTerminal]),
                    _ => Effects::NONE,
                };
                assert_eq!((to, effects), (from, expect), "{at}");
                continue;
            }
            // Facts only move forward, and only through their own events.
            let mv = |a: bool, b: bool, owns: bool| {
                assert!(!a || b, "a fact went back: {at}");
                assert!(a == b || owns, "moved by another event: {at}");
            };
            let registered = matches!(ev, E::Registered { .. });
            mv(from.registered, to.registered, registered);
            mv(from.task, to.task, registered || ev == E::TaskNamed);
            mv(from.session, to.session, ev == E::RevealSession);
            mv(from.watched, to.watched, ev == E::Subscribed);
            mv(from.shutdown, to.shutdown, ev == E::Shutdown);
            mv(from.logged, to.logged, ev == E::LogEnded);
            mv(from.released, to.released, ev == E::Released);
            assert!(from.graced == to.graced || registered, "{at}");
            // The client never comes back; only the loop and a subscriber move it.
            if from.client != to.client {
                assert!(
                    matches!(ev, E::ClientGone | E::GraceOver | E::Subscribed),
                    "{at}"
                );
                assert_ne!(to.client, Client::Attached, "{at}");
                assert_ne!(from.client, Client::Gone, "{at}");
            }
            // Only the end's own events decide it, and a decided end is changed only by a
            // panic or a claim taken back.
            if from.end != to.end {
                assert!(
                    matches!(
                        ev,
                        E::OwnEnd
                            | E::Departed
                            | E::Cancel
                            | E::CancelUnsaved
                            | E::CancelSaved
                            | E::Panicked
                    ),
                    "{at}"
                );
                match (from.end, to.end) {
                    (End::Open, _) | (_, End::Panic) => {}
                    (End::Cancel, End::Open | End::Cancelled) => {}
                    _ => panic!("a decided end changed: {at}"),
                }
            }
            // What each event may ask for.
            let allowed = match ev {
                E::ClientGone | E::GraceOver | E::Shutdown | E::UpstreamOpened => {
                    fx(&[Abort, ArmGrace])
                }
                E::TaskNamed | E::CancelSaved => fx(&[CancelTask, Abort]),
                E::Cancel => fx(&[CancelClaimed, CancelJoined, AlreadyTerminal, NotFound]),
                E::OwnEnd => fx(&[EndOwn, EndCancelled]),
                E::Departed => fx(&[AbandonTask]),
                E::RevealSession => fx(&[EmitSession]),
                E::Panicked => fx(&[FailClosed]),
                _ => Effects::NONE,
            };
            assert_eq!(effects.0 & !allowed.0, 0, "{at}");
            // The loop only ever gets Abort and ArmGrace; the route's answer is exactly one.
            if ev == E::Cancel {
                assert_eq!(effects.0.count_ones(), 1, "{at}");
            }
            if ev == E::OwnEnd {
                assert_eq!(effects.0.count_ones(), 1, "{at}");
            }
            // Whatever is cut, was to be cut: an Abort leaves a severed life.
            if effects.has(Abort) {
                assert!(to.severed(), "{at}");
            }
            // A grace is armed only for a run that has one, and only as its client detaches.
            if effects.has(ArmGrace) {
                assert!(to.graced && to.client == Client::Detached, "{at}");
            }
            // CancelTask only with both facts known, and only by the event that learnt the
            // second one.
            if effects.has(CancelTask) {
                assert!(to.task && to.end == End::Cancelled, "{at}");
                assert!(!(from.task && from.end == End::Cancelled), "{at}");
            }
        }
    }
    assert_eq!(rows, 5 * 4 * 256 * EVENTS.len());
}

/// Every interleaving of two actors' events from `from`, each actor's events in blocks that
/// happen at once (what an actor does under the thread's lock); the effects each side saw.
type Seen = (Life, Vec<Effects>, Vec<Effects>);

fn interleavings(from: Life, a: &[&[Event]], b: &[&[Event]]) -> Vec<Seen> {
    fn block(l: Life, evs: &[Event], seen: &mut Vec<Effects>) -> Life {
        evs.iter().fold(l, |l, e| {
            let (n, f) = transition(l, *e);
            seen.push(f);
            n
        })
    }
    fn go(
        l: Life,
        a: &[&[Event]],
        b: &[&[Event]],
        fa: &[Effects],
        fb: &[Effects],
        out: &mut Vec<Seen>,
    ) {
        if a.is_empty() && b.is_empty() {
            out.push((l, fa.to_vec(), fb.to_vec()));
            return;
        }
        if let Some((evs, rest)) = a.split_first() {
            let mut fa = fa.to_vec();
            let n = block(l, evs, &mut fa);
            go(n, rest, b, &fa, fb, out);
        }
        if let Some((evs, rest)) = b.split_first() {
            let mut fb = fb.to_vec();
            let n = block(l, evs, &mut fb);
            go(n, a, rest, fa, &fb, out);
        }
    }
    let mut out = Vec::new();
    go(from, a, b, &[], &[], &mut out);
    out
}

fn count(fx: &[Effects], e: Effect) -> usize {
    fx.iter().filter(|f| f.has(e)).count()
}

#[test]
fn a_saved_stop_and_the_tasks_naming_cancel_the_task_exactly_once_in_every_order() {
    // The route claims, saves and publishes under the thread's lock; the run names its task
    // after its own save (no lock), and decides its end under the lock.
    let route: &[&[Event]] = &[&[E::Cancel, E::CancelSaved]];
    let run: &[&[Event]] = &[&[E::TaskNamed], &[E::OwnEnd]];
    let mut orders = 0;
    for (end, fr, fu) in interleavings(running(), route, run) {
        orders += 1;
        let cancels = count(&fr, CancelTask) + count(&fu, CancelTask);
        if fr[0].has(CancelClaimed) {
            // `cancelled` was answered: the run ends so and its task is cancelled once, by
            // whichever of the two learnt second.
            assert_eq!(cancels, 1, "{fr:?} {fu:?}");
            assert!(fu[1].has(EndCancelled), "{fr:?} {fu:?}");
            assert_eq!(end.end, End::Cancelled);
        } else {
            // The run decided first: `already_terminal`, and nobody cancels its task.
            assert!(fr[0].has(AlreadyTerminal), "{fr:?}");
            assert_eq!(cancels, 0);
            assert!(fu[1].has(EndOwn));
        }
    }
    assert_eq!(orders, 3);
    // A claim taken back (its save failed) cancels nothing and changes no answer.
    let unsaved: &[&[Event]] = &[&[E::Cancel, E::CancelUnsaved]];
    for (end, fr, fu) in interleavings(running(), unsaved, run) {
        assert_eq!(count(&fr, CancelTask) + count(&fu, CancelTask), 0);
        assert!(fu[1].has(EndOwn), "{fr:?} {fu:?}");
        assert_eq!(end.end, End::Own);
    }
}

#[test]
fn a_subscriber_and_a_departing_client_adopt_the_run_in_either_order() {
    let graced = with(running(), |l| l.graced = true);
    let lp: &[&[Event]] = &[&[E::ClientGone], &[E::GraceOver]];
    for (end, fl, _) in interleavings(graced, lp, &[&[E::Subscribed]]) {
        // The subscriber came before the deadline, or after it: never cut while adopted.
        match end.client {
            Client::Adopted => assert_eq!(count(&fl, Abort), 0),
            Client::Gone => assert_eq!(count(&fl, Abort), 1),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_cell_moves_as_the_table_says_from_any_thread() {
    let cell = std::sync::Arc::new(Cell::default());
    cell.register(Duration::ZERO, None, "r1");
    // A cancel and the run's own end at once: exactly one of them wins.
    let c = cell.clone();
    let route = std::thread::spawn(move || c.send(E::Cancel));
    let own = cell.send(E::OwnEnd);
    let cancel = route.join().unwrap();
    assert!(
        (own.has(EndOwn) && cancel.has(AlreadyTerminal))
            || (own.has(EndCancelled) && cancel.has(CancelClaimed)),
        "{own:?} {cancel:?}"
    );
    assert_eq!(cell.send(E::Released), Effects::NONE);
    assert!(cell.life().released);
}

#[test]
fn a_session_registered_after_the_cut_is_cut_at_once_and_one_before_it_by_the_cut() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cuts = std::sync::Arc::new(AtomicUsize::new(0));
    let counting = |n: &std::sync::Arc<AtomicUsize>| -> super::Abort {
        let n = n.clone();
        Box::new(move || {
            n.fetch_add(1, Ordering::SeqCst);
        })
    };
    let cell = Cell::default();
    cell.arm_abort(counting(&cuts));
    assert_eq!(cuts.load(Ordering::SeqCst), 0);
    cell.send(E::ClientGone);
    assert_eq!(cuts.load(Ordering::SeqCst), 1);
    cell.arm_abort(counting(&cuts));
    assert_eq!(cuts.load(Ordering::SeqCst), 2);
}
