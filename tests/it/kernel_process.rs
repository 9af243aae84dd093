//! The managed kernel child: started, health-waited, token passed, stopped (no orphans).

use iac_agui::clock::{Clock as _, SystemClock};
use std::path::PathBuf;
use std::time::Duration;

use iac_agui::config::Environ;
use iac_agui::kernel::process::{KernelSpec, ManagedKernel};

fn spec(mode: &str) -> (KernelSpec, PathBuf) {
    // One record file per call: tests of the same mode run at once.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let record = std::env::temp_dir().join(format!(
        "iac-agui-stub-{}-{mode}-{n}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&record);
    let spec = KernelSpec {
        variable: None,
        command: vec![
            "env".into(),
            format!("STUB_MODE={mode}"),
            format!("STUB_RECORD={}", record.display()),
            "python3".into(),
            "tests/support/stub_kernel.py".into(),
        ],
        startup_timeout: Duration::from_secs(10),
        stop_grace: Duration::from_millis(500),
        launcher: None,
    };
    (spec, record)
}

fn alive(pid: u32) -> bool {
    // A reaped child has no /proc entry; a zombie would still show up with state Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.split_whitespace().nth(2).is_none_or(|st| st != "Z"),
        Err(_) => false,
    }
}

fn recorded(record: &PathBuf) -> serde_json::Value {
    for _ in 0..200 {
        if let Ok(s) = std::fs::read_to_string(record) {
            return serde_json::from_str(&s).unwrap();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the stub did not record itself");
}

#[test]
fn starts_waits_for_health_passes_token_and_stops() {
    let (spec, record) = spec("ok");
    let env = Environ::capture().with("IAC_CODE_AGUI_ALLOWED_CWDS", "/tmp:/srv");
    let mut k = ManagedKernel::start(&spec, &env).unwrap();
    let rec = recorded(&record);
    assert_eq!(rec["token"], k.token.as_str());
    assert_eq!(k.token.len(), 43);
    assert_eq!(rec["allowed"], "/tmp:/srv");
    let argv: Vec<String> = serde_json::from_value(rec["argv"].clone()).unwrap();
    assert_eq!(&argv[..3], ["a2a", "--host", "127.0.0.1"]);
    assert_eq!(&argv[5..], ["--thinking-exposure", "all"]);
    assert!(k.base_url.starts_with("http://127.0.0.1:"));
    let pid = rec["pid"].as_u64().unwrap() as u32;
    assert!(alive(pid));
    k.stop();
    assert!(!alive(pid), "the kernel child is still there");
    let _ = std::fs::remove_file(record);
}

#[test]
fn an_existing_kernel_allow_list_is_not_overwritten() {
    let (spec, record) = spec("ok");
    let env = Environ::capture()
        .with("IAC_CODE_AGUI_ALLOWED_CWDS", "/tmp")
        .with("IACCODE_A2A_ALLOWED_CWDS", "/already");
    let k = ManagedKernel::start(&spec, &env).unwrap();
    // The child inherits the real environment; only a missing variable is filled in.
    assert_ne!(recorded(&record)["allowed"], "/tmp");
    drop(k);
    let _ = std::fs::remove_file(record);
}

#[test]
fn a_child_that_exits_during_startup_is_reported() {
    let (spec, record) = spec("exit");
    let err = ManagedKernel::start(&spec, &Environ::capture())
        .err()
        .unwrap();
    // One line, saying that the cause is unknown (the kernel's own lines were relayed).
    assert!(
        err.starts_with("The local A2A process exited during startup (exit code 3). ")
            && err.contains("not one iac-agui recognises")
            && !err.contains('\n'),
        "{err}"
    );
    let _ = std::fs::remove_file(record);
}

/// Issue 38: a kernel that dies at import with an a2a-sdk outside the working range is named
/// as such, with the fix, in one line (from its relayed stderr).
#[test]
fn a_kernel_that_dies_at_import_names_the_a2a_sdk_and_the_fix() {
    let (spec, record) = spec("bad-sdk");
    let err = ManagedKernel::start(&spec, &Environ::capture())
        .err()
        .unwrap();
    assert!(err.contains("(exit code 1)"), "{err}");
    assert!(err.contains("Likely cause: a2a-sdk"), "{err}");
    assert!(
        err.contains("Fix: pip install 'a2a-sdk[http-server,signing]>=1.0.2,<1.2.1'"),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    let _ = std::fs::remove_file(record);
}

#[test]
fn a_child_that_never_gets_ready_is_killed() {
    let (mut spec, record) = spec("never-ready");
    spec.startup_timeout = Duration::from_millis(800);
    let err = ManagedKernel::start(&spec, &Environ::capture())
        .err()
        .unwrap();
    assert_eq!(err, "The local A2A process did not become ready in time.");
    let pid = recorded(&record)["pid"].as_u64().unwrap() as u32;
    std::thread::sleep(Duration::from_millis(100));
    assert!(!alive(pid));
    let _ = std::fs::remove_file(record);
}

#[test]
fn a_child_ignoring_sigterm_is_killed_after_the_grace_period() {
    let (spec, record) = spec("ignore-term");
    let mut k = ManagedKernel::start(&spec, &Environ::capture()).unwrap();
    let pid = recorded(&record)["pid"].as_u64().unwrap() as u32;
    let start = SystemClock.now();
    k.stop();
    assert!(start.elapsed() >= Duration::from_millis(400));
    assert!(!alive(pid));
    let _ = std::fs::remove_file(record);
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let spec = KernelSpec {
        command: vec!["/nonexistent/iac-code".into()],
        variable: None,
        startup_timeout: Duration::from_secs(1),
        stop_grace: Duration::from_millis(100),
        launcher: None,
    };
    let err = ManagedKernel::start(&spec, &Environ::capture())
        .err()
        .unwrap();
    assert!(
        err.starts_with("Cannot start the local A2A process (/nonexistent/iac-code)"),
        "{err}"
    );
}
