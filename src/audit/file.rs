//! The audit log's file: append-only, one record per `write`, fsync'd before the decision is
//! acknowledged, mode 0600, rotated by size. A record cut by a crash or a full disk never
//! stays in the middle of the file: a failed append is truncated away at once, and a torn
//! last line found at start-up is moved to `PATH.torn` (so the file always reads as JSON
//! Lines). One writer behind a mutex: records never interleave.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::sync::lock;

/// Largest number of rotated files `--audit-keep` takes.
pub(crate) const MAX_KEEP: usize = 100;

pub struct AuditFile {
    path: PathBuf,
    /// Rotate before a record would make the file larger than this.
    max_bytes: u64,
    /// Rotated files kept (`PATH.1` the newest); 0: the full file is dropped.
    keep: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    /// `None` after a rotation whose new file could not be opened: the next append tries.
    file: Option<File>,
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
        let size = if regular { file.metadata()?.len() } else { 0 };
        let inner = Inner {
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

    /// `PATH` → `PATH.1` → … → `PATH.keep` (the oldest dropped), and a new `PATH`.
    fn rotate(&self, inner: &mut Inner) -> io::Result<()> {
        inner.file = None;
        let numbered = |n: usize| with_suffix(&self.path, &format!(".{n}"));
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for n in (1..self.keep).rev() {
                match std::fs::rename(numbered(n), numbered(n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        let file = open_append(&self.path)?;
        sync_dir(&self.path);
        inner.file = Some(file);
        inner.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
