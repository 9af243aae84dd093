use super::*;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

fn inbox() -> (Arc<Inbox>, Arc<AtomicUsize>) {
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    (
        Inbox::new(Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        })),
        wakes,
    )
}

const ID: ConnId = ConnId {
    slot: 3,
    generation: 1,
};

#[test]
fn one_wake_per_burst() {
    let (inbox, wakes) = inbox();
    let (job, out) = new_job(ID, 8, &inbox);
    out.send(Reply::StartStream(Vec::new())).unwrap();
    out.send(Reply::Event(b"a".to_vec().into())).unwrap();
    assert_eq!(wakes.load(Ordering::SeqCst), 1);
    let ready = inbox.take_ready();
    assert_eq!(ready.len(), 1);
    let mut got = Vec::new();
    assert!(!job.drain(100, usize::MAX, &mut got));
    assert_eq!(got.len(), 2);
    out.send(Reply::EndStream).unwrap();
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
    drop(out);
    let mut got = Vec::new();
    assert!(job.drain(100, usize::MAX, &mut got));
}

#[test]
fn queued_bytes_count_until_taken_or_dropped_with_the_job() {
    let (inbox, _) = inbox();
    let (job, out) = new_job(ID, 8, &inbox);
    out.send(Reply::StartStream(Vec::new())).unwrap();
    out.send(Reply::Event(vec![0; 1000].into())).unwrap();
    out.send(Reply::Event(vec![0; 500].into())).unwrap();
    assert_eq!(inbox.budget().queued(), 1500);
    let mut got = Vec::new();
    job.drain(2, usize::MAX, &mut got);
    assert_eq!(
        inbox.budget().queued(),
        500,
        "taken by the loop: the output counts it now"
    );
    let (other, other_out) = new_job(ID, 8, &inbox);
    other_out.send(Reply::Event(vec![0; 70].into())).unwrap();
    assert_eq!(inbox.budget().queued(), 570);
    drop(out);
    drop(job);
    // The ready list holds the job until the loop looks at it.
    drop(inbox.take_ready());
    assert_eq!(
        inbox.budget().queued(),
        70,
        "a closed connection's queue is given back"
    );
    drop((other, other_out));
    drop(inbox.take_ready());
    assert_eq!(inbox.budget().queued(), 0);
}

#[test]
fn held_events_wake_the_loop_only_on_flush() {
    let (inbox, wakes) = inbox();
    let (job, out) = new_job(ID, 8, &inbox);
    out.send(Reply::StartStream(Vec::new())).unwrap();
    inbox.take_ready();
    let mut got = Vec::new();
    job.drain(100, usize::MAX, &mut got);
    out.hold(true);
    for b in [b"a", b"b", b"c"] {
        out.send(Reply::Event(b.to_vec().into())).unwrap();
    }
    assert_eq!(wakes.load(Ordering::SeqCst), 1, "held events do not wake");
    out.flush();
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
    out.flush();
    assert_eq!(
        wakes.load(Ordering::SeqCst),
        2,
        "nothing new: no second wake"
    );
    assert_eq!(inbox.take_ready().len(), 1);
    got.clear();
    job.drain(100, usize::MAX, &mut got);
    assert_eq!(got.len(), 3);
    // The end of a stream is never held.
    out.send(Reply::EndStream).unwrap();
    assert_eq!(wakes.load(Ordering::SeqCst), 3);
}

#[test]
fn a_held_worker_on_a_full_queue_wakes_the_loop_before_waiting() {
    let (inbox, wakes) = inbox();
    let (job, out) = new_job(ID, 2, &inbox);
    let t = std::thread::spawn(move || {
        out.hold(true);
        for i in 0..5u8 {
            out.send(Reply::Event(vec![i].into())).unwrap();
        }
        out.hold(false);
    });
    let mut got = Vec::new();
    let clock = crate::clock::SystemClock;
    let deadline = crate::clock::Clock::now(&clock) + Duration::from_secs(10);
    while got.len() < 5 && crate::clock::Clock::now(&clock) < deadline {
        for j in inbox.take_ready() {
            j.drain(10, usize::MAX, &mut got);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    t.join().unwrap();
    assert_eq!(
        got.len(),
        5,
        "the worker never waited on a queue the loop was not told of"
    );
    assert!(wakes.load(Ordering::SeqCst) >= 2);
    drop(job);
}

#[test]
fn a_worker_reads_no_further_while_its_client_is_behind() {
    let (inbox, _) = inbox();
    let (job, out) = new_job(ID, 8, &inbox);
    out.send(Reply::StartStream(Vec::new())).unwrap();
    let mut got = Vec::new();
    job.drain(10, usize::MAX, &mut got);
    // A large event the loop takes past the watermark: congested until a flush clears it.
    out.send(Reply::Event(vec![0; 2 * limits::JOB_QUEUE_BYTES].into()))
        .unwrap();
    job.drain(10, 1024, &mut got);
    let passed = Arc::new(AtomicUsize::new(0));
    let p = passed.clone();
    let t = std::thread::spawn(move || {
        out.wait_writable();
        p.store(1, Ordering::SeqCst);
        out.wait_writable(); // not behind: returns at once
        p.store(2, Ordering::SeqCst);
        out
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(passed.load(Ordering::SeqCst), 0, "waited while behind");
    job.set_congested(false);
    let out = t.join().unwrap();
    assert_eq!(passed.load(Ordering::SeqCst), 2);
    // A stopped job never waits.
    job.set_congested(true);
    job.stop(StopReason::ClientGone);
    out.wait_writable();
}

#[test]
fn full_queue_blocks_until_drained_or_stopped() {
    let (inbox, _) = inbox();
    let (job, out) = new_job(ID, 1, &inbox);
    out.send(Reply::StartStream(Vec::new())).unwrap();
    let t = std::thread::spawn(move || {
        let r1 = out.send(Reply::Event(vec![1].into()));
        let r2 = out.send(Reply::Event(vec![2].into()));
        (r1, r2)
    });
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    job.drain(10, usize::MAX, &mut got);
    std::thread::sleep(Duration::from_millis(50));
    job.stop(StopReason::ClientGone);
    let (r1, r2) = t.join().unwrap();
    assert!(r1.is_ok());
    assert_eq!(r2, Err(Stopped));
}

#[test]
fn shutdown_still_lets_the_terminal_event_through() {
    let (inbox, _) = inbox();
    let (job, out) = new_job(ID, 4, &inbox);
    job.stop(StopReason::Shutdown);
    assert!(out.send(Reply::EndStream).is_ok());
    job.stop(StopReason::ClientGone);
    assert_eq!(out.send(Reply::EndStream), Err(Stopped));
}

#[test]
fn a_stop_cuts_the_sessions_registered_before_it_and_after_it_once_each() {
    let (inbox, _) = inbox();
    let (job, out) = new_job(ID, 4, &inbox);
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    out.arm_abort(Box::new(move || {
        c.fetch_add(1, Ordering::SeqCst);
    }));
    job.stop(StopReason::Shutdown);
    job.stop(StopReason::ClientGone);
    let c = count.clone();
    out.arm_abort(Box::new(move || {
        c.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert!(out.cell().life().shutdown);
    assert_eq!(out.cell().life().client, crate::life::Client::Gone);
}
