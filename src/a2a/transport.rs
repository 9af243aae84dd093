//! The TCP transport under ureq, with buffers sized for a stream that mostly waits.
//!
//! ureq's own `LazyBuffers` keep, for the life of a connection, an input buffer of at least
//! 10 KiB (sending any request body grows it to that for scratch space) and the whole output
//! buffer. An open stream of the kernel sits in a blocked read almost all its life: that was
//! ~11.8 KiB of a stream's ~25 KiB of heap (docs/performance.md, issue 26). Here the output
//! and scratch buffers live only while a request is written (they go at the first read),
//! and the input buffer follows the traffic: [`READ_SMALL`] while events come one at a
//! time, and from a read that brought at least the small space's worth (a burst) twice the
//! last read's space up to [`READ_BIG`], until a read brings less.
//!
//! Each connection is counted (`iac_agui_kernel_connections_total`): `tests/it/tuning.rs` fails
//! when a run's requests go out on another connector. It implements ureq's `unversioned`
//! traits, hence ureq pinned `~3.5` (Cargo.toml, docs/dependencies.md).
//!
//! Loopback plain TCP only (the kernel URL is checked to be loopback `http://`); the
//! connect, per-read and per-write timeouts and ureq's shutdown handle (the run's aborter)
//! work as with ureq's `TcpConnector`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ureq::Timeout;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, NextTimeout, ShutdownHandle, Transport,
};

use crate::limits::{A2A_READ_BIG as READ_BIG, A2A_READ_SMALL as READ_SMALL};

/// The most unread input held (a response head is bounded by ureq's own limit first).
const INPUT_MAX: usize = crate::limits::A2A_MAX_RESPONSE_HEAD + READ_BIG;

/// Connects plain TCP with [`LeanTransport`]s.
#[derive(Debug, Default)]
pub(crate) struct LeanConnector;

impl Connector<()> for LeanConnector {
    type Out = LeanTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<LeanTransport>, ureq::Error> {
        let per_try = details.timeout.not_zero().map(|d| *d);
        let mut last = None;
        for addr in details.addrs.iter() {
            let tried = match per_try {
                Some(t) => TcpStream::connect_timeout(addr, t),
                None => TcpStream::connect(addr),
            };
            match tried {
                Ok(stream) => {
                    // Counted so that an agent built without this connector (ureq's own
                    // buffers back: ~11.8 KiB more heap per open stream) fails
                    // `tests/it/tuning.rs`.
                    crate::metrics::M.lean_connects.inc();
                    if details.config.no_delay() {
                        stream.set_nodelay(true)?;
                    }
                    let t = LeanTransport::new(stream);
                    (details.register_shutdown)(t.shutdown_handle())?;
                    return Ok(Some(t));
                }
                Err(e) if is_timeout(&e) => last = Some(ureq::Error::Timeout(Timeout::Connect)),
                Err(e) => last = Some(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::ConnectionRefused, "no address to connect to").into()
        }))
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// One connection to the kernel.
#[derive(Debug)]
pub(crate) struct LeanTransport {
    /// Shared (weakly) with the shutdown handle, which shuts the socket down from another
    /// thread to end a blocked read.
    stream: Arc<TcpStream>,
    buffers: LeanBuffers,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// The socket is in non-blocking mode: while a burst flows, so that a read that would
    /// wait does so in the small space, not in a burst's (a stream that goes quiet right
    /// after a full read would otherwise wait, for as long as it is quiet, on READ_BIG).
    nonblocking: bool,
}

impl LeanTransport {
    fn new(stream: TcpStream) -> LeanTransport {
        LeanTransport {
            stream: Arc::new(stream),
            buffers: LeanBuffers::default(),
            read_timeout: None,
            write_timeout: None,
            nonblocking: false,
        }
    }

