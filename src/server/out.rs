//! A connection's unsent output. Small pieces (heads, chunk framing, ordinary events) are
//! copied into byte runs; a large event is kept as the shared frame the run's replay log also
//! holds, so a slow reader of a large event costs its bytes once, and written data is dropped
//! a run at a time instead of being moved.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

use super::job::Frame;

use crate::limits::{
    OUT_RUN_MAX as RUN_MAX, OUT_SHARE_FROM as SHARE_FROM, OUT_SPARE_MAX as SPARE_MAX,
};
/// A flush of fewer bytes than this leaves no spare run behind (`trim`).
const QUIET: usize = 2048;
/// Segments handed to one `writev`.
const IOV: usize = 8;

enum Seg {
    Bytes(Vec<u8>),
    Shared(Frame),
}

impl Seg {
    fn as_slice(&self) -> &[u8] {
        match self {
            Seg::Bytes(b) => b,
            Seg::Shared(f) => f,
        }
    }
}

#[derive(Default)]
pub(crate) struct OutBuf {
    segs: VecDeque<Seg>,
    /// Bytes of the front segment already written.
    pos: usize,
    /// Unsent bytes.
    len: usize,
    spare: Vec<u8>,
    /// Bytes written since the last `trim`.
    written: usize,
}

impl OutBuf {
    /// Unsent bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes held: the unsent ones and the sent part of the segment being written (a large
    /// event's frame stays whole until its last byte is out).
    pub(crate) fn held(&self) -> usize {
        self.len + self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append bytes written by `f` into the last byte run.
    pub(crate) fn extend_with(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let reuse = matches!(self.segs.back(), Some(Seg::Bytes(b)) if b.len() < RUN_MAX);
        if !reuse {
            self.segs
                .push_back(Seg::Bytes(std::mem::take(&mut self.spare)));
        }
        let Some(Seg::Bytes(b)) = self.segs.back_mut() else {
            return;
        };
        let before = b.len();
        f(b);
        self.len += b.len() - before;
        if b.is_empty()
            && let Some(Seg::Bytes(b)) = self.segs.pop_back()
        {
            self.spare = b;
        }
    }

    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        self.extend_with(|b| b.extend_from_slice(bytes));
    }

    /// One body piece of a stream (HTTP/1.1 chunk framing when `chunked`).
    pub(crate) fn push_piece(&mut self, data: Frame, chunked: bool) {
        if data.len() < SHARE_FROM {
            return self.extend_with(|b| super::http::write_body_piece(b, &data, chunked));
        }
        if chunked {
            self.extend_with(|b| super::http::write_chunk_head(b, data.len()));
        }
        self.len += data.len();
        self.segs.push_back(Seg::Shared(data));
        if chunked {
            self.extend(b"\r\n");
        }
    }

