//! A caller's thread index: for each thread what a listing shows (title, times, message
//! count, status) and the stamp of its conversation log as last written, newest activity
//! first, so that a listing page and an expiry round never read a conversation.
//!
//! On disk it is a journal of JSON lines (`~index.jsonl` in the caller's threads directory):
//! each line the whole entry of one thread as it is now, or its deletion; the last line of a
//! thread wins, and the journal is rewritten whole once it holds far more lines than
//! threads. The journal is a cache of the logs, not a second truth: it is never fsynced, and
//! when it is read the store checks every entry against the files it names (their stamps)
//! and derives again what disagrees (`store::conversations`).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

/// A thread's state as a listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Idle,
    Running,
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Running => "running",
            Status::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "idle" => Status::Idle,
            "running" => Status::Running,
            "interrupted" => Status::Interrupted,
            _ => return None,
        })
    }
}

/// What tells one version of a file from another: its length and its inode (a compaction
/// or migration writes a new file; an append changes the length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub ino: u64,
}

/// One thread in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub thread_id: String,
    /// Unix milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
    pub title: String,
    pub messages: u64,
    pub status: Status,
    /// The run in progress (`Status::Running`).
    pub run: Option<String>,
    /// The conversation log as this entry saw it; `None`: the thread has no log (a state
    /// file only: a thread of an earlier version or of iac-code 0.16.0).
    pub log: Option<Stamp>,
}

impl Entry {
    fn to_line(&self) -> Vec<u8> {
        let mut v = json!({"t": self.thread_id, "c": self.created_at, "u": self.updated_at,
            "title": self.title, "n": self.messages, "s": self.status.as_str()});
        if let Some(r) = &self.run {
            v["r"] = json!(r);
        }
        if let Some(s) = self.log {
            v["len"] = json!(s.len);
            v["ino"] = json!(s.ino);
        }
        line(&v)
    }

    fn from_line(v: &Value) -> Option<Entry> {
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        let log = match (n("len"), n("ino")) {
            (Some(len), Some(ino)) => Some(Stamp { len, ino }),
            _ => None,
        };
        Some(Entry {
            thread_id: v.get("t")?.as_str()?.to_string(),
            created_at: n("c")?,
            updated_at: n("u")?,
            title: v.get("title")?.as_str()?.to_string(),
            messages: n("n")?,
            status: Status::parse(v.get("s")?.as_str()?)?,
            run: v.get("r").and_then(Value::as_str).map(str::to_string),
            log,
        })
    }
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Which threads a listing shows: those whose title holds `q` under Unicode case folding, in
/// `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Case-folded ([`fold_case`]).
    pub q: Option<String>,
    pub status: Option<Status>,
}

impl Filter {
    pub fn keeps(&self, e: &Entry) -> bool {
        self.status.is_none_or(|s| s == e.status)
            && self
                .q
                .as_deref()
                .is_none_or(|q| fold_case(&e.title).contains(q))
    }
}

impl Status {
    /// A listing's `status=` value.
    pub fn named(s: &str) -> Option<Status> {
        Status::parse(s)
    }
}

/// Where a listing page starts: after this (updatedAt, threadId) in newest-first order.
pub type After<'a> = (u64, &'a str);

/// The index of one caller's threads.
#[derive(Debug, Default)]
pub struct CallerIndex {
    entries: HashMap<String, Entry>,
    /// Newest activity first; ties in thread-id order, so pages never skip or repeat one.
    order: BTreeSet<(Reverse<u64>, String)>,
    /// Lines in the journal (what a rewrite would shrink).
    lines: usize,
}

impl CallerIndex {
    /// Read a journal. Lines that do not read are skipped (the checks against the files
    /// derive their threads again); a torn last line too.
    pub fn from_journal(bytes: &[u8]) -> CallerIndex {
        let mut ix = CallerIndex::default();
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for l in bytes[..complete].split(|&b| b == b'\n') {
            let Ok(v) = serde_json::from_slice::<Value>(l) else {
                continue;
            };
            ix.lines += 1;
            if v.get("del") == Some(&Value::Bool(true)) {
                if let Some(id) = v.get("t").and_then(Value::as_str) {
                    ix.take(id);
                }
            } else if let Some(e) = Entry::from_line(&v) {
                ix.put(e);
            }
        }
        ix
    }

    fn take(&mut self, id: &str) -> Option<Entry> {
        let e = self.entries.remove(id)?;
        self.order
            .remove(&(Reverse(e.updated_at), e.thread_id.clone()));
        Some(e)
    }

    fn put(&mut self, e: Entry) {
        self.take(&e.thread_id);
        self.order
            .insert((Reverse(e.updated_at), e.thread_id.clone()));
        self.entries.insert(e.thread_id.clone(), e);
    }

    /// Set a thread's entry; the journal line that says so.
    pub fn upsert(&mut self, e: Entry) -> Vec<u8> {
        let l = e.to_line();
        self.put(e);
        self.lines += 1;
        l
    }

