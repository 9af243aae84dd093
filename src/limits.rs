//! Most bounds of the server in one place (the rest sit beside the rule they belong to).
//! Numbers marked "reference" match iac-code 0.16.0.

use std::time::Duration;

/// Largest `POST /` body (reference: exactly 12 MiB is allowed).
pub(crate) const MAX_RUN_BODY: usize = 12 * 1024 * 1024;
/// All request bodies being read at once hold at most this much (bodies up to
/// `BODY_BUDGET_EXEMPT` do not count): a request whose body would pass it gets 503
/// `SERVER_BUSY` with `Retry-After` before its body is read. Without it, 64 stalled 12 MiB
/// uploads held 775 MiB for the whole body timeout.
pub(crate) const BODY_BUDGET: usize = 64 * 1024 * 1024;
/// Bodies this small never wait for the budget (every ordinary run, cancel and subscribe
/// request): at most `MAX_CONNECTIONS` × this, 64 MiB at the default limit.
pub(crate) const BODY_BUDGET_EXEMPT: usize = 16 * 1024;
/// Longest `threadId`, `runId` or `parentRunId` a client may give (every route that takes
/// one; `agui::field::id_ok`). Each event of a run repeats its ids, the replay log keeps the
/// events for `REPLAY_RETENTION`, the thread cache and the audit and access logs copy them:
/// twelve runs with 6 MiB thread ids left the server 504 MiB larger (issue 57, 3). 256 bytes
/// hold a UUID, a ULID or a long composite id with room to spare, and an audit record, which
/// keeps 256 characters of a field, holds them whole.
pub(crate) const MAX_ID_BYTES: usize = 256;
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
/// How long a browser may keep a preflight's answer (`--cors-origins`); Chromium caps it at 2 h.
#[cfg(feature = "cors")]
pub(crate) const CORS_MAX_AGE: Duration = Duration::from_secs(600);
/// Distinct refused origins whose refusal is logged (each once); past them one line says so.
#[cfg(feature = "cors")]
pub(crate) const CORS_REFUSALS_LOGGED: usize = 64;
/// Time allowed to receive a complete request head once its first byte arrived.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to receive a complete request body once the head is parsed.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Idle time of a keep-alive connection between requests (uvicorn's default is 5 s).
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection with pending output may make no write progress before it is dropped.
pub(crate) const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Twice the output watermark: above half of it the loop takes no more replies from the
/// connection's job (backpressure; one reply larger than that is still written whole).
pub(crate) const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Output held for clients by all connections together (`--output-budget`): unsent output
/// plus the replies workers queued that the loop has not taken. Past it, new runs and
/// re-attachments get 503 `SERVER_BUSY` with `Retry-After` before any stream, and every run
/// whose client is more than `OUTPUT_BEHIND` behind stops reading upstream until the total
/// is back under 7/8 of it. Without it, 30 paused readers of 10 MiB events held 340 MiB
/// (peak 660 MiB).
pub(crate) const OUTPUT_BUDGET: usize = 128 * 1024 * 1024;
/// Past the output budget, a connection with more unsent output than this is behind (below
/// it a client that keeps up is never paused).
pub(crate) const OUTPUT_BEHIND: usize = 64 * 1024;
/// Open client connections; more are answered with 503 and closed.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// Listen backlog (the kernel caps it at `net.core.somaxconn`). mio's default of 1024
/// overflowed under a burst of 1 000 connects and the kernel reset some of them.
pub(crate) const LISTEN_BACKLOG: i32 = 4096;
/// Concurrent worker jobs (runs, cancels); more get a 503 JSON error.
pub(crate) const MAX_JOBS: usize = 2048;
/// Replies a worker may queue for the loop before it blocks (its upstream read stops).
pub(crate) const JOB_QUEUE_CAPACITY: usize = 256;
/// Bytes a worker may queue before it blocks (one reply of any size is always accepted).
pub(crate) const JOB_QUEUE_BYTES: usize = 256 * 1024;
/// Stack size of worker threads. Only touched pages count towards RSS, so this is a ceiling
/// for recursion over bounded-depth JSON (deeper in debug builds), not a per-thread cost. What
/// a worker touches is kept to 3 pages by the call threads and by the `#[inline(never)]` on the
/// driver's deep, rare stages (without those: 4 pages, 27.3 KiB per open stream against 23.3;
/// issue 37, docs/performance.md). What a run needs of it is guarded by `tests/it/tuning.rs`, which
/// runs a flood and a resume on workers of far less (`App::with_worker_stack`).
pub(crate) const WORKER_STACK_BYTES: usize = 1024 * 1024;
/// Frames nested at most this deep are read on the run's worker; deeper ones on a call thread
/// (`a2a/frame.rs`, `FrameReader`): the depth that keeps the worker's resident stack at 3 pages.
pub(crate) const SHALLOW_FRAME_DEPTH: usize = 6;
/// Stack size of the small helper threads (a background `CancelTask`, the tokens file's
/// watcher and reader).
pub(crate) const SMALL_WORKER_STACK_BYTES: usize = 128 * 1024;
/// Deepest JSON nesting accepted from clients and the kernel (serde_json's own limit is 128).
pub(crate) const MAX_JSON_DEPTH: usize = 100;
/// Threads kept in memory; beyond this, idle ones (no run, no other user) are dropped from
/// the cache and reloaded from their file when named again.
pub(crate) const MAX_CACHED_THREADS: usize = 10_000;

