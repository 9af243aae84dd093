use super::*;

const MIB: usize = 1 << 20;

#[test]
fn spent_past_the_limit_available_again_below_seven_eighths() {
    let mut b = OutputBudget::new(800);
    assert!(!b.update(800), "at the limit is within it");
    assert!(!b.is_over());
    assert!(b.update(801));
    assert!(b.is_over());
    // Hysteresis: back under the limit is not enough.
    assert!(!b.update(750));
    assert!(b.is_over());
    assert!(!b.update(701));
    assert!(b.update(700));
    assert!(!b.is_over());
    assert!(!b.update(799));
}

#[test]
fn shares_add_up_and_are_given_back() {
    let mut b = OutputBudget::new(1000);
    let (mut x, mut y) = (Share::default(), Share::default());
    b.set(&mut x, 600);
    b.set(&mut y, 300);
    assert_eq!(b.held(50), 950);
    b.set(&mut x, 100); // written
    assert_eq!(b.held(0), 400);
    b.set(&mut y, 900); // grew
    assert_eq!(b.held(0), 1000);
    b.release(x);
    assert_eq!(b.held(0), 900);
    b.release(y);
    assert_eq!(b.held(7), 7);
}

/// The budget's rules as one table: (spent, reads starved, held by clients behind, limit)
/// → a new stream refused. Clients that keep up never refuse anyone (issue 45, fault 1);
/// paused readers do once they hold a quarter (issue 36, fault 2).
#[test]
fn the_refusal_rule_as_a_table() {
    let rows: &[(bool, bool, usize, usize, bool)] = &[
        (false, false, 0, 100, false),
        (false, false, 100, 100, false), // not spent: never refused
        (true, false, 0, 100, false),    // spent by clients that keep up
        (false, true, 24, 100, false),   // reads wait, clients behind hold under a quarter
        (false, true, 25, 100, true),
        (true, false, 25, 100, true),
        (true, true, 99, 100, true),
    ];
    for &(spent, starved, behind, limit, refused) in rows {
        assert_eq!(
            refuses_stream(spent, starved, behind, limit),
            refused,
            "{spent} {starved} {behind} {limit}"
        );
    }
    // Behind: output pending and no write progress for BEHIND_AFTER.
    assert!(!is_behind(0, Duration::from_secs(60)));
    assert!(!is_behind(1, BEHIND_AFTER - Duration::from_millis(1)));
    assert!(is_behind(1, BEHIND_AFTER));
    // The limit a run is paused above: the watermark, or OUTPUT_BEHIND when squeezed.
    assert_eq!(out_limit(256 * 1024, false), 256 * 1024);
    assert_eq!(out_limit(256 * 1024, true), crate::limits::OUTPUT_BEHIND);
    assert_eq!(out_limit(1024, true), 1024);
    // A partial event's cost: nothing under GATE_FROM, then three times it in steps.
    assert_eq!(gate_need(GATE_FROM - 1), 0);
    assert_eq!(gate_need(GATE_FROM), GATE_STEP);
    assert_eq!(gate_need(GATE_STEP), 3 * GATE_STEP);
    assert_eq!(gate_need(GATE_STEP + 1), 4 * GATE_STEP);
}

type Gate = ReadHold;
type Held = std::sync::mpsc::Receiver<(bool, Gate)>;

/// `gate.hold(bytes)` on a thread: its answer if it came within `wait`, else the channel
/// it will come on.
fn hold_within(mut gate: Gate, bytes: usize, wait: Duration) -> Result<(bool, Gate), Held> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = gate.hold(bytes);
        let _ = tx.send((r, gate));
    });
    rx.recv_timeout(wait).map_err(|_| rx)
}

/// Well under `READ_WAIT_POLL`: an answer this fast came from a wake-up, not the poll.
const WOKEN: Duration = Duration::from_millis(500);
const WAITS: Duration = Duration::from_millis(300);

#[test]
fn large_reads_wait_for_room_in_the_output_budget_the_oldest_first() {
    let budget = Budget::new(16 * MIB);
    let never = || Arc::new(AtomicBool::new(false));
    let (ga, gb) = (budget.read_hold(never()), budget.read_hold(never()));
    let (granted, ga) = hold_within(ga, 6 * MIB, WOKEN).unwrap();
    assert!(granted);
    // Output held for paused clients fills the rest: B's read would pass the budget.
    budget.counted_unsent(8 * MIB);
    let rb = hold_within(gb, 4 * MIB, WAITS)
        .err()
        .expect("B waits: 8 + 6 + 4 > 16");
    assert_eq!(budget.reading(), 6 * MIB);
    assert!(budget.reads_starved());
    // A, the oldest reader, goes on past the budget while it is not spent (14 of 16):
    // readers that each hold part of an event never all wait for each other.
    let (granted, ga) = hold_within(ga, 12 * MIB, WAITS).expect("the oldest goes on");
    assert!(granted);
    // A's event is handled: its memory goes back and B, woken, reads.
    let (_, ga) = hold_within(ga, 0, WOKEN).unwrap();
    let (granted, gb) = rb.recv_timeout(WOKEN).expect("B is woken");
    assert!(granted);
    assert_eq!(budget.reading(), 4 * MIB);
    // B is the oldest now, but the budget is spent (15 of 16 held by output): it waits
    // until the loop counts output going out.
    budget.counted_unsent(15 * MIB);
    let rb = hold_within(gb, 8 * MIB, WAITS)
        .err()
        .expect("spent: even the oldest waits");
    budget.counted_unsent(2 * MIB);
    let (granted, gb) = rb.recv_timeout(WOKEN).expect("woken by the loop's count");
    assert!(granted);
    drop((ga, gb));
    assert_eq!(
        budget.reading(),
        0,
        "dropped holds give back what they held"
    );
    assert!(!budget.reads_starved());
}

#[test]
fn an_aborted_session_stops_its_reads_waiting_for_room() {
    let budget = Budget::new(4 * MIB);
    budget.counted_unsent(4 * MIB);
    let aborted = Arc::new(AtomicBool::new(false));
    let g = budget.read_hold(aborted.clone());
    let r = hold_within(g, 2 * MIB, WAITS)
        .err()
        .expect("spent: it waits");
    // What the session's aborter does (cancel, client gone, shutdown).
    aborted.store(true, Ordering::SeqCst);
    budget.wake_readers();
    let (granted, g) = r.recv_timeout(WOKEN).expect("woken by the aborter");
    assert!(!granted, "an aborted session reads no more");
    drop(g);
    assert_eq!(budget.reading(), 0);
}
