//! The output budget: what all connections together hold for their clients (unsent output
//! plus replies queued by workers), like the body budget for uploads. The loop keeps each
//! connection's share ([`Share`]) and the total; this module is the bookkeeping, the loop
//! acts on it (refusing streams, marking runs behind, releasing them).

/// Spent past `limit`; available again once the total fell to 7/8 of it, so runs near the
/// limit are not paused and released at every event.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    limit: usize,
    over: bool,
    /// Unsent output of all connections (the sum of their shares).
    unsent: usize,
}

/// One connection's unsent output as counted in the budget.
#[derive(Debug, Default)]
pub(crate) struct Share(usize);

impl OutputBudget {
    pub(crate) fn new(limit: usize) -> OutputBudget {
        OutputBudget {
            limit,
            over: false,
            unsent: 0,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The budget is spent (as of the last [`OutputBudget::update`]).
    pub(crate) fn is_over(&self) -> bool {
        self.over
    }

    /// Count a connection's unsent output as `now` bytes.
    pub(crate) fn set(&mut self, share: &mut Share, now: usize) {
        self.unsent = self.unsent - share.0 + now;
        share.0 = now;
    }

    /// Bytes counted for the connection.
    pub(crate) fn get(share: &Share) -> usize {
        share.0
    }

    /// The connection is gone: its share is given back.
    pub(crate) fn release(&mut self, share: Share) {
        self.unsent -= share.0;
    }

    /// Unsent output of all connections.
    pub(crate) fn unsent(&self) -> usize {
        self.unsent
    }

    /// Unsent output plus `queued` (the workers' queues): the bytes held for clients.
    pub(crate) fn held(&self, queued: usize) -> usize {
        self.unsent.saturating_add(queued)
    }

    /// Re-decide with what is held now; true when the budget became spent or available.
    pub(crate) fn update(&mut self, held: usize) -> bool {
        let over = if self.over {
            held > self.limit - self.limit / 8
        } else {
            held > self.limit
        };
        let changed = over != self.over;
        self.over = over;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_past_the_limit_available_again_below_seven_eighths() {
        let mut b = OutputBudget::new(800);
        assert!(!b.update(800), "at the limit is within it");
        assert!(!b.is_over());
        assert!(b.update(801));
        assert!(b.is_over());
        // Hysteresis: back under the limit is not enough.
        assert!(!b.update(750));
        assert!(b.is_over());
        assert!(!b.update(701));
        assert!(b.update(700));
        assert!(!b.is_over());
        assert!(!b.update(799));
    }

    #[test]
    fn shares_add_up_and_are_given_back() {
        let mut b = OutputBudget::new(1000);
        let (mut x, mut y) = (Share::default(), Share::default());
        b.set(&mut x, 600);
        b.set(&mut y, 300);
        assert_eq!(b.held(50), 950);
        b.set(&mut x, 100); // written
        assert_eq!(b.held(0), 400);
        b.set(&mut y, 900); // grew
        assert_eq!(b.held(0), 1000);
        b.release(x);
        assert_eq!(b.held(0), 900);
        b.release(y);
        assert_eq!(b.held(7), 7);
    }
}
