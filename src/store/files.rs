//! Thread files on disk (reference §7.1, §7.4, §7.5): `S/threads/<stem>.json` (a named
//! principal's: `S/principals/<stem of the name>/threads/<stem>.json`, each such directory a
//! state directory of the reference's shape), written by
//! atomic replace (temp file in the same directory, fsync, rename, fsync the directory), files
//! 0600 in 0700 directories, loaded without ever following a symlink. One iac-agui process
//! per state directory: an exclusive lock on `S/.lock` is held for the process lifetime.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::document::{ThreadDoc, stem};
use crate::limits;
use crate::principal::{Caller, ThreadKey};

#[derive(Debug)]
pub enum StoreError {
    Io(io::Error),
    /// The file exists but is not a valid state document (or is a symlink).
    Invalid(Refusal),
    /// The state directory's lock is another process's now (the directory was removed or
    /// replaced under this one, and another iac-agui locked the new one): nothing is written.
    LockLost,
}

/// Why a thread file is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Symlink,
    NotRegular,
    TooLarge,
    /// A document without a thread id cannot be named.
    NoThreadId,
    Document(super::document::DocError),
    /// A thread's stored conversation (feature `threads`), and why.
    Conversation(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Symlink => f.write_str("the thread file is a symlink"),
            Refusal::NotRegular => f.write_str("the thread file is not a regular file"),
            Refusal::TooLarge => f.write_str("the thread file is too large"),
            Refusal::NoThreadId => f.write_str("empty thread id"),
            Refusal::Document(e) => write!(f, "{e}"),
            Refusal::Conversation(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io(e) => Some(e),
            StoreError::Invalid(Refusal::Document(e)) => Some(e),
            _ => None,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Io(e) => write!(f, "state I/O failed: {e}"),
            StoreError::Invalid(s) => write!(f, "state file refused: {s}"),
            StoreError::LockLost => write!(
                f,
                "the state directory was replaced and another process holds its lock: not writing"
            ),
        }
    }
}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        StoreError::Io(e)
    }
}

/// A regular file's bytes (never through a symlink, at most `max`); `None` when absent. Its
/// mode is made 0600 again (reference §7.5: the loader repairs it).
fn read_regular(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(read_regular_with(path, max)?.map(|(b, _)| b))
}

/// `read_regular`, with the file's metadata.
fn read_regular_with(path: &Path, max: u64) -> Result<Option<(Vec<u8>, fs::Metadata)>, StoreError> {
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(StoreError::Invalid(Refusal::Symlink));
        }
        Err(e) => return Err(e.into()),
    };
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(StoreError::Invalid(Refusal::NotRegular));
    }
    if m.len() > max {
        return Err(StoreError::Invalid(Refusal::TooLarge));
    }
    let _ = f.set_permissions(fs::Permissions::from_mode(0o600));
    let mut bytes = Vec::with_capacity(m.len() as usize);
    Read::by_ref(&mut f).take(max + 1).read_to_end(&mut bytes)?;
    Ok(Some((bytes, m)))
}

/// Where named principals' threads live, under the state directory.
const PRINCIPALS: &str = "principals";
/// A principal directory's file naming its principal.
const PRINCIPAL_NAME: &str = "principal";
/// The server's secret key, in the state directory.
const SERVER_KEY: &str = "server.key";

/// The state directory of this process.
#[derive(Debug)]
pub struct FileStore {
    root: PathBuf,
    threads: PathBuf,
    /// The locked `.lock` file. Checked before every write: when the directory is removed
    /// or replaced, the path no longer names this file, and the lock must be taken again
    /// (or found to be another process's) before anything is written.
    lock: std::sync::Mutex<File>,
}

/// Why the state lock could not be had.
enum LockFailure {
    Busy,
    Io(io::Error),
}

/// Open `root/.lock` (created, never through a symlink) and lock it exclusively.
fn take_lock(root: &Path) -> Result<File, LockFailure> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(root.join(".lock"))
        .map_err(LockFailure::Io)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(fs::TryLockError::WouldBlock) => Err(LockFailure::Busy),
        Err(fs::TryLockError::Error(e)) => Err(LockFailure::Io(e)),
    }
}