    /// Forget a thread; the journal line that says so (`None`: it was not indexed).
    pub fn remove(&mut self, id: &str) -> Option<Vec<u8>> {
        self.take(id)?;
        self.lines += 1;
        Some(line(&json!({"t": id, "del": true})))
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Up to `limit` entries after `after` that `only` keeps, newest first, and whether more
    /// follow.
    pub fn page(
        &self,
        after: Option<After<'_>>,
        limit: usize,
        only: &dyn Fn(&Entry) -> bool,
    ) -> (Vec<&Entry>, bool) {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = match after {
            Some((t, id)) => Excluded((Reverse(t), id.to_string())),
            None => Unbounded,
        };
        let mut it = self
            .order
            .range((from, Unbounded))
            .filter_map(|(_, id)| self.entries.get(id))
            .filter(|e| only(e));
        let page: Vec<&Entry> = it.by_ref().take(limit).collect();
        let more = it.next().is_some();
        (page, more)
    }

    /// Threads whose last activity is before `cutoff_ms`, oldest first.
    pub fn older_than(&self, cutoff_ms: u64) -> Vec<String> {
        self.order
            .iter()
            .rev()
            .take_while(|(Reverse(t), _)| *t < cutoff_ms)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// The whole journal as it would be rewritten: one line a thread.
    pub fn to_journal(&mut self) -> Vec<u8> {
        self.lines = self.entries.len();
        self.order
            .iter()
            .filter_map(|(_, id)| self.entries.get(id))
            .flat_map(Entry::to_line)
            .collect()
    }

    /// The journal holds so many superseded lines that a rewrite pays.
    pub fn wants_rewrite(&self) -> bool {
        self.lines > 2 * self.entries.len() + 1024
    }
}

/// `s` under Unicode full case folding, so that `STRASSE` finds `Straße` and `ΣΟΦΊΑ` finds
/// `σοφία`: each character lowered, raised (full mappings: `ß` → `SS`, `ﬁ` → `FI`,
/// `ᾳ` → `ΑΙ`) and lowered again, one character at a time (no final-sigma rule: `ς` and `σ`
/// are one letter). The first lowering brings `ẞ` to `ß`, which the raising then spells out.
/// The Turkish dotless `ı` is kept, as the folding keeps it. Checked against CPython's
/// `str.casefold` for every character of Unicode 14: the same text, except that Cherokee
/// folds to its small letters instead of its capitals (the same strings match).
pub fn fold_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == 'ı' {
            out.push(c);
            continue;
        }
        for l in c.to_lowercase() {
            for u in l.to_uppercase() {
                out.extend(u.to_lowercase());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, updated: u64) -> Entry {
        Entry {
            thread_id: id.into(),
            created_at: 1,
            updated_at: updated,
            title: format!("about {id}"),
            messages: 2,
            status: Status::Idle,
            run: None,
            log: Some(Stamp { len: 10, ino: 7 }),
        }
    }

    #[test]
    fn pages_are_newest_first_without_gaps_or_repeats() {
        let mut ix = CallerIndex::default();
        for i in 0..25u64 {
            // Ties on the time: thread-id order.
            ix.upsert(entry(&format!("t{i:02}"), i / 2));
        }
        let mut seen = Vec::new();
        let mut after: Option<(u64, String)> = None;
        loop {
            let (page, more) = ix.page(after.as_ref().map(|(t, id)| (*t, id.as_str())), 4, &|_| {
                true
            });
            seen.extend(page.iter().map(|e| e.thread_id.clone()));
            let last = page.last().map(|e| (e.updated_at, e.thread_id.clone()));
            if !more {
                break;
            }
            after = last;
        }
        assert_eq!(seen.len(), 25);
        assert_eq!(seen[0], "t24");
        assert_eq!(&seen[1..3], ["t22", "t23"], "ties in thread-id order");
        let mut dedup = seen.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), 25);
    }

    #[test]
    fn the_journal_reads_back_the_last_word_on_each_thread() {
        let mut ix = CallerIndex::default();
        let mut journal = Vec::new();
        journal.extend(ix.upsert(entry("a", 1)));
        journal.extend(ix.upsert(entry("b", 2)));
        let mut running = entry("a", 3);
        running.status = Status::Running;
        running.run = Some("r7".into());
        journal.extend(ix.upsert(running.clone()));
        journal.extend(ix.remove("b").unwrap());
        assert!(ix.remove("b").is_none());
        journal.extend_from_slice(b"garbage\n{\"t\":\"c\",\"c\":1");
        let back = CallerIndex::from_journal(&journal);
        assert_eq!(back.len(), 1);
        assert_eq!(back.get("a"), Some(&running));
        assert_eq!(ix.older_than(4), ["a"]);
        assert!(ix.older_than(3).is_empty());
        let mut ix = back;
        let again = CallerIndex::from_journal(&ix.to_journal());
        assert_eq!(again.get("a"), Some(&running));
    }

    #[test]
    fn search_matches_titles_under_unicode_case_folding() {
        let titled = |t: &str| Entry {
            title: t.into(),
            ..entry("a", 1)
        };
        let search = |q: &str| Filter {
            q: Some(fold_case(q)),
            status: None,
        };
        for (q, title) in [
            ("STRASSE", "Straße bauen"),
            ("straße", "STRASSE"),
            ("STRAẞE", "strasse"),
            ("σοφία", "ΣΟΦΊΑ"),
            ("ΟΔΟΣ", "οδος"),
            ("οδος", "ὉΔΌΣ ΟΔΟΣ"),
            ("file", "ﬁle"),
            ("K", "\u{212a}elvin"),
            ("ΑΙ", "ᾳ"),
            ("İstanbul", "i\u{307}stanbul"),
            ("ǅ", "ǆ"),
            ("vpc", "Create a VPC"),
        ] {
            assert!(search(q).keeps(&titled(title)), "{q} in {title}");
        }
        for (q, title) in [("ı", "I"), ("strasse", "Strase"), ("ss", "s")] {
            assert!(!search(q).keeps(&titled(title)), "{q} not in {title}");
        }
    }

    #[test]
    fn a_journal_of_superseded_lines_wants_a_rewrite() {
        let mut ix = CallerIndex::default();
        for i in 0..1100 {
            ix.upsert(entry("a", i));
        }
        assert!(ix.wants_rewrite());
        let _ = ix.to_journal();
        assert!(!ix.wants_rewrite());
    }
}
