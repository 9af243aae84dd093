//! Callers' usage (`quota.rs`) in the state directory: `~usage.json` in each caller's threads
//! directory (`~` never occurs in a stem, so no thread is named so), replaced whole (temp file,
//! fsync, rename, directory fsync) by the chores thread's flush.

use std::fs;
use std::io;

use super::{FileStore, StoreError, read_regular};
use crate::principal::Caller;

const USAGE_FILE: &str = "~usage.json";

/// A usage file is a few hundred days of a few numbers.
const MAX_USAGE_FILE: u64 = 1 << 20;

fn io_of(e: StoreError) -> io::Error {
    match e {
        StoreError::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

impl crate::quota::UsageFiles for FileStore {
    fn load_usage(&self, caller: &Caller) -> io::Result<Option<Vec<u8>>> {
        read_regular(&self.threads_dir(caller).join(USAGE_FILE), MAX_USAGE_FILE).map_err(io_of)
    }

    fn save_usage(&self, caller: &Caller, bytes: &[u8]) -> io::Result<()> {
        let dir = self.writable_dir(caller).map_err(io_of)?;
        let tmp = Self::temp_in(&dir, "usage").map_err(io_of)?;
        // Not `write_new`: its fsync is counted in `iac_agui_fsyncs_total`, what a run pays,
        // and this one is paid by the flush period, not by a run.
        let written = (|| {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, dir.join(USAGE_FILE))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        fs::File::open(&dir)?.sync_all()
    }
}