// ---- the event loop

/// How long a drain (SIGTERM/SIGINT) lets running runs go on to their natural end
/// (`--shutdown-grace`).
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// After the drain: how long the runs it stopped get to write their terminal event.
pub(crate) const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);
/// Bytes read from a client socket per `read` call.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// Replies taken from one job per pump round, so one busy stream cannot starve the others.
pub(crate) const DRAIN_BATCH: usize = 64;
/// A byte run of a connection's output stops growing here and a new one starts, so output
/// being written slowly is freed a run at a time.
pub(crate) const OUT_RUN_MAX: usize = 64 * 1024;
/// Capacity of the one written run a connection keeps for its next output.
pub(crate) const OUT_SPARE_MAX: usize = 16 * 1024;
/// Events at least this large are not copied into a connection's output: it holds the frame
/// the replay log holds.
pub(crate) const OUT_SHARE_FROM: usize = 16 * 1024;

// ---- the A2A kernel

/// Largest single upstream SSE event.
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// Largest non-streaming upstream JSON body.
pub(crate) const MAX_JSON_BODY: u64 = 32 * 1024 * 1024;
/// Time to connect to the kernel.
pub(crate) const A2A_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Upstream silence after which the kernel counts as unavailable (`--a2a-idle-timeout`; the
/// kernel sends a keep-alive every 15 s).
pub(crate) const A2A_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Upstream read space while events arrive one at a time (a kernel event is a few hundred
/// bytes): what an open, waiting stream holds (`a2a/transport.rs`).
pub(crate) const A2A_READ_SMALL: usize = 512;
/// Upstream read space at the height of a burst (reached by doubling from the small space,
/// one read that fills its space at a time). A read is one burst for the loop: 16 KiB
/// instead of 8 halved the loop's wake-ups at flood (about −0.5 µs per event), 64 KiB
/// instead of 16 a third of them again (about −0.6 µs, docs/performance.md), and since the
/// space shrinks back after the burst an idle stream does not pay it.
pub(crate) const A2A_READ_BIG: usize = 64 * 1024;
/// The HTTP client's write buffer while a request is sent (ureq's default is 128 KiB).
pub(crate) const A2A_OUTPUT_BUFFER: usize = 2 * 1024;
/// Largest response head from the kernel.
pub(crate) const A2A_MAX_RESPONSE_HEAD: usize = 8 * 1024;
/// Largest error body read from the kernel's health endpoint.
pub(crate) const A2A_MAX_HEALTH_BODY: u64 = 64 * 1024;
/// How long a new turn waits (on its worker) for the kernel to confirm that the thread's
/// previous task stopped, before it goes ahead anyway.
pub(crate) const WIND_DOWN_BOUND: Duration = Duration::from_secs(15);
/// How long an admission waits for a run whose client just left to release the thread.
pub(crate) const DEPARTING_RUN_WAIT: Duration = Duration::from_secs(2);
/// How long the cancel route waits for the kernel's `CancelTask` answer before answering
/// `202 {"status":"cancelling"}` (the run's stream has ended already).
pub(crate) const CANCEL_ANSWER_BOUND: Duration = Duration::from_secs(5);
/// Time the managed `iac-code a2a` child has to answer `/health`.
pub(crate) const KERNEL_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the kernel's `/health` is probed (and `/health` of this server updated).
pub(crate) const KERNEL_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// How long one probe waits (connect, and each read): a hung kernel (SIGSTOP, a wedged
/// event loop) accepts connections but never answers, and must not look healthy for the
/// whole `--a2a-idle-timeout`. Down within interval + timeout (8 s), up at the next probe.
pub(crate) const KERNEL_PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// A managed kernel that exited is restarted after 1 s, doubling to 30 s while it fails.
pub(crate) const KERNEL_RESTART_FIRST: Duration = Duration::from_secs(1);
pub(crate) const KERNEL_RESTART_MAX: Duration = Duration::from_secs(30);
/// SIGTERM → SIGKILL grace for the managed child.
pub(crate) const KERNEL_STOP_GRACE: Duration = Duration::from_secs(5);

// ---- message content (reference §2.5)

/// Largest decoded inline image (reference: 8 MiB).
/// AG-UI 1.0 mode: the `context[]` text added to a run's message (the kernel's own cap on a
/// text part is 1 MiB; context is ambient, not a payload). Entries past it are skipped.
pub(crate) const MAX_CONTEXT_BYTES: usize = 64 * 1024;

pub(crate) const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;
/// Largest total of decoded images in one message (reference: 10 MiB).
pub(crate) const MAX_TOTAL_IMAGE_BYTES: usize = 10 * 1024 * 1024;
/// Pillow's decompression-bomb limit, which the reference inherits.
pub(crate) const MAX_IMAGE_PIXELS: u64 = 178_956_970;
/// Bytes up to which an image within `MAX_IMAGE_SIDE` is forwarded unchanged (3.75 MiB).
pub const MAX_FORWARD_BYTES: usize = 3_932_160;
/// Longest side forwarded; larger images are scaled down to fit `MAX_IMAGE_SIDE` squared.
pub const MAX_IMAGE_SIDE: u32 = 2000;
/// The last resort: a `FALLBACK_IMAGE_SIDE` squared JPEG at the lowest quality.
pub(crate) const FALLBACK_IMAGE_SIDE: u32 = 1000;

// ---- state files (reference §7)

/// Largest thread file read.
pub(crate) const MAX_STATE_FILE: u64 = 64 * 1024 * 1024;
/// Newest runIds whose digests a thread keeps; an older runId counts as new again.
pub(crate) const MAX_RUN_DIGESTS: usize = 10_000;
/// Total bytes of runIds a thread keeps (the newest run is always kept).
pub(crate) const MAX_RUN_DIGEST_BYTES: usize = 16 * 1024 * 1024;
/// Retired execution ids a thread keeps (the current execution is never dropped).
pub(crate) const MAX_TERMINAL_IDS: usize = 10_000;
/// Resume digests of earlier executions a thread keeps (the current one's are never dropped).
pub(crate) const MAX_OLD_APPLIED: usize = 10_000;
/// Above this many runs the admission order is written to the file (`runOrder`).
pub(crate) const RUN_ORDER_FROM: usize = 1_000;

// ---- runs that outlive their connection

/// Replay log of one run: bytes and events (the oldest go first).
pub(crate) const REPLAY_RUN_BYTES: usize = 4 * 1024 * 1024;
pub(crate) const REPLAY_RUN_EVENTS: usize = 20_000;
/// Replay logs of all runs together (the oldest runs go first).
pub(crate) const REPLAY_TOTAL_BYTES: usize = 256 * 1024 * 1024;
/// How long an ended run's log is kept.
pub(crate) const REPLAY_RETENTION: Duration = Duration::from_secs(600);
/// How often expired replay logs are dropped (at most; a short retention checks more often).
pub(crate) const REPLAY_EXPIRY_TICK: Duration = Duration::from_secs(10);
/// Subscribers watching one run at once.
pub(crate) const MAX_SUBSCRIBERS_PER_RUN: usize = 8;
/// How long a subscriber waits on its run's log before checking that its client is still there.
pub(crate) const SUBSCRIBER_POLL: Duration = Duration::from_millis(250);

/// When a drain's grace ends, how long a replay subscriber waits for the producer's terminal
/// event to reach the log before it ends its stream with `SERVER_SHUTTING_DOWN` itself.
pub(crate) const SUBSCRIBER_SHUTDOWN_TAIL: Duration = Duration::from_secs(3);
/// `--disconnect-grace` default: a producer's disconnect cancels at once.
pub(crate) const DISCONNECT_GRACE: Duration = Duration::ZERO;
/// `--demo`'s default grace, so the console's reload re-attaches to the run.
#[cfg(feature = "demo")]
pub(crate) const DEMO_DISCONNECT_GRACE: Duration = Duration::from_secs(30);

/// The demo's `big T R` sends at most this many MiB each (an event must stay under
/// `MAX_EVENT_BYTES` once framed and escaped).
#[cfg(feature = "demo")]
pub(crate) const DEMO_BIG_MAX_MIB: u64 = 12;
/// After an answer that closes the connection: how long, and how many more bytes, the client's
/// input is read and dropped before the close (a close with unread input resets the
/// connection, and the reset can destroy the answer before the client reads it).
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(2);
pub(crate) const LINGER_BYTES: usize = 4 * 1024 * 1024;
/// Connections past `--max-connections` that get their 503 with the lingering close above
/// (each holds a slot for at most `LINGER_TIME`); more are answered and closed at once.
pub(crate) const REFUSALS_LINGERING: usize = 64;

/// The largest quota a tokens-file line or an option may give (runs, admissions per minute).
#[cfg(any(feature = "identity", feature = "quotas"))]
pub(crate) const MAX_QUOTA_VALUE: u32 = 1_000_000;
