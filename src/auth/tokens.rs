//! `--auth-tokens-file` (feature `identity`): its lines read into a `TokenTable`, and the
//! `TokenFile` the loop reads, kept current by a watcher thread of its own (the loop never
//! opens or stats it).
//!
//! Fail closed, line by line: a line that is gone is gone at the next read (within a second
//! of the change); a bad line that names a principal refuses that principal (none of their
//! tokens work) until it is fixed; a line that names nobody is skipped; a file that is
//! missing, unreadable, too large or whose read does not finish refuses every request and
//! makes `/health` 503 (reason `tokens`). Each outcome is logged once per change of the file,
//! bad lines by number, never with their hash.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::OwnLimits;
use crate::limits;
use crate::principal::{BadName, Caller};
use crate::sync::Kick;

/// How often `--auth-tokens-file` is checked for changes (SIGHUP re-reads it at once).
const TOKENS_FILE_TICK: Duration = Duration::from_secs(1);
/// The largest tokens file read (one line per principal: thousands fit); a larger one is
/// unusable and refuses everyone.
const MAX_TOKENS_FILE: u64 = 1024 * 1024;
/// How long a read of the tokens file may take (a FIFO, a hung network mount) before the file
/// counts as unreadable and every request is refused: revocation must not wait on a read.
const TOKENS_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Reads of the tokens file left hanging (each change of a file whose read hangs leaves one);
/// past it no read starts and the file stays unusable.
const MAX_TOKENS_READS: usize = 4;

/// The parsed tokens file: each principal with the SHA-256 of a token of theirs, and what
/// was wrong with the lines left out.
#[derive(Debug, Default)]
pub struct TokenTable {
    entries: Vec<(Caller, [u8; 32])>,
    /// A principal's own quotas (`max_runs=N`, `rate=N` after the hash; issue 44): the
    /// smallest given on any of its lines.
    limits: HashMap<Caller, OwnLimits>,
    /// `line N: …`, in line order; never a hash.
    problems: Vec<String>,
}

/// Why a word after a line's hash is refused.
#[derive(Debug, PartialEq, Eq)]
enum Word {
    /// Not `max_runs=N` or `rate=N` (its text, escaped and cut).
    NotAQuota(String),
    /// A quota, in a build without the `quotas` extra: refused, never silently unenforced.
    Unbuilt(String),
}

/// The quotas of a line's words after its hash (`quotas`: the build enforces them).
fn line_limits<'a>(words: impl Iterator<Item = &'a [u8]>, quotas: bool) -> Result<OwnLimits, Word> {
    let mut l = OwnLimits::default();
    for w in words {
        let text = String::from_utf8_lossy(w);
        let shown = || crate::logging::escape(&text).chars().take(40).collect();
        let (k, v) = text.split_once('=').unwrap_or((&text, ""));
        let n = v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=limits::MAX_QUOTA_VALUE).contains(n));
        match (k, n) {
            ("max_runs" | "rate", Some(_)) if !quotas => return Err(Word::Unbuilt(shown())),
            ("max_runs", Some(n)) => l.max_runs = Some(n),
            ("rate", Some(n)) => l.rate_per_min = Some(n),
            _ => return Err(Word::NotAQuota(shown())),
        }
    }
    Ok(l)
}

