//! The audit log's file: append-only, one record per `write`, fsync'd before the decision is
//! acknowledged, mode 0600, rotated by size. A record cut by a crash or a full disk never
//! stays in the middle of the file: a failed append is truncated away at once, and a torn
//! last line found at start-up is moved to `PATH.torn` (so the file always reads as JSON
//! Lines). One writer behind a mutex: records never interleave.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::sync::lock;

/// Largest number of rotated files `--audit-keep` takes.
pub(crate) const MAX_KEEP: usize = 100;
/// The default rotation size (`--audit-max-bytes`): 100 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 100 * 1024 * 1024;
/// Rotated files kept by default (`--audit-keep`).
pub(crate) const DEFAULT_KEEP: usize = 5;

pub struct AuditFile {
    path: PathBuf,
    /// Rotate before a record would make the file larger than this.
    max_bytes: u64,
    /// Rotated files kept (`PATH.1` the newest); 0: the full file is dropped.
    keep: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    /// `None` after a rotation or a reopen that could not open the file: the next append tries.
    file: Option<File>,
    /// The open file's (device, inode): a regular file is appended to only while `path`
    /// still names it.
    id: Option<(u64, u64)>,
    size: u64,
    /// A regular file: rotated, recovered, fsync'd (a device or a pipe is written only).
    regular: bool,
    /// A failed write whose bytes could not be truncated away: done before the next record,
    /// which must not follow half of one.
    dirty: bool,
}

/// What start-up set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Recovered {
    /// Bytes of a torn last line moved to `PATH.torn`.
    pub(crate) torn_bytes: u64,
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// `PATH` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The directory of `path`, fsync'd so a rename or a new file survives a crash (best effort:
/// some file systems refuse to sync a directory).
fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Where the last complete line ends (0: none), reading back from the end in blocks.
fn last_newline_end(f: &mut File, len: u64) -> io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let mut end = len;
    let mut buf = vec![0u8; BLOCK as usize];
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let n = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// A torn last line (no final `\n`: a crash during a write) moved to `PATH.torn`, the file
/// truncated after its last complete line.
fn recover(path: &Path, f: &mut File, len: u64) -> io::Result<Recovered> {
    if len == 0 {
        return Ok(Recovered::default());
    }
    let keep = last_newline_end(f, len)?;
    if keep == len {
        return Ok(Recovered::default());
    }
    let mut torn = Vec::new();
    f.seek(SeekFrom::Start(keep))?;
    f.take(len - keep).read_to_end(&mut torn)?;
    torn.push(b'\n');
    let aside = with_suffix(path, ".torn");
    let mut t = open_append(&aside)?;
    t.write_all(&torn)?;
    t.sync_all()?;
    f.set_len(keep)?;
    f.sync_all()?;
    Ok(Recovered {
        torn_bytes: len - keep,
    })
}

