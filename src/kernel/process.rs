//! The managed kernel (reference §8.4): `iac-code a2a --host 127.0.0.1 --port <free port>
//! --thinking-exposure all` with a random bearer token, waited for on `/health`, and stopped
//! with SIGTERM, then SIGKILL after a grace period, on every exit path (including when
//! iac-agui itself gets SIGTERM, where the reference leaves an orphan).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::a2a::client::{A2aClient, A2aConfig};
use crate::clock::{Clock, SystemClock};
use crate::config::Environ;
use crate::ids;

/// How to start and wait for the kernel.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    /// Program and leading arguments (env `IAC_CODE_AGUI_KERNEL_CMD`, default `iac-code`).
    pub command: Vec<String>,
    /// `IAC_CODE_AGUI_KERNEL_CMD` as set, when `command` came from it (to say so when its
    /// program is not there).
    pub variable: Option<String>,
    pub startup_timeout: Duration,
    pub stop_grace: Duration,
    /// This binary, to launch the child through `__kernel-child` (a parent-death signal, so
    /// even SIGKILL of iac-agui cannot orphan the kernel); `None` starts it directly.
    pub launcher: Option<std::path::PathBuf>,
}

impl KernelSpec {
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> KernelSpec {
        let variable = get("IAC_CODE_AGUI_KERNEL_CMD").filter(|s| !s.trim().is_empty());
        let command = match &variable {
            Some(cmd) => cmd.split_whitespace().map(str::to_string).collect(),
            None => vec![default_kernel_program()],
        };
        KernelSpec {
            command,
            variable,
            startup_timeout: crate::limits::KERNEL_STARTUP_TIMEOUT,
            stop_grace: crate::limits::KERNEL_STOP_GRACE,
            launcher: std::env::current_exe().ok(),
        }
    }
}

/// `iac-code` beside this executable when there is one (the wheel installs both into one
/// environment's `bin/`, which need not be on `PATH`), else `iac-code` from `PATH`.
fn default_kernel_program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("iac-code")))
        .filter(|p| p.is_file())
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| "iac-code".into())
}

/// The kernel's last stderr lines, kept to explain a start-up that failed.
type Tail = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// Lines of the kernel's stderr kept, and the longest kept whole.
const TAIL_LINES: usize = 30;
const TAIL_LINE_MAX: usize = 1024;

/// A running kernel child. Dropping it stops the child.
pub struct ManagedKernel {
    /// The kernel program (for messages; the command may be the launcher).
    program: String,
    child: Option<Child>,
    pub base_url: String,
    pub token: String,
    stop_grace: Duration,
    /// How to start it again (same port and token, so the client needs no change).
    command: Command,
    startup_timeout: Duration,
    /// The child's last stderr lines (it is always piped, and relayed).
    tail: Tail,
    /// Set by the stderr relay when the pipe closed (the child's last words are in `tail`).
    stderr_done: Option<std::sync::mpsc::Receiver<()>>,
    /// `PATH` of the configuration (to find the kernel's Python when it fails).
    path_env: Option<std::ffi::OsString>,
}

