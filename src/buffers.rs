//! The one policy for the buffers a stream keeps for its whole life (ripgrep's line-buffer
//! habit): a buffer keeps its space while a burst flows, gives it back when the stream goes
//! quiet (a waiting stream holds none: docs/performance.md, memory per open stream), and
//! never keeps more than a cap. Each use says which applies ([`Pace`]); what grows a buffer
//! (the SSE reader's and the transport's read sizes) is decided where it is read.

use std::collections::VecDeque;

/// A growable buffer's space.
pub(crate) trait Space: Default {
    fn is_empty(&self) -> bool;
    fn capacity(&self) -> usize;
    fn shrink_to(&mut self, cap: usize);
}

impl<T> Space for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
    fn shrink_to(&mut self, cap: usize) {
        Vec::shrink_to(self, cap);
    }
}

impl<T> Space for VecDeque<T> {
    fn is_empty(&self) -> bool {
        VecDeque::is_empty(self)
    }
    fn capacity(&self) -> usize {
        VecDeque::capacity(self)
    }
    fn shrink_to(&mut self, cap: usize) {
        VecDeque::shrink_to(self, cap);
    }
}

/// How the stream uses the buffer now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// More comes at once: keep the space, down to the cap.
    Burst,
    /// The next use may be far off: an empty buffer gives its space back.
    Quiet,
}

/// The policy, on a buffer that was just emptied (a buffer still holding data is left alone).
pub(crate) fn settle<B: Space>(b: &mut B, pace: Pace, cap: usize) {
    if !b.is_empty() || b.capacity() == 0 {
        return;
    }
    match pace {
        Pace::Quiet => *b = B::default(),
        Pace::Burst if b.capacity() > cap => b.shrink_to(cap),
        Pace::Burst => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_gives_space_back_bursts_keep_it_under_the_cap_and_data_is_never_touched() {
        let mut v: Vec<u8> = Vec::with_capacity(100);
        settle(&mut v, Pace::Burst, 100);
        assert_eq!(v.capacity(), 100);
        settle(&mut v, Pace::Burst, 40);
        assert!(v.capacity() >= 40 && v.capacity() < 100, "{}", v.capacity());
        let mut v: Vec<u8> = Vec::with_capacity(10);
        settle(&mut v, Pace::Quiet, usize::MAX);
        assert_eq!(v.capacity(), 0);
        let mut full = vec![1u8; 10];
        settle(&mut full, Pace::Quiet, 0);
        assert_eq!(full, vec![1u8; 10]);
        let mut q: VecDeque<u8> = VecDeque::with_capacity(8);
        settle(&mut q, Pace::Quiet, 0);
        assert_eq!(q.capacity(), 0);
    }
}
