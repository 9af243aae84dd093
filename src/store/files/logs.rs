//! Stored conversations in the state directory (feature `threads`): `<stem>~history.jsonl` (a thread's log)
//! beside `<stem>.json`, the caller's index `~index.jsonl` in the same directory (`~` never
//! occurs in a stem, and iac-code 0.16.0 opens only `<stem>.json`), and the whole-file form
//! of earlier versions, `<stem>~history.json`, read until its thread's next write migrates
//! it. `/metrics` counts the conversations and their bytes as they change.

use std::fs::{self, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{FileStore, StoreError, read_regular, read_regular_with, sync, sync_dir, write_new};
use crate::conversation::{SERIES, limits};
use crate::principal::{Caller, ThreadKey};
use crate::store::conversations::{ConversationFiles, Found};
use crate::store::document::stem;
use crate::store::index::Stamp;

const LOG_SUFFIX: &str = "~history.jsonl";
const LEGACY_SUFFIX: &str = "~history.json";
const INDEX_FILE: &str = "~index.jsonl";

fn millis(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The size of a file (0 when absent), for the byte gauge.
fn size(p: &Path) -> u64 {
    fs::symlink_metadata(p).map_or(0, |m| m.len())
}

impl FileStore {
    pub(crate) fn log_path(&self, key: &ThreadKey) -> PathBuf {
        self.threads_dir(&key.caller)
            .join(format!("{}{LOG_SUFFIX}", stem(&key.id)))
    }

    fn legacy_path(&self, key: &ThreadKey) -> PathBuf {
        self.threads_dir(&key.caller)
            .join(format!("{}{LEGACY_SUFFIX}", stem(&key.id)))
    }

    fn index_path(&self, caller: &Caller) -> PathBuf {
        self.threads_dir(caller).join(INDEX_FILE)
    }

    /// Count the stored conversations and their bytes (start-up, for `/metrics`).
    pub fn conversation_census(&self) -> (i64, i64) {
        let (mut n, mut bytes) = (0, 0);
        for d in self.all_threads_dirs() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                let log = name.ends_with(LOG_SUFFIX);
                if (log || name.ends_with(LEGACY_SUFFIX))
                    && let Ok(m) = e.metadata()
                {
                    // A thread caught between the two forms counts once.
                    let twin = name
                        .strip_suffix(LEGACY_SUFFIX)
                        .map(|s| format!("{s}{LOG_SUFFIX}"));
                    if log || twin.is_none_or(|t| !d.join(t).exists()) {
                        n += 1;
                    }
                    bytes += m.len() as i64;
                }
            }
        }
        (n, bytes)
    }
}

/// Open the log for writing (made 0600 when absent, never through a symlink).
fn open_log(path: &Path) -> io::Result<(fs::File, bool)> {
    let existed = fs::symlink_metadata(path).is_ok();
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    Ok((f, !existed))
}

impl ConversationFiles for FileStore {
    fn read_log(&self, key: &ThreadKey) -> Result<Option<(Vec<u8>, Stamp)>, StoreError> {
        let read = read_regular_with(&self.log_path(key), limits::MAX_HISTORY_FILE)?;
        Ok(read.map(|(bytes, m)| {
            let stamp = Stamp {
                len: bytes.len() as u64,
                ino: m.ino(),
            };
            (bytes, stamp)
        }))
    }

    fn read_legacy(&self, key: &ThreadKey) -> Result<Option<Vec<u8>>, StoreError> {
        read_regular(&self.legacy_path(key), limits::MAX_HISTORY_FILE)
    }

    fn append_log(&self, key: &ThreadKey, at: u64, bytes: &[u8]) -> Result<Stamp, StoreError> {
        self.writable_dir(&key.caller)?;
        let path = self.log_path(key);
        let (mut f, made) = open_log(&path)?;
        let m = f.metadata()?;
        if !m.is_file() {
            return Err(StoreError::Invalid(super::Refusal::NotRegular));
        }
        let before = m.len();
        if before != at {
            f.set_len(at)?;
        }
        f.seek(SeekFrom::Start(at))?;
        let written = f.write_all(bytes).and_then(|()| sync(&f));
        if let Err(e) = written {
            // What did get written is cut off again: the log stays as it was.
            let _ = f.set_len(at);
            return Err(e.into());
        }
        let len = at + bytes.len() as u64;
        let metrics = &SERIES;
        metrics.bytes.add(len as i64 - before as i64);
        if made && !self.legacy_path(key).exists() {
            metrics.threads.add(1);
        }
        Ok(Stamp { len, ino: m.ino() })
    }

    fn replace_log(&self, key: &ThreadKey, bytes: &[u8]) -> Result<Stamp, StoreError> {
        let dir = self.writable_dir(&key.caller)?;
        let path = self.log_path(key);
        let legacy = self.legacy_path(key);
        let before = size(&path) + size(&legacy);
        let existed = path.exists() || legacy.exists();
        let tmp = Self::temp_in(&dir, "history")?;
        let result = write_new(&tmp, bytes).and_then(|()| fs::rename(&tmp, &path));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        match fs::remove_file(&legacy) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        sync_dir(&dir)?;
        let metrics = &SERIES;
        metrics.bytes.add(bytes.len() as i64 - before as i64);
        if !existed {
            metrics.threads.add(1);
        }
        let ino = fs::symlink_metadata(&path)?.ino();
        Ok(Stamp {
            len: bytes.len() as u64,
            ino,
        })
    }