impl ManagedKernel {
    /// Start the kernel and wait until its `/health` answers 200.
    /// `env` is the environment the child inherits settings from (allowed roots, `PATH`).
    pub fn start(spec: &KernelSpec, env: &Environ) -> Result<ManagedKernel, String> {
        let Some((program, lead)) = spec.command.split_first() else {
            return Err("The kernel command is empty.".into());
        };
        let port = free_port()
            .map_err(|e| format!("Cannot pick a port for the local A2A process: {e}"))?;
        let token = ids::token_urlsafe()
            .map_err(|e| format!("Cannot make a token for the local A2A process: {e}."))?;
        // A missing program is reported here: through the launcher it would only be an exit
        // code.
        if find_program(program, env.get_os("PATH")).is_none() {
            let exe = std::env::current_exe().ok();
            let path = env.get_os("PATH");
            return Err(super::diagnose::not_found(
                program,
                &super::diagnose::Search {
                    variable: spec.variable.as_deref(),
                    beside: exe.as_deref().and_then(std::path::Path::parent),
                    path: path.as_deref(),
                },
            ));
        }
        let mut cmd = match &spec.launcher {
            Some(me) => {
                let mut c = Command::new(me);
                c.arg(crate::signals::KERNEL_CHILD_ARG)
                    .arg(std::process::id().to_string())
                    .arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.args(lead)
            .args([
                "a2a",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--thinking-exposure",
                "all",
            ])
            .env("IACCODE_A2A_HTTP_TOKEN", &token)
            .stdin(Stdio::null());
        crate::malloc::restore_for_child(&mut cmd, |k| env.get_os(k));
        // With JSON logs every line on stderr must be a JSON object: the child's output is
        // relayed line by line as records of ours instead of being inherited.
        let relay = crate::logging::format() == crate::logging::LogFormat::Json;
        if relay {
            cmd.stdout(Stdio::piped());
        }
        // Always relayed (unchanged in text mode), so that a failed start-up can quote it.
        cmd.stderr(Stdio::piped());
        if let Some(allowed) = env
            .get("IAC_CODE_AGUI_ALLOWED_CWDS")
            .filter(|s| !s.is_empty())
            && env
                .get("IACCODE_A2A_ALLOWED_CWDS")
                .is_none_or(|s| s.is_empty())
        {
            cmd.env("IACCODE_A2A_ALLOWED_CWDS", allowed);
        }
        let mut kernel = ManagedKernel {
            program: program.clone(),
            child: None,
            base_url: format!("http://127.0.0.1:{port}/"),
            token,
            stop_grace: spec.stop_grace,
            command: cmd,
            startup_timeout: spec.startup_timeout,
            tail: Tail::default(),
            stderr_done: None,
            path_env: env.get_os("PATH"),
        };
        kernel.spawn()?;
        Ok(kernel)
    }

    /// Start the child (again) and wait until it is ready.
    fn spawn(&mut self) -> Result<(), String> {
        let program = self.program.clone();
        let mut child = self
            .command
            .spawn()
            .map_err(|e| format!("Cannot start the local A2A process ({program}): {e}"))?;
        if let Some(out) = child.stdout.take() {
            relay_lines("stdout", out, None);
        }
        if let Some(err) = child.stderr.take() {
            lock(&self.tail).clear();
            self.stderr_done = relay_lines("stderr", err, Some(self.tail.clone()));
        }
        self.child = Some(child);
        self.wait_ready(self.startup_timeout)
    }

    /// The child's exit status if it has exited (it is then forgotten).
    pub(crate) fn exited(&mut self) -> Option<String> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(
            status
                .code()
                .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string()),
        )
    }