    fn shutdown_handle(&self) -> Weak<dyn ShutdownHandle> {
        Arc::downgrade(&self.stream) as Weak<dyn ShutdownHandle>
    }
}

/// The time left of `t`, or the timeout error when none is.
/// What is left of a wait a signal cut short.
#[derive(Debug, PartialEq, Eq)]
enum Rest {
    /// It has no deadline.
    Unbounded,
    For(Duration),
    Over,
}

/// The rest of a wait that ends at `deadline` (`None`: none): it goes on for what is left,
/// never the whole timeout again.
fn rest_of(deadline: Option<std::time::Instant>, now: std::time::Instant) -> Rest {
    match deadline.map(|d| d.saturating_duration_since(now)) {
        None => Rest::Unbounded,
        Some(rest) if rest.is_zero() => Rest::Over,
        Some(rest) => Rest::For(rest),
    }
}

fn left(t: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if t.after.is_zero() {
        return Err(ureq::Error::Timeout(t.reason));
    }
    Ok(t.not_zero().map(|d| *d))
}

impl Transport for LeanTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let t = left(timeout)?;
        if self.nonblocking {
            self.stream.set_nonblocking(false)?;
            self.nonblocking = false;
        }
        if t != self.write_timeout {
            self.stream.set_write_timeout(t)?;
            self.write_timeout = t;
        }
        let out = self.buffers.output.get(..amount).ok_or_else(|| {
            io::Error::other("ureq asked to send more than its output buffer holds")
        })?;
        match (&*self.stream).write_all(out) {
            Ok(()) => Ok(()),
            Err(e) if is_timeout(&e) => Err(ureq::Error::Timeout(timeout.reason)),
            Err(e) => Err(e.into()),
        }
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        let t = left(timeout)?;
        if t != self.read_timeout {
            self.stream.set_read_timeout(t)?;
            self.read_timeout = t;
        }
        // The request is out once an answer is awaited.
        self.buffers.release_output();
        let clock = crate::clock::SystemClock;
        let deadline = t.map(|d| crate::clock::Clock::now(&clock) + d);
        let n = loop {
            let burst = self.buffers.burst;
            if burst != self.nonblocking {
                self.stream.set_nonblocking(burst)?;
                self.nonblocking = burst;
            }
            let space = self.buffers.append_space();
            match (&*self.stream).read(space) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    let rest = match rest_of(deadline, crate::clock::Clock::now(&clock)) {
                        Rest::Over => return Err(ureq::Error::Timeout(timeout.reason)),
                        Rest::For(d) => Some(d),
                        Rest::Unbounded => None,
                    };
                    if rest != self.read_timeout {
                        self.stream.set_read_timeout(rest)?;
                        self.read_timeout = rest;
                    }
                    continue;
                }
                // The burst is over: wait for what comes next in the small space.
                Err(e) if self.nonblocking && e.kind() == io::ErrorKind::WouldBlock => {
                    self.buffers.burst = false;
                    continue;
                }
                Err(e) if is_timeout(&e) => return Err(ureq::Error::Timeout(timeout.reason)),
                Err(e) => return Err(e.into()),
                Ok(n) => break n,
            }
        };
        self.buffers.appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        // A pooled connection is reusable when nothing is waiting on it and it is not closed.
        let probe = || -> io::Result<bool> {
            self.stream.set_nonblocking(true)?;
            let mut b = [0u8; 1];
            let open = matches!(
                (&*self.stream).read(&mut b),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock
            );
            self.stream.set_nonblocking(false)?;
            Ok(open)
        };
        let open = probe().unwrap_or(false);
        self.nonblocking = false;
        open
    }
}

/// Input with a consumed prefix `..start` and data `start..end`; output and scratch space
/// only while a request is written.
#[derive(Debug, Default)]
pub(crate) struct LeanBuffers {
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// The last read brought at least [`READ_SMALL`] bytes: data is flowing.
    burst: bool,
    /// The space a burst's next read gets: doubled by each read that fills its space, up
    /// to [`READ_BIG`], so an event just over the small space does not cost a whole
    /// burst's space (allocated and zeroed, then given back).
    grow: usize,
    progress: bool,
    output: Vec<u8>,
    scratch: Vec<u8>,
}

impl LeanBuffers {
    fn release_output(&mut self) {
        if !self.output.is_empty() {
            self.output = Vec::new();
            self.scratch = Vec::new();
        }
    }