impl AuditFile {
    /// Open (or create, mode 0600) the log at `path`, setting a torn last line aside.
    pub(crate) fn open(
        path: &Path,
        max_bytes: u64,
        keep: usize,
    ) -> io::Result<(AuditFile, Recovered)> {
        let mut file = open_append(path)?;
        let meta = file.metadata()?;
        let regular = meta.is_file();
        let mut recovered = Recovered::default();
        if regular {
            // A file made by someone else with a wider mode: the log holds who did what.
            if meta.permissions().mode() & 0o777 != 0o600 {
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            // Reading needs a handle of its own (this one only appends).
            let mut rw = OpenOptions::new().read(true).write(true).open(path)?;
            recovered = recover(path, &mut rw, meta.len())?;
            file = open_append(path)?;
            sync_dir(path);
        }
        let meta = file.metadata()?;
        let size = if regular { meta.len() } else { 0 };
        let inner = Inner {
            id: Some((meta.dev(), meta.ino())),
            file: Some(file),
            size,
            regular,
            dirty: false,
        };
        Ok((
            AuditFile {
                path: path.to_path_buf(),
                max_bytes: max_bytes.max(1),
                keep: keep.min(MAX_KEEP),
                inner: Mutex::new(inner),
            },
            recovered,
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record (a whole line) and fsync it. On any failure nothing of it stays.
    pub(crate) fn append(&self, line: &[u8]) -> io::Result<()> {
        let mut guard = lock(&self.inner);
        // A plain borrow: its fields are borrowed apart below.
        let inner = &mut *guard;
        if inner.regular {
            self.follow_path(inner)?;
        }
        if inner.regular && inner.size > 0 && inner.size + line.len() as u64 > self.max_bytes {
            self.rotate(inner)?;
        }
        let regular = inner.regular;
        let size = inner.size;
        let file = match inner.file.as_mut() {
            Some(f) => f,
            None => inner.file.insert(open_append(&self.path)?),
        };
        if inner.dirty {
            file.set_len(size)?;
            inner.dirty = false;
        }
        let written = file.write_all(line).and_then(|()| {
            // fsync on a device or a pipe fails with EINVAL: only a file is synced.
            if regular { file.sync_data() } else { Ok(()) }
        });
        match written {
            Ok(()) => {
                inner.size += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                // A short write (a full disk) must not leave half a record for the next one
                // to follow.
                if regular && let Some(f) = inner.file.as_mut() {
                    inner.dirty = f.set_len(size).is_err();
                }
                Err(e)
            }
        }
    }

    /// The open file is the one `PATH` names: one removed or replaced under the server (by
    /// hand, by an outside rotation) is left for a new one opened at `PATH`, so no record goes
    /// to an inode no one can read. Anything but a regular file at `PATH` is refused rather
    /// than opened (a FIFO would block every decision).
    fn follow_path(&self, inner: &mut Inner) -> io::Result<()> {
        let named = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if let Some(m) = &named {
            if inner.file.is_some() && inner.id == Some((m.dev(), m.ino())) {
                return Ok(());
            }
            if !m.is_file() {
                return Err(io::Error::other(format!(
                    "{} is no longer a regular file",
                    self.path.display()
                )));
            }
        }
        if inner.file.is_some() {
            log::warn!(
                "audit log {}: the file was {} while the server ran; going on in a new file at that path",
                self.path.display(),
                if named.is_some() {
                    "replaced"
                } else {
                    "removed"
                }
            );
        }
        // What was pending on the old file (`dirty`) is no concern of the new one.
        inner.file = None;
        inner.id = None;
        inner.dirty = false;
        let file = open_append(&self.path)?;
        let meta = file.metadata()?;
        if meta.permissions().mode() & 0o777 != 0o600 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        if named.is_none() {
            sync_dir(&self.path);
        }
        inner.size = meta.len();
        inner.id = Some((meta.dev(), meta.ino()));
        inner.file = Some(file);
        Ok(())
    }

    /// `PATH` → `PATH.1` → … → `PATH.keep` (the oldest dropped), and a new `PATH`. A `PATH`
    /// gone meanwhile is nothing to rotate.
    fn rotate(&self, inner: &mut Inner) -> io::Result<()> {
        inner.file = None;
        inner.id = None;
        let numbered = |n: usize| with_suffix(&self.path, &format!(".{n}"));
        let gone = |r: io::Result<()>| match r {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        if self.keep == 0 {
            gone(std::fs::remove_file(&self.path))?;
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for n in (1..self.keep).rev() {
                gone(std::fs::rename(numbered(n), numbered(n + 1)))?;
            }
            gone(std::fs::rename(&self.path, numbered(1)))?;
        }
        let file = open_append(&self.path)?;
        sync_dir(&self.path);
        let meta = file.metadata()?;
        inner.id = Some((meta.dev(), meta.ino()));
        inner.size = meta.len();
        inner.file = Some(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
