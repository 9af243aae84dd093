use std::sync::atomic::Ordering;

use super::mem::MemFiles;
use super::*;
use crate::conversation::log::tests::{answer, user};

fn idle(_: &ThreadKey) -> Status {
    Status::Idle
}

fn key(id: &str) -> ThreadKey {
    ThreadKey::shared(id)
}

fn store(files: &Arc<MemFiles>) -> Conversations {
    Conversations::new(files.clone(), Bounds::default())
}

/// A turn admitted (its input appended and indexed), as the registry does it.
fn begin(c: &Conversations, k: &ThreadKey, at: u64, run: &str, messages: Vec<Value>) {
    let b = c
        .begin_turn(k, at, run, &idle, |_| (messages, true))
        .unwrap();
    c.admitted(k, b, &idle);
}

fn turn(c: &Conversations, k: &ThreadKey, at: u64, run: &str, text: &str) {
    begin(c, k, at, run, vec![user(&format!("u-{run}"), text)]);
    c.end_turn(
        k,
        at + 1,
        run,
        &answer(&format!("a-{run}"), "ok"),
        Some(Status::Idle),
        &idle,
    )
    .unwrap();
}

fn ids(t: &Transcript) -> Vec<String> {
    t.messages
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_turn_is_listed_running_from_its_admission_and_a_restart_marks_it_cut() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    turn(&c, &key("t"), 10, "r1", "first");
    begin(&c, &key("t"), 20, "r2", vec![user("u-r2", "second")]);
    let e = c.entry(&key("t"), &idle).unwrap().unwrap();
    assert_eq!(e.status, Status::Running);
    assert_eq!(e.run.as_deref(), Some("r2"));
    assert_eq!((e.updated_at, e.messages), (20, 3));
    assert_eq!(e.title, "first");
    // A first turn still running is listed too.
    begin(&c, &key("new"), 30, "n1", vec![user("u-n1", "brand new")]);
    let (page, _) = c.page(&Caller::Shared, None, 10, &|_| true, &idle).unwrap();
    assert_eq!(page[0].thread_id, "new");
    assert_eq!(page[0].status, Status::Running);

    // The process stops here; the next one finds both turns open and marks them cut.
    let again = store(&files);
    let e = again.entry(&key("t"), &idle).unwrap().unwrap();
    assert_eq!(e.status, Status::Idle);
    let t = again.transcript(&key("t"), &idle).unwrap().unwrap();
    assert_eq!(ids(&t), ["u-r1", "a-r1", "u-r2", "iac-agui-turn-cut-r2"]);
    assert_eq!(e.messages, 4, "the index counts the marker the page shows");
    let n = again.transcript(&key("new"), &idle).unwrap().unwrap();
    assert_eq!(ids(&n), ["u-n1", "iac-agui-turn-cut-n1"]);
    // Only the first read of a process cuts: a later run's open turn is its own.
    begin(&again, &key("t"), 40, "r3", vec![user("u-r3", "third")]);
    let cached_out = store(&files);
    drop(cached_out);
    assert_eq!(
        again.entry(&key("t"), &idle).unwrap().unwrap().status,
        Status::Running
    );
}

#[test]
fn a_listing_reads_the_index_not_the_conversations() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    for i in 0..50 {
        turn(&c, &key(&format!("t{i}")), 100 + i * 10, "r1", "hello");
    }
    let again = store(&files);
    files.log_reads.store(0, Ordering::SeqCst);
    let (page, more) = again
        .page(&Caller::Shared, None, 20, &|_| true, &idle)
        .unwrap();
    assert_eq!((page.len(), more), (20, true));
    assert_eq!(page[0].thread_id, "t49");
    assert_eq!(
        files.log_reads.load(Ordering::SeqCst),
        0,
        "a listing read a conversation"
    );
    assert_eq!(again.idle_before(u64::MAX, &idle).len(), 50);
    assert_eq!(
        files.log_reads.load(Ordering::SeqCst),
        0,
        "expiry read a conversation"
    );
}

