//! systemd readiness (`Type=notify`): `READY=1` once the listener is bound and the kernel
//! answered, `STOPPING=1` when a stop signal begins a drain. A datagram to `$NOTIFY_SOCKET` (a path, or
//! `@name` in the abstract namespace); nothing at all when the variable is unset, as outside
//! systemd. Failures are logged, never fatal: the service manager's timeout reports them.

use std::os::unix::net::UnixDatagram;

/// The socket named at start-up (read once, with the rest of the environment).
static SOCKET: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Remember `$NOTIFY_SOCKET` (from the configuration's environment read).
pub(crate) fn init(socket: Option<String>) {
    let _ = SOCKET.set(socket.filter(|s| !s.is_empty()));
}

pub(crate) fn ready() {
    send("READY=1\nSTATUS=listening");
}

pub(crate) fn stopping() {
    send("STOPPING=1\nSTATUS=draining");
}

fn send(state: &str) {
    let Some(Some(path)) = SOCKET.get() else {
        return;
    };
    if let Err(e) = send_to(path, state.as_bytes()) {
        log::warn!("cannot notify the service manager on {path}: {e}");
    }
}

fn send_to(path: &str, msg: &[u8]) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        sock.send_to_addr(msg, &addr)?;
    } else {
        sock.send_to(msg, path)?;
    }
    Ok(())
}
