//! Every bound of the server in one place. Numbers marked "reference" match iac-code 0.16.0.

use std::time::Duration;

/// Largest `POST /` body (reference: exactly 12 MiB is allowed).
pub(crate) const MAX_RUN_BODY: usize = 12 * 1024 * 1024;
/// Largest cancel-route body (reference: `min(12 MiB, 64 KiB)`).
pub(crate) const MAX_CANCEL_BODY: usize = 64 * 1024;
/// Largest request head (request line + headers) before 431.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields in one request before 431.
pub(crate) const MAX_HEADERS: usize = 64;
/// Longest request target before 414.
pub(crate) const MAX_URI_BYTES: usize = 8 * 1024;
/// Longest chunk-size line (size + extensions) in a chunked body.
pub(crate) const MAX_CHUNK_LINE: usize = 1024;
/// Most bytes of trailer fields after the last chunk.
pub(crate) const MAX_TRAILER_BYTES: usize = 8 * 1024;
/// Bytes a busy connection (dispatched or streaming) may buffer from the client before it is
/// treated as abusive and closed: pipelining behind a stream is legal, floods are not.
pub(crate) const MAX_BUFFERED_WHILE_BUSY: usize = 64 * 1024;

/// Silence after which an SSE stream gets `: heartbeat` (reference: 15 s).
pub(crate) const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
/// Time allowed to receive a complete request head once its first byte arrived.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to receive a complete request body once the head is parsed.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Idle time of a keep-alive connection between requests (uvicorn's default is 5 s).
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection with pending output may make no write progress before it is dropped.
pub(crate) const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of unsent output per connection before the client is considered gone.
pub(crate) const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Open client connections; more are answered with 503 and closed.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// Listen backlog (the kernel caps it at `net.core.somaxconn`). mio's default of 1024
/// overflowed under a burst of 1 000 connects and the kernel reset some of them.
pub(crate) const LISTEN_BACKLOG: i32 = 4096;
/// Concurrent worker jobs (runs, cancels); more get a 503 JSON error.
pub(crate) const MAX_JOBS: usize = 2048;
/// Replies a worker may queue for the loop before it blocks (its upstream read stops).
pub(crate) const JOB_QUEUE_CAPACITY: usize = 256;
/// Stack size of worker threads. Only touched pages count towards RSS, so this is a ceiling
/// for recursion over bounded-depth JSON (deeper in debug builds), not a per-thread cost.
pub(crate) const WORKER_STACK_BYTES: usize = 1024 * 1024;
/// Deepest JSON nesting accepted from clients and the kernel (serde_json's own limit is 128).
pub(crate) const MAX_JSON_DEPTH: usize = 100;
/// Threads kept in memory; beyond this, idle ones (no run, no other user) are dropped from
/// the cache and reloaded from their file when named again.
pub(crate) const MAX_CACHED_THREADS: usize = 10_000;