    /// Whether a child is running.
    pub(crate) fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Start a child that exited, on the same port with the same token.
    pub(crate) fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.spawn()
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let mut cfg = A2aConfig::new(self.base_url.clone(), Some(self.token.clone()));
        cfg.connect_timeout = Duration::from_millis(500);
        cfg.idle_timeout = Duration::from_millis(500);
        let client = A2aClient::new(cfg);
        let deadline = SystemClock.now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let code = status
                    .code()
                    .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string());
                return Err(self.startup_failure(&code));
            }
            if crate::signals::stop_requested() {
                self.stop();
                return Err("Stopped by a signal while the local A2A process started.".into());
            }
            if client.session().health() == Ok(200) {
                return Ok(());
            }
            if SystemClock.now() >= deadline {
                self.stop();
                return Err("The local A2A process did not become ready in time.".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Why the child exited during start-up, in one line (after its own last lines).
    fn startup_failure(&mut self, code: &str) -> String {
        // The pipe closes with the child: wait (bounded) until its last lines are read.
        if let Some(done) = self.stderr_done.take() {
            let _ = done.recv_timeout(Duration::from_secs(2));
        }
        let tail: Vec<String> = lock(&self.tail).iter().cloned().collect();
        let installed = sdk_version(&self.program, self.path_env.clone());
        let cause = super::diagnose::diagnose(&tail.join("\n"), installed.as_deref());
        // One line: the kernel's own lines were relayed just above it.
        format!(
            "The local A2A process exited during startup (exit code {code}). {}",
            cause.advice()
        )
    }

    /// SIGTERM, wait up to the grace period, then SIGKILL and reap.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = SystemClock.now() + self.stop_grace;
        while SystemClock.now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        log::warn!("the local A2A process ignored SIGTERM; killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ManagedKernel {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `program` as the OS would find it: a path that is a file, or a name in `$PATH`.
fn find_program(program: &str, path: Option<std::ffi::OsString>) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    let path = path?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Longest kernel output line relayed whole; the rest of a longer line is dropped (marked).
const RELAY_LINE_MAX: usize = 16 * 1024;

/// The a2a-sdk version in the kernel's Python: the interpreter of `program`'s `#!` line asked
/// through `importlib.metadata` (bounded in time). `None`: not found out (another launcher,
/// no Python); `Some("")`: a2a-sdk is not installed there.
fn sdk_version(program: &str, path_env: Option<std::ffi::OsString>) -> Option<String> {
    use std::io::Read;
    let path = find_program(program, path_env)?;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(&path).ok()?.read(&mut head).ok()?;
    let first = std::str::from_utf8(&head[..n]).ok()?.lines().next()?;
    let python = first
        .strip_prefix("#!")?
        .split_whitespace()
        .next()?
        .to_string();
    let mut child = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m\ntry: print(m.version('a2a-sdk'))\nexcept m.PackageNotFoundError: print('')",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = SystemClock.now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => break,
            Ok(None) if SystemClock.now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out.trim().to_string())
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    crate::sync::lock(m)
}

/// Relay a pipe of the child line by line until it closes (the child exited); with `tail`,
/// keep its last lines there. The receiver hears when the pipe closed.
fn relay_lines(
    stream: &'static str,
    pipe: impl std::io::Read + Send + 'static,
    tail: Option<Tail>,
) -> Option<std::sync::mpsc::Receiver<()>> {
    let (done, closed) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("iac-agui-kernel-{stream}"))
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut r = std::io::BufReader::with_capacity(4096, pipe);
            let mut line = Vec::with_capacity(256);
            loop {
                line.clear();
                match read_line_bounded(&mut r, &mut line, RELAY_LINE_MAX) {
                    Ok(None) | Err(_) => break,
                    Ok(Some(cut)) => {
                        let mut text = String::from_utf8_lossy(&line).into_owned();
                        if cut {
                            text.push_str(" […]");
                        }
                        let text = text.trim_end_matches('\r');
                        crate::logging::kernel_line(stream, text);
                        if let Some(t) = &tail {
                            let mut t = lock(t);
                            if t.len() == TAIL_LINES {
                                t.pop_front();
                            }
                            let mut end = text.len().min(TAIL_LINE_MAX);
                            while !text.is_char_boundary(end) {
                                end -= 1;
                            }
                            t.push_back(crate::logging::escape(&text[..end]).into_owned());
                        }
                    }
                }
            }
            let _ = done.send(());
        });
    match spawned {
        Ok(_) => Some(closed),
        Err(e) => {
            log::warn!("cannot relay the local A2A process's {stream}: {e}");
            None
        }
    }
}

/// One line without its `\n` into `out`, at most `max` bytes kept (the rest is read and
/// dropped). `None` at the end of the stream; `Some(true)` when the line was cut.
fn read_line_bounded(
    r: &mut impl std::io::BufRead,
    out: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    let mut cut = false;
    let mut any = false;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        let room = max.saturating_sub(out.len());
        if take > room {
            cut = true;
        }
        out.extend_from_slice(&buf[..take.min(room)]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Some(cut));
        }
    }
}

fn free_port() -> std::io::Result<u16> {
    // The reference's approach, with the same small race: bind, read, release.
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relayed_lines_are_bounded_and_split_on_newlines() {
        let data = format!("one\r\n{}\nlast", "x".repeat(100));
        let mut r = std::io::BufReader::with_capacity(7, data.as_bytes());
        let mut line = Vec::new();
        let mut got = Vec::new();
        while let Some(cut) = read_line_bounded(&mut r, &mut line, 10).unwrap() {
            got.push((String::from_utf8(line.clone()).unwrap(), cut));
            line.clear();
        }
        assert_eq!(
            got,
            [
                ("one\r".to_string(), false),
                ("x".repeat(10), true),
                ("last".to_string(), false)
            ]
        );
    }
}