    /// Free space after the data, sized by [`READ_SMALL`] / [`READ_BIG`] (empty at
    /// [`INPUT_MAX`]: the read then sees no progress and ureq fails the call).
    fn append_space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start > 0 {
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let chunk = if self.burst {
            self.grow.clamp(READ_SMALL, READ_BIG)
        } else {
            READ_SMALL
        };
        let want = (self.end + chunk).min(INPUT_MAX).max(self.end);
        if self.input.len() < want {
            self.input.resize(want, 0);
        } else if self.input.len() > want {
            // After a burst: give the space back while the stream waits.
            self.input.truncate(want);
            self.input.shrink_to_fit();
        }
        &mut self.input[self.end..]
    }

    fn appended(&mut self, n: usize) {
        let given = self.input.len().saturating_sub(self.end);
        self.end = (self.end + n).min(self.input.len());
        self.burst = n >= READ_SMALL;
        // A burst always starts with a full read of the small space, which sets this.
        if self.burst && n >= given {
            self.grow = given.saturating_mul(2).min(READ_BIG);
        }
    }

    fn ensure_output(&mut self) {
        if self.output.is_empty() {
            self.output = vec![0; crate::limits::A2A_OUTPUT_BUFFER];
        }
    }

    /// Bytes held (tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.input.capacity() + self.output.capacity() + self.scratch.capacity()
    }
}

impl Buffers for LeanBuffers {
    fn output(&mut self) -> &mut [u8] {
        self.ensure_output();
        &mut self.output
    }

    fn input(&self) -> &[u8] {
        &self.input[self.start..self.end]
    }

    fn input_append_buf(&mut self) -> &mut [u8] {
        self.append_space()
    }

    fn input_appended(&mut self, amount: usize) {
        self.appended(amount);
    }

    fn input_consume(&mut self, amount: usize) {
        self.progress = amount > 0;
        self.start = (self.start + amount).min(self.end);
    }

    fn tmp_and_output(&mut self) -> (&mut [u8], &mut [u8]) {
        self.ensure_output();
        if self.scratch.is_empty() {
            self.scratch = vec![0; crate::limits::A2A_OUTPUT_BUFFER];
        }
        (&mut self.scratch, &mut self.output)
    }