/// Issue 47 part 2: `GET /threads?q=&status=` over 20,000 threads, from the index: every
/// match on exactly one page, newest first, none that does not match.
#[test]
fn twenty_thousand_threads_are_found_by_title_and_status_across_pages() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    let n = 20_000u64;
    for i in 0..n {
        let k = key(&format!("t{i:05}"));
        let title = if i % 7 == 0 {
            format!("Deploy the ZEBRA site {i}")
        } else {
            format!("task {i}")
        };
        if i % 5 == 0 {
            begin(&c, &k, 1_000 + i / 3, "r", vec![user("u", &title)]);
        } else {
            turn(&c, &k, 1_000 + i / 3, "r", &title);
        }
    }
    let filter = crate::store::index::Filter {
        q: Some("zebra".into()),
        status: Some(Status::Idle),
    };
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut after: Option<(u64, String)> = None;
    loop {
        let a = after.as_ref().map(|(t, id)| (*t, id.as_str()));
        let (page, more) = c
            .page(&Caller::Shared, a, 150, &|e| filter.keeps(e), &idle)
            .unwrap();
        assert!(
            page.iter().all(|e| filter.keeps(e)),
            "a page holds a thread that does not match"
        );
        seen.extend(page.iter().map(|e| (e.updated_at, e.thread_id.clone())));
        after = page.last().map(|e| (e.updated_at, e.thread_id.clone()));
        if !more {
            break;
        }
    }
    let want = (0..n).filter(|i| i % 7 == 0 && i % 5 != 0).count();
    assert_eq!(seen.len(), want);
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    assert_eq!(seen, sorted, "newest first, ties by id");
    sorted.dedup();
    assert_eq!(sorted.len(), want, "no repeats");
}

#[test]
fn twenty_thousand_threads_page_newest_first_without_gaps_or_repeats() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    let n = 20_000u64;
    for i in 0..n {
        // Many share a time: ties go in thread-id order.
        begin(
            &c,
            &key(&format!("t{i:05}")),
            1_000 + i / 3,
            "r",
            vec![user("u", "x")],
        );
    }
    for c in [c, store(&files)] {
        let mut seen: Vec<(u64, String)> = Vec::new();
        let mut after: Option<(u64, String)> = None;
        loop {
            let a = after.as_ref().map(|(t, id)| (*t, id.as_str()));
            let (page, more) = c.page(&Caller::Shared, a, 200, &|_| true, &idle).unwrap();
            seen.extend(page.iter().map(|e| (e.updated_at, e.thread_id.clone())));
            after = page.last().map(|e| (e.updated_at, e.thread_id.clone()));
            if !more {
                break;
            }
        }
        assert_eq!(seen.len() as u64, n);
        let mut sorted = seen.clone();
        sorted.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        assert_eq!(seen, sorted, "newest first, ties by id");
        sorted.dedup();
        assert_eq!(sorted.len() as u64, n, "no repeats");
    }
}

/// Regression (crash test, SIGKILL between an admission's log append and its state save): the
/// conversation of a turn never admitted was listed as a thread after the restart, although
/// no state file (and no announcement) ever existed for it.
#[test]
fn a_conversation_without_its_state_file_is_not_a_thread() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    // Its messages were appended (the first step of an admission), then the stop came.
    c.begin_turn(&key("cut"), 10, "r1", &idle, |_| {
        (vec![user("u-r1", "never admitted")], true)
    })
    .unwrap();
    turn(&c, &key("kept"), 20, "r1", "admitted");
    lock(&files.states).insert(key("kept"), 20);
    lock(&files.indexes).clear();
    let (_, listed) = first_page(&store(&files));
    assert_eq!(listed, ["kept"]);
}

/// The first page of the shared caller's threads, with their ids.
fn first_page(c: &Conversations) -> (Vec<Entry>, Vec<String>) {
    let (page, _) = c.page(&Caller::Shared, None, 10, &|_| true, &idle).unwrap();
    let ids = page.iter().map(|e| e.thread_id.clone()).collect();
    (page, ids)
}

