//! The managed kernel (reference §8.4): `iac-code a2a --host 127.0.0.1 --port <free port>
//! --thinking-exposure all` with a random bearer token, waited for on `/health`, and stopped
//! with SIGTERM, then SIGKILL after a grace period, on every exit path (including when
//! iac-agui itself gets SIGTERM, where the reference leaves an orphan).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::a2a::client::{A2aClient, A2aConfig};
use crate::ids;

/// How to start and wait for the kernel.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    /// Program and leading arguments (env `IAC_CODE_AGUI_KERNEL_CMD`, default `iac-code`).
    pub command: Vec<String>,
    pub startup_timeout: Duration,
    pub stop_grace: Duration,
}

impl KernelSpec {
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> KernelSpec {
        let cmd = get("IAC_CODE_AGUI_KERNEL_CMD")
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "iac-code".into());
        KernelSpec {
            command: cmd.split_whitespace().map(str::to_string).collect(),
            startup_timeout: crate::limits::KERNEL_STARTUP_TIMEOUT,
            stop_grace: crate::limits::KERNEL_STOP_GRACE,
        }
    }
}

/// A running kernel child. Dropping it stops the child.
pub struct ManagedKernel {
    child: Option<Child>,
    pub base_url: String,
    pub token: String,
    stop_grace: Duration,
    /// How to start it again (same port and token, so the client needs no change).
    command: Command,
    startup_timeout: Duration,
}

impl ManagedKernel {
    /// Start the kernel and wait until its `/health` answers 200.
    pub fn start(
        spec: &KernelSpec,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ManagedKernel, String> {
        let Some((program, lead)) = spec.command.split_first() else {
            return Err("The kernel command is empty.".into());
        };
        let port = free_port()
            .map_err(|e| format!("Cannot pick a port for the local A2A process: {e}"))?;
        let token = ids::token_urlsafe()
            .map_err(|e| format!("Cannot make a token for the local A2A process: {e}."))?;
        let mut cmd = Command::new(program);
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
        if let Some(allowed) = env("IAC_CODE_AGUI_ALLOWED_CWDS").filter(|s| !s.is_empty())
            && env("IACCODE_A2A_ALLOWED_CWDS").is_none_or(|s| s.is_empty())
        {
            cmd.env("IACCODE_A2A_ALLOWED_CWDS", allowed);
        }
        let mut kernel = ManagedKernel {
            child: None,
            base_url: format!("http://127.0.0.1:{port}/"),
            token,
            stop_grace: spec.stop_grace,
            command: cmd,
            startup_timeout: spec.startup_timeout,
        };
        kernel.spawn()?;
        Ok(kernel)
    }

    /// Start the child (again) and wait until it is ready.
    fn spawn(&mut self) -> Result<(), String> {
        let program = self.command.get_program().to_string_lossy().into_owned();
        let child = self
            .command
            .spawn()
            .map_err(|e| format!("Cannot start the local A2A process ({program}): {e}"))?;
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
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let code = status
                    .code()
                    .map_or_else(|| "killed by a signal".to_string(), |c| c.to_string());
                return Err(format!(
                    "The local A2A process exited during startup (exit code {code})."
                ));
            }
            if client.session().health() == Ok(200) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err("The local A2A process did not become ready in time.".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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
        let deadline = Instant::now() + self.stop_grace;
        while Instant::now() < deadline {
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

fn free_port() -> std::io::Result<u16> {
    // The reference's approach, with the same small race: bind, read, release.
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