    fn truncate_log(&self, key: &ThreadKey, len: u64) -> Result<(), StoreError> {
        self.ensure_writer()?;
        let path = self.log_path(key);
        let before = size(&path);
        if len == 0 {
            fs::remove_file(&path)?;
            SERIES.threads.add(-1);
        } else {
            let f = OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&path)?;
            f.set_len(len)?;
            sync(&f)?;
        }
        SERIES.bytes.add(len as i64 - before as i64);
        Ok(())
    }

    fn remove_logs(&self, key: &ThreadKey) -> Result<(), StoreError> {
        self.ensure_writer()?;
        let mut removed = false;
        for p in [self.log_path(key), self.legacy_path(key)] {
            if let Ok(m) = fs::symlink_metadata(&p) {
                fs::remove_file(&p)?;
                SERIES.bytes.add(-(m.len() as i64));
                removed = true;
            }
        }
        if removed {
            SERIES.threads.add(-1);
            sync_dir(&self.threads_dir(&key.caller))?;
        }
        Ok(())
    }

    fn set_aside(&self, key: &ThreadKey) {
        let mut rnd = [0u8; 4];
        let _ = crate::ids::fill(&mut rnd);
        let mut counted = false;
        for from in [self.log_path(key), self.legacy_path(key)] {
            let mut to = from.clone().into_os_string();
            to.push(format!(".damaged-{}", crate::ids::hex(&rnd)));
            if let Ok(m) = fs::symlink_metadata(&from)
                && fs::rename(&from, &to).is_ok()
            {
                SERIES.bytes.add(-(m.len() as i64));
                if !counted {
                    SERIES.threads.add(-1);
                    counted = true;
                }
            }
        }
    }

    fn read_index(&self, caller: &Caller) -> Result<Option<Vec<u8>>, StoreError> {
        read_regular(&self.index_path(caller), limits::MAX_INDEX_FILE)
    }

    fn append_index(&self, caller: &Caller, bytes: &[u8]) -> Result<(), StoreError> {
        self.writable_dir(caller)?;
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(self.index_path(caller))?;
        f.write_all(bytes)?;
        Ok(())
    }

    fn replace_index(&self, caller: &Caller, bytes: &[u8]) -> Result<(), StoreError> {
        let dir = self.writable_dir(caller)?;
        let tmp = Self::temp_in(&dir, "index")?;
        let result =
            write_new(&tmp, bytes).and_then(|()| fs::rename(&tmp, self.index_path(caller)));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        Ok(result?)
    }

    fn scan(&self, caller: &Caller) -> Result<Vec<Found>, StoreError> {
        let dir = self.threads_dir(caller);
        let entries = match fs::read_dir(&dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut by: std::collections::HashMap<String, Found> = Default::default();
        for e in entries {
            let e = e?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            let (s, kind) = if let Some(s) = name.strip_suffix(LOG_SUFFIX) {
                (s, 0)
            } else if let Some(s) = name.strip_suffix(LEGACY_SUFFIX) {
                (s, 1)
            } else if let Some(s) = name
                .strip_suffix(".json")
                .filter(|s| !s.contains('~') || s.starts_with("agui"))
            {
                (s, 2)
            } else {
                continue;
            };
            let f = by.entry(s.to_string()).or_insert_with(|| Found {
                stem: s.to_string(),
                log: None,
                legacy: false,
                state_ms: None,
            });
            let Ok(m) = fs::symlink_metadata(e.path()) else {
                continue;
            };
            match kind {
                0 => {
                    f.log = Some(Stamp {
                        len: m.len(),
                        ino: m.ino(),
                    })
                }
                1 => f.legacy = true,
                _ => f.state_ms = m.modified().ok().map(millis),
            }
        }
        Ok(by.into_values().collect())
    }

    fn thread_id(&self, caller: &Caller, stem: &str) -> Option<String> {
        let dir = self.threads_dir(caller);
        let id_in = |bytes: &[u8]| -> Option<String> {
            let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            v.get("threadId")?.as_str().map(str::to_string)
        };
        let state = read_regular(
            &dir.join(format!("{stem}.json")),
            crate::limits::MAX_STATE_FILE,
        );
        if let Some(id) = state.ok().flatten().and_then(|b| id_in(&b)) {
            return Some(id);
        }
        let log = read_regular(
            &dir.join(format!("{stem}{LOG_SUFFIX}")),
            limits::MAX_HISTORY_FILE,
        );
        if let Some(b) = log.ok().flatten() {
            let first = b.split(|&c| c == b'\n').next().unwrap_or_default();
            if let Some(id) = id_in(first) {
                return Some(id);
            }
        }
        let legacy = read_regular(
            &dir.join(format!("{stem}{LEGACY_SUFFIX}")),
            limits::MAX_HISTORY_FILE,
        );
        legacy.ok().flatten().and_then(|b| id_in(&b))
    }

    fn callers(&self) -> Vec<Caller> {
        FileStore::callers(self)
    }
}