#[test]
fn an_index_lost_or_behind_its_logs_is_derived_again() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    turn(&c, &key("a"), 10, "r1", "alpha");
    turn(&c, &key("b"), 20, "r1", "beta");
    // Admitted threads: each has its state file.
    lock(&files.states).extend([(key("a"), 10), (key("b"), 20)]);
    // The journal is lost: every thread is found again from its log.
    lock(&files.indexes).clear();
    let (page, listed) = first_page(&store(&files));
    assert_eq!(listed, ["b", "a"]);
    assert_eq!(page[1].title, "alpha");
    // A log written past what the journal saw (a crash between the two).
    let log = files.log(&key("a")).unwrap();
    let mut more = log.clone();
    more.extend(conv_log::input(50, "r2", &[user("u-r2", "late")]));
    more.extend(conv_log::end(51, "r2", &answer("a-r2", "ok")));
    files
        .append_log(&key("a"), log.len() as u64, &more[log.len()..])
        .unwrap();
    let third = store(&files);
    let e = third.entry(&key("a"), &idle).unwrap().unwrap();
    assert_eq!((e.updated_at, e.messages), (51, 4));
    // A thread deleted behind the journal's back is no longer listed.
    lock(&files.logs).remove(&key("b"));
    lock(&files.states).remove(&key("b"));
    let fourth = store(&files);
    assert!(fourth.entry(&key("b"), &idle).unwrap().is_none());
}

#[test]
fn a_thread_with_only_a_state_file_is_listed_and_can_expire() {
    let files = Arc::new(MemFiles::default());
    lock(&files.states).insert(key("old"), 5);
    let c = store(&files);
    let e = c.entry(&key("old"), &idle).unwrap().unwrap();
    assert_eq!((e.updated_at, e.messages, e.log), (5, 0, None));
    assert_eq!(c.idle_before(6, &idle), [key("old")]);
    assert!(c.idle_before(5, &idle).is_empty());
}

#[test]
fn an_admission_whose_state_save_failed_leaves_no_trace() {
    let files = Arc::new(MemFiles::default());
    let c = store(&files);
    turn(&c, &key("t"), 10, "r1", "first");
    let before = files.log(&key("t"));
    let b = c
        .begin_turn(&key("t"), 20, "r2", &idle, |_| {
            (vec![user("u2", "x")], true)
        })
        .unwrap();
    c.undo(&key("t"), b);
    assert_eq!(files.log(&key("t")), before);
    assert_eq!(c.entry(&key("t"), &idle).unwrap().unwrap().updated_at, 11);
    // A first turn's: no log at all.
    let b = c
        .begin_turn(&key("fresh"), 20, "r1", &idle, |_| {
            (vec![user("u1", "x")], true)
        })
        .unwrap();
    c.undo(&key("fresh"), b);
    assert_eq!(files.log(&key("fresh")), None);
    assert!(c.entry(&key("fresh"), &idle).unwrap().is_none());
}

#[test]
fn a_long_conversation_is_compacted_and_reads_the_same() {
    let files = Arc::new(MemFiles::default());
    let bounds = Bounds {
        max_messages: 6,
        max_bytes: 1 << 20,
    };
    let c = Conversations::new(files.clone(), bounds);
    let big = "x".repeat(20_000);
    for i in 0..40 {
        turn(&c, &key("t"), 10 * i, &format!("r{i}"), &big);
    }
    let log = files.log(&key("t")).unwrap();
    assert!(log.len() < 200_000, "the log grew to {} bytes", log.len());
    let t = c.transcript(&key("t"), &idle).unwrap().unwrap();
    assert_eq!(
        ids(&t)[1..],
        ["u-r37", "a-r37", "u-r38", "a-r38", "u-r39", "a-r39"]
    );
    assert_eq!(t.dropped, 74);
    let e = c.entry(&key("t"), &idle).unwrap().unwrap();
    assert_eq!(e.messages, 7);
    assert_eq!(
        Conversations::new(files.clone(), bounds)
            .transcript(&key("t"), &idle)
            .unwrap(),
        Some(t)
    );
}

#[test]
fn a_conversation_of_the_whole_file_form_is_migrated_by_its_next_turn() {
    let files = Arc::new(MemFiles::default());
    let mut old = Transcript::new("t", 3);
    old.add_input(&[user("u0", "from before")]);
    lock(&files.legacy).insert(key("t"), old.to_bytes());
    lock(&files.states).insert(key("t"), 5);
    let c = store(&files);
    assert_eq!(
        c.entry(&key("t"), &idle).unwrap().unwrap().title,
        "from before"
    );
    turn(&c, &key("t"), 10, "r1", "now");
    assert!(lock(&files.legacy).is_empty(), "the old form is gone");
    let t = c.transcript(&key("t"), &idle).unwrap().unwrap();
    assert_eq!(ids(&t), ["u0", "u-r1", "a-r1"]);
    assert_eq!(t.created_at, 3);
}