    /// One `write`/`writev` of the front segments; returns what the writer took.
    pub(crate) fn write_to(&mut self, w: &mut impl Write) -> io::Result<usize> {
        let mut iov: [IoSlice<'_>; IOV] = [IoSlice::new(&[]); IOV];
        let mut k = 0;
        for (i, s) in self.segs.iter().take(IOV).enumerate() {
            let bytes = if i == 0 {
                &s.as_slice()[self.pos..]
            } else {
                s.as_slice()
            };
            iov[k] = IoSlice::new(bytes);
            k += 1;
        }
        let n = if k == 1 {
            w.write(&iov[0])?
        } else {
            w.write_vectored(&iov[..k])?
        };
        self.consume(n);
        Ok(n)
    }

    fn consume(&mut self, mut n: usize) {
        self.len -= n.min(self.len);
        self.written = self.written.saturating_add(n);
        while n > 0 {
            let Some(front) = self.segs.front() else {
                break;
            };
            let left = front.as_slice().len() - self.pos;
            if n < left {
                self.pos += n;
                return;
            }
            n -= left;
            self.pos = 0;
            if let Some(Seg::Bytes(mut b)) = self.segs.pop_front()
                && b.capacity() <= SPARE_MAX
                && self.spare.capacity() == 0
            {
                b.clear();
                self.spare = b;
            }
        }
    }

    /// All written: shrink the segment ring back.
    pub(crate) fn trim(&mut self) {
        use crate::buffers::{Pace, settle};
        // Written segments are already gone (`consume`): the ring is empty once all is out.
        // A quiet connection (an event or a heartbeat at a time) keeps neither the ring nor a
        // spare run between writes (an idle stream holds no output memory); a busy one keeps
        // both, a ring of at most 8 and a run of at most `SPARE_MAX`.
        if self.len == 0 {
            let pace = if self.written < QUIET {
                Pace::Quiet
            } else {
                Pace::Burst
            };
            settle(&mut self.segs, pace, 8);
            settle(&mut self.spare, pace, SPARE_MAX);
        }
        self.written = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Takes at most `max` bytes per call.
    struct Trickle {
        got: Vec<u8>,
        max: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let n = b.len().min(self.max);
            self.got.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn small_and_shared_pieces_come_out_in_order_through_any_write_size() {
        let big: Frame = Arc::new(vec![b'x'; SHARE_FROM + 3]);
        let small: Frame = Arc::new(b"id: 1\ndata: {}\n\n".to_vec());
        let mut want = Vec::new();
        for chunked in [true, false] {
            for max in [1, 7, 4096, usize::MAX] {
                let mut o = OutBuf::default();
                want.clear();
                o.extend(b"HEAD\r\n\r\n");
                want.extend_from_slice(b"HEAD\r\n\r\n");
                for f in [&small, &big, &small, &big, &big] {
                    o.push_piece(f.clone(), chunked);
                    crate::server::http::write_body_piece(&mut want, f, chunked);
                }
                assert_eq!(o.len(), want.len());
                let mut w = Trickle {
                    got: Vec::new(),
                    max,
                };
                while !o.is_empty() {
                    // Interleave: more output arrives while some is being written.
                    o.write_to(&mut w).unwrap();
                }
                assert_eq!(w.got, want, "chunked {chunked} max {max}");
                o.trim();
                assert!(o.segs.is_empty());
            }
        }
    }

    #[test]
    fn a_quiet_connection_keeps_no_spare_run_a_busy_one_does() {
        let mut w = Trickle {
            got: Vec::new(),
            max: usize::MAX,
        };
        let mut o = OutBuf::default();
        o.push_piece(Arc::new(b"id: 1\ndata: {}\n\n".to_vec()), true);
        while !o.is_empty() {
            o.write_to(&mut w).unwrap();
        }
        o.trim();
        assert_eq!(
            o.spare.capacity(),
            0,
            "one event: nothing kept while the stream waits"
        );
        let ev: Frame = Arc::new(vec![b'e'; 200]);
        for _ in 0..50 {
            o.push_piece(ev.clone(), true);
        }
        while !o.is_empty() {
            o.write_to(&mut w).unwrap();
        }
        o.trim();
        assert!(
            o.spare.capacity() > 0,
            "a burst keeps its run for the next one"
        );
    }

    /// The output budget counts what a connection holds: a large frame partly written is
    /// still held whole (issue 36, fault 2).
    #[test]
    fn a_frame_partly_written_is_held_whole() {
        let big: Frame = Arc::new(vec![b'x'; SHARE_FROM + 1000]);
        let mut o = OutBuf::default();
        o.push_piece(big.clone(), false);
        let mut w = Trickle {
            got: Vec::new(),
            max: 600,
        };
        o.write_to(&mut w).unwrap();
        assert!(o.len() < big.len(), "some was written");
        assert_eq!(o.held(), big.len());
        while !o.is_empty() {
            o.write_to(&mut w).unwrap();
        }
        o.trim();
        assert_eq!(o.held(), 0);
    }

    #[test]
    fn a_large_frame_is_held_once_not_copied() {
        let big: Frame = Arc::new(vec![b'x'; 8 << 20]);
        let mut o = OutBuf::default();
        o.push_piece(big.clone(), true);
        assert_eq!(Arc::strong_count(&big), 2, "shared with the output");
        let mut w = Trickle {
            got: Vec::new(),
            max: usize::MAX,
        };
        while !o.is_empty() {
            o.write_to(&mut w).unwrap();
        }
        assert_eq!(Arc::strong_count(&big), 1, "released once written");
    }

    #[test]
    fn a_slowly_written_run_does_not_grow_forever() {
        let mut o = OutBuf::default();
        let ev: Frame = Arc::new(vec![b'e'; 100]);
        let mut w = Trickle {
            got: Vec::new(),
            max: 90,
        };
        for _ in 0..100_000 {
            o.push_piece(ev.clone(), true);
            o.write_to(&mut w).unwrap();
        }
        // Output keeps growing by 10 bytes per event here; no single run holds it all.
        let biggest = o
            .segs
            .iter()
            .map(|s| match s {
                Seg::Bytes(b) => b.capacity(),
                Seg::Shared(_) => 0,
            })
            .max()
            .unwrap();
        assert!(biggest <= 2 * RUN_MAX, "a run of {biggest} bytes");
    }
}