/// Create `path` (0600, never through a symlink, never an existing file), write `bytes`
/// and fsync it.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    f.write_all(bytes)?;
    sync(&f)
}

/// fsync, counted (`iac_agui_fsyncs_total`: what fail-closed costs, docs/reliability.md).
fn sync(f: &File) -> io::Result<()> {
    crate::metrics::M.fsyncs.inc();
    f.sync_all()
}

/// fsync a directory, so that the entries made in it are durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    sync(&File::open(dir)?)
}

/// Whether `path` names the file `held` (same device and inode).
fn same_file(path: &Path, held: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::symlink_metadata(path), held.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Create `p` and any missing ancestors owner-only (reference: the config directory
/// `~/.iac-code` is made 0700), then force `p` itself to 0700.
fn ensure_private_dir(p: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)?;
    fs::set_permissions(p, fs::Permissions::from_mode(0o700))
}

impl FileStore {
    /// Open (and create) the state directory, take the process lock and remove temp files a
    /// crash may have left behind.
    pub fn open(root: &Path) -> Result<FileStore, String> {
        ensure_private_dir(root)
            .map_err(|e| format!("cannot create the state directory {}: {e}", root.display()))?;
        let threads = root.join("threads");
        ensure_private_dir(&threads)
            .map_err(|e| format!("cannot create {}: {e}", threads.display()))?;
        let lock = match take_lock(root) {
            Ok(l) => l,
            Err(LockFailure::Busy) => {
                return Err(format!(
                    "another iac-agui process is using the state directory {}",
                    root.display()
                ));
            }
            Err(LockFailure::Io(e)) => return Err(format!("cannot lock the state directory: {e}")),
        };
        let store = FileStore {
            root: root.to_path_buf(),
            threads,
            lock: std::sync::Mutex::new(lock),
        };
        store.remove_stale_temp_files();
        Ok(store)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of a principal's thread files.
    pub(crate) fn threads_dir(&self, caller: &Caller) -> PathBuf {
        match caller {
            Caller::Shared => self.threads.clone(),
            Caller::Named(n) => self.root.join(PRINCIPALS).join(stem(n)).join("threads"),
        }
    }

    pub(crate) fn path_for(&self, key: &ThreadKey) -> PathBuf {
        self.threads_dir(&key.caller)
            .join(format!("{}.json", stem(&key.id)))
    }

    /// Every principal's directory (the named ones under `principals/`).
    fn principal_dirs(&self) -> Vec<PathBuf> {
        fs::read_dir(self.root.join(PRINCIPALS))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect()
    }

    /// Every threads directory: the shared principal's and each named one's.
    fn all_threads_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.threads.clone()];
        dirs.extend(self.principal_dirs().into_iter().map(|p| p.join("threads")));
        dirs
    }

    fn remove_stale_temp_files(&self) {
        // A principal's home holds the temp file of its name file too.
        for d in self
            .all_threads_dirs()
            .into_iter()
            .chain(self.principal_dirs())
        {
            let Ok(dir) = fs::read_dir(&d) else {
                continue;
            };
            for e in dir.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }

    /// The server's secret key (`S/server.key`, 32 random bytes in hex, 0600), made on first
    /// use: it keys the identifiers only the server may be able to name.
    pub fn server_key(&self) -> Result<Vec<u8>, String> {
        let path = self.root.join(SERVER_KEY);
        let fail = |e: &dyn std::fmt::Display| format!("the server key {}: {e}", path.display());
        if let Some(bytes) = read_regular(&path, 128).map_err(|e| fail(&e))? {
            let hex = String::from_utf8_lossy(&bytes);
            return crate::ids::unhex32(hex.trim())
                .map(|k| k.to_vec())
                .ok_or_else(|| fail(&"not 64 hex digits"));
        }
        let mut key = [0u8; 32];
        crate::ids::fill(&mut key).map_err(|e| e.to_string())?;
        let tmp = self.root.join(format!(".{SERVER_KEY}.tmp"));
        let _ = fs::remove_file(&tmp);
        write_new(&tmp, format!("{}\n", crate::ids::hex(&key)).as_bytes())
            .and_then(|()| fs::rename(&tmp, &path))
            .and_then(|()| sync_dir(&self.root))
            .map_err(|e| fail(&e))?;
        Ok(key.to_vec())
    }

    /// Every principal with a directory here, the shared one first.
    pub fn callers(&self) -> Vec<Caller> {
        let mut out = vec![Caller::Shared];
        for e in fs::read_dir(self.root.join(PRINCIPALS))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = read_regular(
                &e.path().join(PRINCIPAL_NAME),
                crate::principal::MAX_NAME as u64,
            );
            match name.ok().flatten().map(|n| Caller::named(&n)) {
                Some(Ok(c)) => out.push(c),
                _ => log::warn!("{}: no principal name", e.path().display()),
            }
        }
        out
    }

    /// Remove a thread's state file (what is gone stays gone after a crash: the directory
    /// is synced).
    pub fn delete(&self, key: &ThreadKey) -> Result<(), StoreError> {
        self.ensure_writer()?;
        match fs::remove_file(self.path_for(key)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        sync_dir(&self.threads_dir(&key.caller))?;
        Ok(())
    }

    /// Load a thread; `Ok(None)` when it has no file.
    pub fn load(&self, key: &ThreadKey) -> Result<Option<ThreadDoc>, StoreError> {
        let Some(bytes) = read_regular(&self.path_for(key), limits::MAX_STATE_FILE)? else {
            return Ok(None);
        };
        ThreadDoc::from_bytes(&bytes, &key.id)
            .map(|doc| {
                Some(ThreadDoc {
                    owner: key.caller.clone(),
                    ..doc
                })
            })
            .map_err(|e| StoreError::Invalid(Refusal::Document(e)))
    }

    /// Make sure this process still is the directory's one writer (deviation 34): when the
    /// directory was removed or replaced, make it again and take its new lock, unless
    /// another process holds it (`LockLost`: this one then writes nothing at all).
    fn ensure_writer(&self) -> Result<(), StoreError> {
        let mut held = crate::sync::lock(&self.lock);
        let lock_path = self.root.join(".lock");
        if same_file(&lock_path, &held) {
            ensure_private_dir(&self.threads)?;
            return Ok(());
        }
        ensure_private_dir(&self.root)?;
        ensure_private_dir(&self.threads)?;
        match take_lock(&self.root) {
            Ok(l) => {
                log::warn!(
                    "the state directory {} was removed or replaced: made again and locked",
                    self.root.display()
                );
                *held = l;
                Ok(())
            }
            Err(LockFailure::Busy) => {
                log::error!(
                    "the state directory {} was replaced and another process holds its lock: \
                     this process writes no state any more",
                    self.root.display()
                );
                Err(StoreError::LockLost)
            }
            Err(LockFailure::Io(e)) => Err(StoreError::Io(e)),
        }
    }

    /// Readiness of the store: this process is its writer and a file can be written,
    /// synced and removed in the threads directory (a read-only or full disk fails here).
    pub(crate) fn probe(&self) -> Result<(), StoreError> {
        self.ensure_writer()?;
        let tmp = self.temp_path("probe")?;
        // About the size of a thread file: a full disk refuses a write this size.
        let result = write_new(&tmp, &[b' '; 4096]);
        let _ = fs::remove_file(&tmp);
        result.map_err(StoreError::Io)
    }

    /// A fresh temp-file path in `dir` (`.NAME.RANDOM.tmp`, which start-up cleans up after a
    /// crash).
    fn temp_in(dir: &Path, name: &str) -> Result<PathBuf, StoreError> {
        let mut rnd = [0u8; 4];
        crate::ids::fill(&mut rnd).map_err(|e| StoreError::Io(io::Error::other(e)))?;
        Ok(dir.join(format!(".{name}.{}.tmp", crate::ids::hex(&rnd))))
    }

    fn temp_path(&self, name: &str) -> Result<PathBuf, StoreError> {
        Self::temp_in(&self.threads, name)
    }

    /// A named principal's threads directory, made (0700) with its parents durable, and the
    /// principal's name beside it (`principal`: directory names are stems, not names).
    fn ensure_principal_dir(&self, dir: &Path, caller: &Caller) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        ensure_private_dir(dir)?;
        if let (Some(name), Some(home)) = (caller.name(), dir.parent()) {
            // A temp name of its own: a new principal's first runs make its directory at
            // once, and one shared name let them remove or rename each other's file.
            let tmp = Self::temp_in(home, "principal").map_err(io::Error::other)?;
            let written = write_new(&tmp, name.as_bytes())
                .and_then(|()| fs::rename(&tmp, home.join(PRINCIPAL_NAME)));
            if written.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            written?;
        }
        // The new entries are durable only once each parent's entry is.
        let mut d = dir.parent();
        while let Some(p) = d {
            sync_dir(p)?;
            if p == self.root {
                break;
            }
            d = p.parent();
        }
        Ok(())
    }

    /// A directory of `caller`'s, ready for a write.
    #[allow(
        dead_code,
        reason = "the extras' files (conversations, usage) are written there; the sidecar has none"
    )]
    pub(super) fn writable_dir(&self, caller: &Caller) -> Result<PathBuf, StoreError> {
        self.ensure_writer()?;
        let dir = self.threads_dir(caller);
        if *caller != Caller::Shared {
            self.ensure_principal_dir(&dir, caller)?;
        }
        Ok(dir)
    }

    /// Atomically replace the thread's file.
    pub(crate) fn save(&self, doc: &ThreadDoc) -> Result<(), StoreError> {
        if doc.thread_id.is_empty() {
            return Err(StoreError::Invalid(Refusal::NoThreadId));
        }
        self.ensure_writer()?;
        let dir = self.threads_dir(&doc.owner);
        if doc.owner != Caller::Shared {
            self.ensure_principal_dir(&dir, &doc.owner)?;
        }
        let target = dir.join(format!("{}.json", stem(&doc.thread_id)));
        let file_name = target
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = Self::temp_in(&dir, &file_name)?;
        let bytes = doc.to_bytes();
        let result = (|| -> io::Result<()> {
            write_new(&tmp, &bytes)?;
            fs::rename(&tmp, &target)?;
            // The rename is durable only once the directory entry is.
            sync_dir(&dir)?;
            fs::set_permissions(&target, fs::Permissions::from_mode(0o600))?;
            Ok(())
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(StoreError::Io)
    }
}

/// The state directory (reference §7.1): explicit, else `$IAC_CODE_CONFIG_DIR/agui`, else
/// `~/.iac-code/agui`. `~` and then `$VAR` / `${VAR}` are expanded (Python `expanduser`,
/// `expandvars`); the result is made absolute.
pub(crate) fn state_root(explicit: Option<&Path>, get: impl Fn(&str) -> Option<String>) -> PathBuf {
    let home = get("HOME").unwrap_or_else(|| "/".into());
    let expand = |p: &str| -> PathBuf {
        let user = if p == "~" {
            home.clone()
        } else if let Some(r) = p.strip_prefix("~/") {
            Path::new(&home).join(r).to_string_lossy().into_owned()
        } else {
            p.to_string()
        };
        PathBuf::from(expand_vars(&user, &get))
    };
    let p = match explicit {
        Some(p) => expand(&p.to_string_lossy()),
        None => match get("IAC_CODE_CONFIG_DIR")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
        {
            Some(dir) => expand(&dir).join("agui"),
            None => Path::new(&home).join(".iac-code").join("agui"),
        },
    };
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|c| c.join(&p)).unwrap_or(p)
    }
}

/// Python `os.path.expandvars`: `$name` and `${name}` are replaced when the variable is set;
/// anything else (unset names, a lone `$`, an unclosed `${`) stays as written.
pub(crate) fn expand_vars(s: &str, get: impl Fn(&str) -> Option<String>) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(j) => (&braced[..j], j + 2),
                None => ("", 0),
            }
        } else {
            let n = after.find(|c: char| !is_word(c)).unwrap_or(after.len());
            (&after[..n], n)
        };
        match (used, get(name)) {
            (1.., Some(v)) if !name.is_empty() => out.push_str(&v),
            _ => out.push_str(&rest[i..i + 1 + used]),
        }
        rest = &rest[i + 1 + used..];
    }
    out.push_str(rest);
    out
}

#[cfg(feature = "threads")]
mod logs;
#[cfg(test)]
mod tests;
#[cfg(feature = "quotas")]
mod usage;