fn smaller(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

impl TokenTable {
    /// `NAME SHA256HEX` per line; blank lines and `#` comments skipped; a leading byte-order
    /// mark dropped. A principal may have several tokens (rotation); one hash may not name two
    /// lines. A bad line refuses the principal it names (all their lines), or is skipped when
    /// it names none.
    pub fn parse(text: impl AsRef<[u8]>) -> TokenTable {
        let text = text.as_ref();
        // An editor's byte-order mark would become part of the first name: that principal
        // would be someone new, with none of their threads.
        let text = text.strip_prefix("\u{feff}".as_bytes()).unwrap_or(text);
        let mut problems: Vec<(usize, String)> = Vec::new();
        let mut refused: BTreeSet<Caller> = BTreeSet::new();
        let mut good: Vec<(Caller, [u8; 32], usize)> = Vec::new();
        let mut limits: HashMap<Caller, OwnLimits> = HashMap::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            let line = line.trim_ascii();
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let mut parts = line
                .split(u8::is_ascii_whitespace)
                .filter(|p| !p.is_empty());
            let Some(name) = parts.next() else { continue };
            let caller = match Caller::named(name) {
                Ok(c) => c,
                Err(why) => {
                    problems.push((
                        n,
                        format!(
                            "line {n}: no principal name can be read ({}): the line is skipped",
                            why_not(why)
                        ),
                    ));
                    continue;
                }
            };
            let digest = parts
                .next()
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(crate::ids::unhex32);
            if digest.is_some() {
                match line_limits(parts, cfg!(feature = "quotas")) {
                    Ok(l) => {
                        let e = limits.entry(caller.clone()).or_default();
                        e.max_runs = smaller(e.max_runs, l.max_runs);
                        e.rate_per_min = smaller(e.rate_per_min, l.rate_per_min);
                    }
                    Err(word) => {
                        let why = match word {
                            Word::NotAQuota(w) => format!(
                                "`{w}` is not a quota (`max_runs=N` or `rate=N`, N from 1 to {})",
                                limits::MAX_QUOTA_VALUE
                            ),
                            Word::Unbuilt(w) => format!(
                                "`{w}` needs the `quotas` feature, which this build of iac-agui \
                                 lacks"
                            ),
                        };
                        problems.push((
                            n,
                            format!(
                                "line {n}: {why}: {} is refused until the line is fixed",
                                name_of(&caller)
                            ),
                        ));
                        refused.insert(caller);
                        continue;
                    }
                }
            }
            match digest {
                Some(d) => good.push((caller, d, n)),
                None => {
                    problems.push((
                        n,
                        format!(
                            "line {n}: expected `NAME SHA256HEX` (64 hex digits, the SHA-256 of \
                             the token): {} is refused until the line is fixed",
                            name_of(&caller)
                        ),
                    ));
                    refused.insert(caller);
                }
            }
        }
        let mut first: HashMap<[u8; 32], (Caller, usize)> = HashMap::new();
        for (caller, digest, n) in &good {
            match first.get(digest) {
                Some((other, m)) => {
                    problems.push((
                        *n,
                        format!(
                            "line {n}: the token hash of line {m} again (a token names one \
                             line): {} and {} are refused until it is fixed",
                            name_of(other),
                            name_of(caller)
                        ),
                    ));
                    refused.insert(other.clone());
                    refused.insert(caller.clone());
                }
                None => {
                    first.insert(*digest, (caller.clone(), *n));
                }
            }
        }
        problems.sort_by_key(|(n, _)| *n);
        TokenTable {
            entries: good
                .into_iter()
                .filter(|(c, _, _)| !refused.contains(c))
                .map(|(c, d, _)| (c, d))
                .collect(),
            limits,
            problems: problems.into_iter().map(|(_, p)| p).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `caller`'s own quotas (nothing said: none of its own).
    pub fn limits(&self, caller: &Caller) -> OwnLimits {
        self.limits.get(caller).copied().unwrap_or_default()
    }

    /// What is wrong with the file, one entry per bad line (`line N: …`).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The principal of `token`: every entry is compared, whatever matched, so the time
    /// taken says nothing about which entry (or how much of one) matched.
    pub fn lookup(&self, token: &[u8]) -> Option<Caller> {
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = None;
        for (caller, d) in &self.entries {
            if super::constant_time_eq(&digest, d) {
                found = Some(caller.clone());
            }
        }
        found
    }
}

fn why_not(why: BadName) -> &'static str {
    match why {
        BadName::Empty => "empty",
        BadName::TooLong => "longer than 256 bytes",
        BadName::Character => "a control character, a space or bytes that are not UTF-8",
    }
}

fn name_of(c: &Caller) -> &str {
    c.name().unwrap_or("")
}

/// The tokens in use, as the loop sees them.
#[derive(Debug)]
pub enum Tokens {
    /// The file as last read (the principals of its bad lines left out).
    Table(TokenTable),
    /// The file cannot be used (why, for the log): every request is refused.
    Down(String),
}

/// `--auth-tokens-file`: the tokens in use, kept current by the watcher thread. The loop
/// only clones an `Arc` (the watcher holds the lock for the swap alone, never across I/O).
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    current: RwLock<Arc<Tokens>>,
    /// SIGHUP asked for a read now.
    kick: Kick,
}

