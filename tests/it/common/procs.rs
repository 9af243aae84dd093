//! The demo kernel and the adapter as separate processes (memory, signals, restarts).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{tempdir, wait_until};

pub struct Procs {
    pub kernel: Child,
    pub kernel_port: u16,
    pub adapter: Child,
    pub addr: SocketAddr,
    pub dir: PathBuf,
}

impl Drop for Procs {
    fn drop(&mut self) {
        let _ = self.adapter.kill();
        let _ = self.kernel.kill();
        let _ = self.adapter.wait();
        let _ = self.kernel.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start a demo kernel (token `k`) and an adapter in front of it with `extra` arguments.
pub fn start(name: &str, extra: &[&str]) -> Procs {
    start_with_env(name, extra, &[])
}

/// `start`, with `env` added to the adapter's environment.
pub fn start_with_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Procs {
    start_keeping(name, extra, env, None)
}

/// `start_with_env`, with the adapter's log kept.
pub fn start_logged(name: &str, extra: &[&str], env: &[(&str, &str)]) -> (Procs, Log) {
    let log = Log::default();
    (start_keeping(name, extra, env, Some(&log)), log)
}

fn start_keeping(name: &str, extra: &[&str], env: &[(&str, &str)], log: Option<&Log>) -> Procs {
    start_through(name, extra, env, log, |port| port)
}

/// `start_logged`, the adapter calling the kernel at the port `front` gives for the kernel's
/// (a recording proxy in between, say).
pub fn start_through(
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    log: Option<&Log>,
    front: impl FnOnce(u16) -> u16,
) -> Procs {
    let dir = tempdir(name);
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let port = free_port();
    let kernel = kernel(port);
    let (adapter, addr) = spawn_adapter(&dir, front(port), extra, env, log);
    Procs {
        kernel,
        kernel_port: port,
        adapter,
        addr,
        dir,
    }
}

/// A demo kernel process (token `k`) on `port`, once it accepts connections.
pub fn kernel(port: u16) -> Child {
    let k = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args(["--demo-kernel-only", &port.to_string()])
        .env("IACCODE_A2A_HTTP_TOKEN", "k")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    }));
    k
}

/// An adapter process over `dir`'s state, in front of the kernel on `port`.
pub fn adapter(dir: &std::path::Path, port: u16, extra: &[&str]) -> (Child, SocketAddr) {
    adapter_with_env(dir, port, extra, &[])
}

/// `adapter`, with `env` added to its environment.
pub fn adapter_with_env(
    dir: &std::path::Path,
    port: u16,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Child, SocketAddr) {
    spawn_adapter(dir, port, extra, env, None)
}

fn spawn_adapter(
    dir: &std::path::Path,
    port: u16,
    extra: &[&str],
    env: &[(&str, &str)],
    log: Option<&Log>,
) -> (Child, SocketAddr) {
    let mut adapter = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args([
            "--port",
            "0",
            "--a2a-url",
            &format!("http://127.0.0.1:{port}/"),
        ])
        .args(extra)
        .env("IAC_CODE_AGUI_A2A_TOKEN", "k")
        .env("IAC_CODE_AGUI_STATE_DIR", dir.join("state"))
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", dir)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = ready_addr_logged(&mut adapter, log);
    (adapter, addr)
}

/// The address of the adapter's ready line in either log format: text
/// `iac-agui VERSION listening on http://ADDR`, or the JSON record with the fixed message
/// `listening` and the URL as its `url` field. A managed kernel's own lines never match.
pub fn ready_line_addr(line: &str) -> Option<SocketAddr> {
    let url = if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        if v["msg"] != "listening" || v["target"] != "iac_agui" {
            return None;
        }
        v["url"].as_str()?.to_string()
    } else {
        if !line.starts_with("iac-agui ") || line.contains("kernel") {
            return None;
        }
        format!("http://{}", line.split("listening on http://").nth(1)?)
    };
    url.strip_prefix("http://")?.trim().parse().ok()
}

/// Every stderr line of a process, as it comes.
pub type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Wait for an adapter's "listening on http://ADDR" line (its stderr must be piped); the
/// rest of its stderr is drained in the background.
pub fn ready_addr(adapter: &mut Child) -> SocketAddr {
    ready_addr_logged(adapter, None)
}

/// `ready_addr`, keeping every line (the ready line and those before it too) in `log`.
pub fn ready_addr_logged(adapter: &mut Child, log: Option<&Log>) -> SocketAddr {
    let mut lines = BufReader::new(adapter.stderr.take().unwrap()).lines();
    let sink = log.cloned();
    let keep = move |l: String| {
        if let Some(s) = &sink {
            s.lock().unwrap().push(l);
        }
    };
    let addr = loop {
        let l = lines.next().expect("ready line").unwrap();
        // A managed kernel shares the adapter's stderr: only the adapter's own line counts.
        let addr = ready_line_addr(&l);
        keep(l);
        if let Some(addr) = addr {
            break addr;
        }
    };
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(keep));
    addr
}

/// Stops a process when the test ends, even by a panic: TERM (drain), INT (stop at once).
pub struct Stopper(pub Child);

impl Stopper {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            for sig in ["-TERM", "-INT"] {
                let _ = Command::new("kill")
                    .args([sig, &self.0.id().to_string()])
                    .status();
            }
            let _ = self.0.wait();
        }
    }
}

impl Procs {
    /// A run body for thread `thread` with the workspace of this pair.
    pub fn body(&self, thread: &str, run: &str, text: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": run, "role": "user", "content": text}],
            "forwardedProps": {"iacCode": {"schemaVersion": 1, "rosInvocationId": "r", "cwd": self.dir.join("ws")}}}))
        .unwrap()
    }

    /// The kernel's state of a task (`GetTask` straight to the kernel).
    pub fn task_state(&self, task: &str) -> String {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": "t", "method": "GetTask", "params": {"id": task}});
        let r = super::post_json(
            ([127, 0, 0, 1], self.kernel_port).into(),
            "/",
            &[("A2A-Version", "1.0"), ("Authorization", "Bearer k")],
            &serde_json::to_vec(&body).unwrap(),
        );
        r.json()["result"]["status"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Send a signal to the adapter.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.adapter.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}