    fn can_use_input(&self) -> bool {
        self.start < self.end && self.progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_wait_keeps_its_deadline() {
        let t0 = crate::clock::Clock::now(&crate::clock::SystemClock);
        let deadline = Some(t0 + Duration::from_secs(10));
        let at = |s| rest_of(deadline, t0 + Duration::from_secs(s));
        assert_eq!(at(7), Rest::For(Duration::from_secs(3)));
        assert_eq!(at(10), Rest::Over);
        assert_eq!(at(11), Rest::Over);
        assert_eq!(rest_of(None, t0), Rest::Unbounded);
    }

    /// The transport implements ureq's `unversioned` traits, which may change in any minor
    /// release: Cargo.toml pins the minor that is implemented, and the lock holds it.
    #[test]
    fn ureq_is_pinned_to_the_minor_whose_unversioned_traits_are_implemented() {
        const MINOR: &str = "3.5";
        let toml = include_str!("../../Cargo.toml");
        let dep = toml
            .lines()
            .find(|l| l.starts_with("ureq ") || l.starts_with("ureq="))
            .unwrap_or_default();
        assert!(dep.contains(&format!("\"~{MINOR}\"")), "Cargo.toml: {dep}");
        let lock = include_str!("../../Cargo.lock");
        let locked = lock
            .split("name = \"ureq\"\nversion = \"")
            .nth(1)
            .unwrap_or_default();
        assert!(
            locked.starts_with(&format!("{MINOR}.")),
            "Cargo.lock: ureq {locked:.8}"
        );
        // Compile-time: these are the traits and methods implemented here.
        fn transport<T: Transport>() {}
        fn connector<C: Connector<()>>() {}
        transport::<LeanTransport>();
        connector::<LeanConnector>();
    }

    /// Feed `data` as a read of at most the space given; returns the bytes taken.
    fn feed(b: &mut LeanBuffers, data: &[u8]) -> usize {
        let space = b.input_append_buf();
        let n = space.len().min(data.len());
        space[..n].copy_from_slice(&data[..n]);
        b.input_appended(n);
        n
    }

    #[test]
    fn an_idle_stream_holds_only_the_small_read_space() {
        let mut b = LeanBuffers::default();
        b.output()[..4].copy_from_slice(b"POST");
        let _ = b.tmp_and_output();
        assert!(b.held() >= 2 * crate::limits::A2A_OUTPUT_BUFFER);
        b.release_output();
        assert_eq!(feed(&mut b, b"HTTP/1.1 200 OK\r\n\r\n"), 19);
        b.input_consume(19);
        let _ = b.input_append_buf();
        assert_eq!(
            b.held(),
            READ_SMALL,
            "the request buffers went at the first read"
        );
    }

    #[test]
    fn a_burst_grows_the_read_space_and_it_shrinks_after() {
        let mut b = LeanBuffers::default();
        let flood = vec![b'x'; 4 * READ_BIG];
        let mut at = 0;
        // Reads that fill their space: each next space is twice the last, up to READ_BIG.
        let mut space = READ_SMALL;
        let mut spaces = Vec::new();
        while at < flood.len() {
            let n = feed(&mut b, &flood[at..]);
            assert_eq!(n, space.min(flood.len() - at));
            spaces.push(n);
            b.input_consume(n);
            at += n;
            space = (space * 2).min(READ_BIG);
        }
        assert_eq!(spaces[..3], [READ_SMALL, 2 * READ_SMALL, 4 * READ_SMALL]);
        assert!(spaces.contains(&READ_BIG), "{spaces:?}");
        // A read of less than READ_SMALL (the burst is over): the next space is small again.
        assert_eq!(feed(&mut b, b"data: {}\n\n"), 10);
        b.input_consume(10);
        assert_eq!(b.input_append_buf().len(), READ_SMALL);
        assert_eq!(b.held(), READ_SMALL);
    }

    /// A stream that goes quiet right after a read that filled the small space: its next
    /// read waits in the small space, not in a burst's.
    #[test]
    fn a_burst_that_ends_waits_in_the_small_read_space() {
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut server, _) = l.accept().unwrap();
        let mut t = LeanTransport::new(client);
        server.write_all(&vec![b'x'; READ_SMALL]).unwrap();
        let mut got = 0;
        while got < READ_SMALL {
            assert!(t.await_input(NextTimeout::default()).unwrap());
            got = t.buffers.input().len();
        }
        assert!(t.buffers.burst, "a full read starts a burst");
        let n = t.buffers.input().len();
        t.buffers.input_consume(n);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            server.write_all(b"data: {}\n\n").unwrap();
            server
        });
        assert!(t.await_input(NextTimeout::default()).unwrap());
        assert_eq!(t.buffers.input(), b"data: {}\n\n");
        assert_eq!(
            t.buffers.held(),
            READ_SMALL,
            "the wait had only the small space"
        );
        // And a request written after it goes out on a blocking socket.
        t.buffers.output()[..4].copy_from_slice(b"ping");
        t.transmit_output(4, NextTimeout::default()).unwrap();
        let mut server = writer.join().unwrap();
        let mut four = [0u8; 4];
        server.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"ping");
    }

    #[test]
    fn unconsumed_input_is_kept_and_bounded() {
        let mut b = LeanBuffers::default();
        // A head that arrives in pieces is not consumed (no progress) until it is whole.
        assert_eq!(feed(&mut b, b"HTTP/1.1 200"), 12);
        b.input_consume(0);
        assert!(!b.can_use_input());
        assert_eq!(feed(&mut b, b" OK\r\n\r\nbody"), 11);
        assert_eq!(b.input(), b"HTTP/1.1 200 OK\r\n\r\nbody");
        b.input_consume(19);
        assert!(b.can_use_input());
        assert_eq!(b.input(), b"body");
        // A peer that never completes what it sends hits INPUT_MAX, then gets no space.
        let junk = vec![b'j'; 4096];
        let mut b = LeanBuffers::default();
        while feed(&mut b, &junk) > 0 {
            b.input_consume(0);
        }
        assert_eq!(b.input().len(), INPUT_MAX);
    }
}