impl TokenFile {
    /// Read the file (at start-up, before the loop runs) and start its watcher. Start-up fails
    /// when the file cannot be used at all; bad lines refuse their principals, as on a reload
    /// (a restart must not turn one caller's typo into an outage).
    pub fn open(path: &Path) -> Result<Arc<TokenFile>, String> {
        let mut watcher = Watcher::new(path);
        let tokens = watcher
            .look(true)
            .unwrap_or_else(|| Tokens::Down(String::new()));
        if let Tokens::Down(why) = tokens {
            return Err(why);
        }
        log_outcome(path, false, &tokens);
        let file = Arc::new(TokenFile {
            path: path.to_path_buf(),
            current: RwLock::new(Arc::new(tokens)),
            kick: Kick::default(),
        });
        let weak = Arc::downgrade(&file);
        std::thread::Builder::new()
            .name("iac-agui-tokens".into())
            .stack_size(limits::SMALL_WORKER_STACK_BYTES)
            .spawn(move || {
                while let Some(f) = weak.upgrade() {
                    let kicked = f.kick.sleep(TOKENS_FILE_TICK);
                    if let Some(t) = watcher.look(kicked) {
                        f.post(t);
                    }
                }
            })
            .map_err(|e| format!("cannot start the watcher of {}: {e}", path.display()))?;
        Ok(file)
    }

    /// The tokens in use (the loop: no I/O, no lock held past the clone).
    pub fn tokens(&self) -> Arc<Tokens> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the file can be used (`/health`).
    pub fn usable(&self) -> bool {
        matches!(*self.tokens(), Tokens::Table(_))
    }

    /// Read the file now, whether it changed or not (SIGHUP: the watcher does the read).
    pub fn reload_now(&self) {
        self.kick.kick();
    }

    fn post(&self, tokens: Tokens) {
        log_outcome(&self.path, !self.usable(), &tokens);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tokens);
    }
}

fn log_outcome(path: &Path, was_down: bool, tokens: &Tokens) {
    let path = path.display();
    match tokens {
        Tokens::Down(why) => log::error!(
            "auth tokens file cannot be used ({why}): every request gets 401 and /health \
             answers 503 until it can"
        ),
        Tokens::Table(t) => {
            for p in t.problems() {
                log::error!("auth tokens file {path} {p}");
            }
            if was_down {
                log::info!("auth tokens file {path} can be used again");
            }
            log::info!("auth tokens read from {path}: {} tokens", t.len());
            if t.is_empty() {
                log::warn!("{path} lists no usable tokens: every request gets 401");
            }
        }
    }
}

/// What tells a changed file from the one read: modification and change times (a `chmod`
/// that makes it readable again), size, inode and device (a replaced file, a symlink swap).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    changed: (i64, i64),
    len: u64,
    ino: u64,
    dev: u64,
}

fn stamp(path: &Path) -> Result<Stamp, String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(Stamp {
        modified: m.modified().ok(),
        changed: (m.ctime(), m.ctime_nsec()),
        len: m.len(),
        ino: m.ino(),
        dev: m.dev(),
    })
}

/// The watcher's memory (its thread's alone): what the file looked like when it was last
/// read, and a read that has not finished.
struct Watcher {
    path: PathBuf,
    /// `None`: read it whatever it looks like.
    seen: Option<Result<Stamp, String>>,
    /// A read past `timeout`: while the file stays as it was, no other read starts.
    stuck: Option<mpsc::Receiver<Result<Vec<u8>, String>>>,
    /// Reads whose thread has not ended (a stuck one left behind when the file changed).
    in_flight: Arc<AtomicUsize>,
    timeout: Duration,
}

