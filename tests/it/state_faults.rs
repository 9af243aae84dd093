//! Faults of the state directory (issue 24): readiness includes the store (a read-only or
//! full directory makes `/health` 503 and back), and one writer per state directory even
//! when the directory is deleted under a running adapter.
//!
//! These need root (chattr +i, a tmpfs mount), which this project's machines and CI are;
//! without it a test fails saying so, it is never skipped.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::procs::{Procs, start};
use common::*;

fn health(addr: SocketAddr) -> Resp {
    raw(
        addr,
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".as_slice(),
    )
}

fn run(p: &Procs, thread: &str) -> Resp {
    post_json(p.addr, "/", &[], &p.body(thread, "r1", "hello"))
}

fn sh(cmd: &str) {
    let ok = Command::new("sh").args(["-c", cmd]).status().unwrap();
    assert!(ok.success(), "`{cmd}` failed (these tests need root)");
}

fn wait_health(addr: SocketAddr, status: u16) -> bool {
    wait_until(Duration::from_secs(12), || health(addr).status == status)
}

#[test]
fn a_read_only_state_directory_makes_health_503_and_back() {
    // Regression (red team): /health stayed 200 while every run got 503 STATE_UNAVAILABLE.
    let p = start("state-ro", &[]);
    assert_eq!(run(&p, "t1").status, 200);
    let threads = p.dir.join("state/threads");
    // Immutable: not even root can create a file in it (a read-only mount, in effect).
    sh(&format!("chattr +i '{}'", threads.display()));
    let down = wait_health(p.addr, 503);
    let body = health(p.addr).json();
    sh(&format!("chattr -i '{}'", threads.display()));
    assert!(down, "/health stayed 200 with a read-only state directory");
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["reason"], "state");
    assert!(wait_health(p.addr, 200), "/health did not come back");
    assert_eq!(run(&p, "t2").status, 200);
}

#[test]
fn a_full_state_directory_makes_health_503_and_back() {
    let dir = tempdir("state-full");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    sh(&format!(
        "mount -t tmpfs -o size=256k tmpfs '{}'",
        state.display()
    ));
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(state.clone());
    let port = common::procs::free_port();
    let kernel = common::procs::kernel(port);
    let (adapter, addr) = common::procs::adapter(&dir, port, &[]);
    let p = Procs {
        kernel,
        kernel_port: port,
        adapter,
        addr,
        dir: dir.clone(),
    };
    assert_eq!(run(&p, "t1").status, 200);
    let filler = state.join("filler");
    // Fill the disk: dd stops at ENOSPC (and says so); what matters is that it is full.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", &format!("of={}", filler.display()), "bs=4k"])
        .stderr(std::process::Stdio::null())
        .status();
    let down = wait_health(p.addr, 503);
    let refused = run(&p, "t2");
    std::fs::remove_file(&filler).unwrap();
    assert!(down, "/health stayed 200 with a full state directory");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.error_code(), "STATE_UNAVAILABLE");
    assert!(wait_health(p.addr, 200), "/health did not come back");
    assert_eq!(run(&p, "t3").status, 200);
}

#[test]
fn a_deleted_state_directory_is_made_again_and_locked_before_the_next_write() {
    // Regression (red team): the adapter recreated threads/ without .lock, and a second
    // adapter then started on the same directory; both wrote the same thread file.
    let p = start("state-deleted", &[]);
    assert_eq!(run(&p, "t1").status, 200);
    std::fs::remove_dir_all(p.dir.join("state")).unwrap();
    assert_eq!(run(&p, "t2").status, 200);
    assert!(p.dir.join("state/.lock").is_file());
    let second = Command::new(env!("CARGO_BIN_EXE_iac-agui"))
        .args(["--port", "0", "--a2a-url"])
        .arg(format!("http://127.0.0.1:{}/", p.kernel_port))
        .env("IAC_CODE_AGUI_A2A_TOKEN", "k")
        .env("IAC_CODE_AGUI_STATE_DIR", p.dir.join("state"))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another iac-agui process"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
}

#[test]
fn an_adapter_whose_directory_another_adapter_locked_writes_nothing() {
    let p = start("state-taken", &[]);
    assert_eq!(run(&p, "t1").status, 200);
    std::fs::remove_dir_all(p.dir.join("state")).unwrap();
    // A second adapter takes the (new) directory before the first writes again.
    let (b, b_addr) = common::procs::adapter(&p.dir, p.kernel_port, &[]);
    let _b = common::procs::Stopper(b);
    let refused = run(&p, "t2");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.error_code(), "STATE_UNAVAILABLE");
    assert!(
        !p.dir.join("state/threads/t2.json").exists(),
        "the first adapter wrote into the second's directory"
    );
    assert!(wait_health(p.addr, 503));
    assert_eq!(health(p.addr).json()["reason"], "state");
    let ok = post_json(b_addr, "/", &[], &p.body("t3", "r1", "hello"));
    assert_eq!(ok.status, 200);
    assert!(p.dir.join("state/threads/t3.json").is_file());
}
