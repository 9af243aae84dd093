//! The build docs/operations.md recommends for production (`--no-default-features`: no demo
//! kernel). The other suites that need no demo kernel run in this build too (`.ci/run`).

use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_iac-agui")
}

#[test]
fn a_build_without_the_demo_refuses_demo_and_says_why() {
    for args in [&["--demo", "--port", "0"][..], &["--demo-kernel-only", "0"]] {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("without the `demo` feature"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_build_without_the_demo_still_serves_help_and_version() {
    let out = Command::new(bin()).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iac-agui "));
    let out = Command::new(bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--a2a-url"));
}