impl Watcher {
    fn new(path: &Path) -> Watcher {
        Watcher {
            path: path.to_path_buf(),
            seen: None,
            stuck: None,
            in_flight: Arc::default(),
            timeout: TOKENS_READ_TIMEOUT,
        }
    }

    /// The tokens the file gives now, when that may differ from what was posted last
    /// (`force`: SIGHUP); `None` when the file did not change, so each change is logged once.
    fn look(&mut self, force: bool) -> Option<Tokens> {
        let now = stamp(&self.path);
        if let Some(rx) = &self.stuck {
            let waiting = matches!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
            if waiting && self.seen.as_ref() == Some(&now) {
                return None;
            }
            // The stuck read ended, or the file was replaced (a FIFO by a file): read afresh.
            self.stuck = None;
            self.seen = None;
        }
        if !force && self.seen.as_ref() == Some(&now) {
            return None;
        }
        self.seen = Some(now.clone());
        Some(match now.and_then(|_| self.read()) {
            Ok(bytes) => Tokens::Table(TokenTable::parse(bytes)),
            Err(why) => Tokens::Down(why),
        })
    }

    /// The file's bytes, read on a thread of its own so that a read that never ends (a FIFO,
    /// a hung network mount) leaves the file down rather than the watcher stuck.
    fn read(&mut self) -> Result<Vec<u8>, String> {
        let shown = self.path.display();
        if self.in_flight.load(Ordering::SeqCst) >= MAX_TOKENS_READS {
            return Err(format!(
                "{} earlier reads of {shown} have not finished",
                MAX_TOKENS_READS
            ));
        }
        let (tx, rx) = mpsc::channel();
        let path = self.path.clone();
        let in_flight = self.in_flight.clone();
        in_flight.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("iac-agui-tokens-read".into())
            .stack_size(limits::SMALL_WORKER_STACK_BYTES)
            .spawn(move || {
                let _ = tx.send(read_bounded(&path));
                in_flight.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(format!("cannot start a reader of {shown}: {e}"));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.stuck = Some(rx);
                Err(format!(
                    "reading {shown} did not finish within {} ms",
                    self.timeout.as_millis()
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!("reading {shown} failed")),
        }
    }
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKENS_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_TOKENS_FILE {
        return Err(format!(
            "{} is larger than {} KiB",
            path.display(),
            MAX_TOKENS_FILE / 1024
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(t: &str) -> String {
        crate::ids::sha256_hex(t.as_bytes())
    }

    fn name(t: &TokenTable, tok: &str) -> Option<String> {
        t.lookup(tok.as_bytes())
            .and_then(|c| c.name().map(String::from))
    }

    #[test]
    fn a_token_maps_to_its_principal_and_only_its_own() {
        let text = format!(
            "# principals\n\nalice {}\nbob   {}\r\nalice {}\n",
            sha("a-token"),
            sha("b-token").to_uppercase(),
            sha("a-second")
        );
        let t = TokenTable::parse(&text);
        assert_eq!(t.len(), 3);
        assert!(t.problems().is_empty(), "{:?}", t.problems());
        assert_eq!(name(&t, "a-token").as_deref(), Some("alice"));
        assert_eq!(name(&t, "a-second").as_deref(), Some("alice"));
        assert_eq!(name(&t, "b-token").as_deref(), Some("bob"));
        assert_eq!(name(&t, "c-token"), None);
        assert_eq!(name(&t, ""), None);
        // The hash itself is not a token.
        assert_eq!(name(&t, &sha("a-token")), None);
    }

    #[test]
    fn a_bad_line_refuses_its_own_principal_and_names_its_line_without_the_hash() {
        let (a, b, c, d) = (sha("a"), sha("b"), sha("c"), sha("d"));
        for (text, line, refused, kept) in [
            // Regression (issue 45, 12): one bad line used to keep the whole old table, so a
            // line removed in the same edit kept working.
            (
                format!("alice {a}\nbob 1234\nbob {b}\n"),
                "line 2",
                "b",
                "a",
            ),
            (
                format!("alice {a}\nbob {b} extra\nbob {c}\n"),
                "line 2",
                "c",
                "a",
            ),
            (format!("alice {a}\nbob\nbob {b}\n"), "line 2", "b", "a"),
            (
                format!("alice {a}\nbob {}\nbob {b}\n", "g".repeat(64)),
                "line 2",
                "b",
                "a",
            ),
            // One hash on two lines: both principals it names.
            (
                format!("alice {a}\nbob {b}\ncarol {b}\ncarol {c}\n"),
                "line 3",
                "c",
                "a",
            ),
            (
                format!("alice {a}\nbob {b}\ncarol {b}\n"),
                "line 3",
                "b",
                "a",
            ),
            // A line that names nobody is skipped: everyone else is untouched.
            (
                format!("alice {a}\na\u{7f}b {d}\nbob {b}\n"),
                "line 2",
                "d",
                "b",
            ),
            (
                format!("alice {a}\n{} {d}\n", "x".repeat(300)),
                "line 2",
                "d",
                "a",
            ),
        ] {
            let t = TokenTable::parse(&text);
            assert!(
                t.problems().iter().any(|p| p.starts_with(line)),
                "{text:?}: {:?}",
                t.problems()
            );
            assert_eq!(name(&t, refused), None, "{text:?}");
            assert!(name(&t, kept).is_some(), "{text:?}: {:?}", t.problems());
            for p in t.problems() {
                for h in [&a, &b, &c, &d] {
                    assert!(!p.contains(h.as_str()), "a hash in the log: {p}");
                }
            }
        }
        // Bytes that are not UTF-8 spoil their own line only.
        let mut bytes = format!("alice {a}\n").into_bytes();
        bytes.extend_from_slice(b"b\xffob ");
        bytes.extend_from_slice(format!("{b}\ncarol {c}\n").as_bytes());
        let t = TokenTable::parse(&bytes);
        assert_eq!(t.len(), 2);
        assert!(t.problems()[0].starts_with("line 2"), "{:?}", t.problems());
    }

    #[test]
    fn a_leading_byte_order_mark_is_not_part_of_the_first_name() {
        // Regression (issue 45, 13): `\u{feff}alice` was a new principal, without her threads.
        let t = TokenTable::parse(format!("\u{feff}alice {}\n", sha("a")));
        assert_eq!(name(&t, "a").as_deref(), Some("alice"));
        assert!(t.problems().is_empty());
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("iac-agui-{name}-{}", crate::ids::hex32()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn table(t: Option<Tokens>) -> TokenTable {
        match t {
            Some(Tokens::Table(t)) => t,
            other => panic!("not a table: {other:?}"),
        }
    }

    /// Regression (issue 46, 16): a file that did not parse was read again, and logged, every
    /// tick until fixed. Each look that returns something is logged.
    #[test]
    fn each_change_of_the_file_is_read_and_reported_once() {
        let dir = temp("tokens-watch");
        let p = dir.join("tokens");
        std::fs::write(&p, format!("alice {}\n", sha("t1"))).unwrap();
        let mut w = Watcher::new(&p);
        assert!(table(w.look(false)).lookup(b"t1").is_some());
        assert!(w.look(false).is_none(), "unchanged");
        // Each shape of trouble: reported at the change, then quiet until the next one.
        let big = "#".repeat(MAX_TOKENS_FILE as usize + 1);
        for (text, down) in [
            ("bob not-a-hash\n".to_string(), false),
            (big, true),
            (format!("bob {}\n", sha("t2")), false),
        ] {
            std::fs::write(&p, &text).unwrap();
            match w.look(false) {
                Some(Tokens::Down(_)) => assert!(down, "{:.40}", text),
                Some(Tokens::Table(_)) => assert!(!down, "{:.40}", text),
                None => panic!("the change was not seen: {:.40}", text),
            }
            for _ in 0..3 {
                assert!(w.look(false).is_none(), "reported again: {:.40}", text);
            }
        }
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(w.look(false), Some(Tokens::Down(_))), "missing");
        assert!(w.look(false).is_none(), "missing, reported again");
        assert!(
            matches!(w.look(true), Some(Tokens::Down(_))),
            "SIGHUP reads"
        );
        std::fs::write(&p, format!("carol {}\n", sha("t3"))).unwrap();
        assert!(table(w.look(false)).lookup(b"t3").is_some(), "back");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A read that never ends (a FIFO with no writer) leaves the file down, not the watcher
    /// stuck: a file put in its place is read at the next look, and reads left hanging are
    /// bounded.
    #[test]
    fn a_read_that_never_ends_leaves_the_file_down_until_it_is_replaced() {
        let dir = temp("tokens-fifo");
        let p = dir.join("tokens");
        let fifo_at = |n: usize| dir.join(format!("fifo{n}"));
        let fifo = |n: usize| {
            let made = std::process::Command::new("mkfifo")
                .arg(fifo_at(n))
                .status();
            assert!(made.unwrap().success());
            let _ = std::fs::remove_file(&p);
            std::fs::hard_link(fifo_at(n), &p).unwrap();
        };
        // A FIFO read never finishes, so a short timeout fires surely; a file's read gets long.
        let (short, long) = (Duration::from_millis(20), Duration::from_secs(10));
        let mut w = Watcher::new(&p);
        w.timeout = short;
        fifo(0);
        assert!(matches!(w.look(false), Some(Tokens::Down(_))));
        assert!(w.look(false).is_none(), "reported again while stuck");
        assert!(
            w.look(true).is_none(),
            "SIGHUP started a second read of the same file"
        );
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, format!("alice {}\n", sha("t1"))).unwrap();
        w.timeout = long;
        assert!(table(w.look(false)).lookup(b"t1").is_some(), "the new file");
        w.timeout = short;
        // Each FIFO put in its place leaves one read hanging, up to the bound.
        for n in 1..MAX_TOKENS_READS + 1 {
            fifo(n);
            let Some(Tokens::Down(why)) = w.look(false) else {
                panic!("not down")
            };
            let want = if n < MAX_TOKENS_READS {
                "did not finish"
            } else {
                "have not finished"
            };
            assert!(why.contains(want), "{n}: {why}");
        }
        // A writer ends the hanging reads (their FIFOs empty): the file is read again.
        for n in 0..MAX_TOKENS_READS {
            drop(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(fifo_at(n))
                    .unwrap(),
            );
        }
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, format!("bob {}\n", sha("t2"))).unwrap();
        w.timeout = long;
        let mut back = None;
        assert!(
            (0..500).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                w.seen = None;
                back = w.look(false);
                matches!(back, Some(Tokens::Table(_)))
            }),
            "{back:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_or_oversized_file_cannot_be_opened() {
        let dir = temp("tokens-open");
        let p = dir.join("tokens");
        let e = TokenFile::open(&p).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        std::fs::write(&p, "#".repeat(MAX_TOKENS_FILE as usize + 1)).unwrap();
        let e = TokenFile::open(&p).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        std::fs::write(&p, format!("alice {}\nbob x\n", sha("t"))).unwrap();
        let f = TokenFile::open(&p).expect("a bad line does not stop the start");
        assert!(f.usable());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 58: a line's own quotas in a build that cannot enforce them (no `quotas`
    /// extra) refuse the line's principal, as any word that is not a quota does: an operator
    /// who gave a caller a quota must not have it run without one.
    #[test]
    fn a_quota_on_a_line_of_a_build_without_quotas_refuses_its_principal() {
        let words = |s: &'static str| s.split(' ').map(str::as_bytes);
        assert_eq!(
            line_limits(words("max_runs=2 rate=9"), true),
            Ok(OwnLimits {
                max_runs: Some(2),
                rate_per_min: Some(9)
            })
        );
        assert_eq!(
            line_limits(words("rate=9"), false),
            Err(Word::Unbuilt("rate=9".into()))
        );
        assert_eq!(
            line_limits(words("colour=blue"), false),
            Err(Word::NotAQuota("colour=blue".into()))
        );
        assert_eq!(
            line_limits(std::iter::empty(), false),
            Ok(OwnLimits::default())
        );
    }
}
