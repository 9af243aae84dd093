//! Why a managed kernel exited during start-up, from its last stderr lines and the a2a-sdk
//! version installed beside it: one line naming the likely cause and its fix. Pure. When
//! nothing matches it says so (the kernel's own lines are relayed just before it).

/// The a2a-sdk releases iac-code 0.16.0 starts with: tried one by one on the registry
/// (`docs/operations.md`): 1.0.2 (its own lower bound) to 1.2.0 start; 1.2.1 and later
/// no longer have `encode_page_token`, which its A2A server imports.
pub const SDK_WORKS_FROM: (u64, u64, u64) = (1, 0, 2);
pub const SDK_WORKS_UNTIL: (u64, u64, u64) = (1, 2, 1);
/// What to install, as pip takes it.
pub const SDK_REQUIREMENT: &str = "a2a-sdk[http-server,signing]>=1.0.2,<1.2.1";

/// The a2a-sdk range iac-code 0.16.0 starts with, as people read it.
fn sdk_range() -> String {
    let ((a, b, c), (x, y, z)) = (SDK_WORKS_FROM, SDK_WORKS_UNTIL);
    format!("a2a-sdk>={a}.{b}.{c},<{x}.{y}.{z}")
}

/// Where the kernel program was looked for, for the message when it is not there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Search<'a> {
    /// `IAC_CODE_AGUI_KERNEL_CMD` as set, when the command came from it.
    pub variable: Option<&'a str>,
    /// The directory of iac-agui's own executable (where the wheel puts `iac-code`).
    pub beside: Option<&'a std::path::Path>,
    /// `PATH` of the configuration.
    pub path: Option<&'a std::ffi::OsStr>,
}

/// The one line for a kernel program that is not there: what was looked for and where,
/// then each way out (install it, a running kernel, the demo). "Entity not found" alone
/// told a new user neither.
pub fn not_found(program: &str, search: &Search<'_>) -> String {
    let path = match search.path {
        Some(p) if !p.is_empty() => format!("PATH={}", p.to_string_lossy()),
        Some(_) => "PATH is empty".to_string(),
        None => "PATH is not set".to_string(),
    };
    let looked = if program.contains('/') {
        format!("{program} is not a file")
    } else {
        format!("{program} is not on PATH ({path})")
    };
    let install = format!(
        "install iac-code with the iac-agui wheel's [kernel] extra (pip install \
         \"iac_agui-<version>-<platform>.whl[kernel]\", which brings iac-code[a2a]==0.16.0 with \
         {}) or with pip install 'iac-code[a2a]==0.16.0' '{SDK_REQUIREMENT}'",
        sdk_range()
    );
    let elsewhere = "or use a kernel that is already running with --a2a-url \
         http://127.0.0.1:PORT/; or try iac-agui with its built-in demo kernel: --demo";
    match search.variable {
        Some(value) => format!(
            "Cannot start the local A2A process ({program}): IAC_CODE_AGUI_KERNEL_CMD is \
             {value:?} and {looked}. Fix: correct IAC_CODE_AGUI_KERNEL_CMD (a program and its \
             leading arguments; iac-agui adds `a2a --host … --port …`), or unset it and \
             iac-agui starts the iac-code beside it or on PATH: {install}; {elsewhere}."
        ),
        None => {
            let beside = search.beside.map_or_else(
                || "beside iac-agui (its directory unknown)".to_string(),
                |d| format!("beside iac-agui (in {})", d.display()),
            );
            format!(
                "Cannot start the local A2A process ({program}): no iac-code kernel found: not \
                 {beside}, and {looked}. Fix: {install}; or set IAC_CODE_AGUI_KERNEL_CMD to the \
                 kernel's command; {elsewhere}."
            )
        }
    }
}

/// The likely cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// iac-code without its `[a2a]` extra (no a2a-sdk at all).
    MissingExtra,
    /// An a2a-sdk outside the range iac-code 0.16.0 starts with (its version, when known).
    SdkVersion(Option<String>),
    /// The port was taken between picking it and the kernel binding it.
    PortInUse,
    /// The kernel could not write its own state (its config directory).
    StateDir,
    Unknown,
}

impl Cause {
    /// The one line for the operator.
    pub fn advice(&self) -> String {
        match self {
            Cause::MissingExtra => format!(
                "Likely cause: iac-code is installed without its [a2a] extra. Fix: pip install \
                 'iac-code[a2a]==0.16.0' '{SDK_REQUIREMENT}' (or install the iac-agui wheel with \
                 its [kernel] extra) in the kernel's environment."
            ),
            Cause::SdkVersion(v) => format!(
                "Likely cause: a2a-sdk {} is installed, but iac-code 0.16.0 starts only with \
                 a2a-sdk >=1.0.2,<1.2.1. Fix: pip install '{SDK_REQUIREMENT}' (or install the \
                 iac-agui wheel with its [kernel] extra) in the kernel's environment.",
                v.as_deref().unwrap_or("of another version")
            ),
            Cause::PortInUse => "Likely cause: its port was taken by another process in the \
                 meantime. Fix: start iac-agui again (a new port is picked)."
                .into(),
            Cause::StateDir => "Likely cause: it cannot write its state or config directory \
                 (IAC_CODE_CONFIG_DIR, default ~/.iac-code): permissions or a full disk. Fix: make \
                 that directory writable for this user."
                .into(),
            Cause::Unknown => "The cause is not one iac-agui recognises; see the kernel's own \
                 last lines above."
                .into(),
        }
    }
}

fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    let major = it.next()?.parse().ok()?;
    let minor = it.next().map_or(Some(0), |s| s.parse().ok())?;
    let patch = it.next().map_or(Some(0), |s| s.parse().ok())?;
    Some((major, minor, patch))
}

/// Whether `version` is one iac-code 0.16.0 starts with.
pub fn sdk_works(version: &str) -> bool {
    parse_version(version).is_some_and(|v| (SDK_WORKS_FROM..SDK_WORKS_UNTIL).contains(&v))
}

/// `tail`: the kernel's last stderr lines; `installed`: the a2a-sdk version read from its
/// Python (`Some("")`: not installed; `None`: not found out).
pub fn diagnose(tail: &str, installed: Option<&str>) -> Cause {
    let has = |s: &str| tail.contains(s);
    let lower = tail.to_ascii_lowercase();
    if installed == Some("")
        || has("No module named 'a2a'")
        || has("No module named \"a2a\"")
        || (lower.contains("iac-code[a2a]") && lower.contains("install"))
    {
        return Cause::MissingExtra;
    }
    if let Some(v) = installed.filter(|v| !v.is_empty() && !sdk_works(v)) {
        return Cause::SdkVersion(Some(v.to_string()));
    }
    let import_error = tail.lines().any(|l| {
        let l = l.trim_start();
        (l.starts_with("ImportError:") || l.starts_with("ModuleNotFoundError:"))
            && (l.contains(" 'a2a") || l.contains("from 'a2a") || l.contains("a2a."))
    });
    if import_error {
        return Cause::SdkVersion(installed.map(str::to_string));
    }
    if lower.contains("address already in use") || has("Errno 98") {
        return Cause::PortInUse;
    }
    if lower.contains("permission denied")
        || lower.contains("read-only file system")
        || lower.contains("no space left on device")
    {
        return Cause::StateDir;
    }
    Cause::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    const SDK_130: &str = include_str!("../../tests/fixtures/kernel/a2a-sdk-1.3.0.stderr");
    const NO_EXTRA: &str =
        include_str!("../../tests/fixtures/kernel/iac-code-without-a2a-extra.stderr");

    #[test]
    fn the_captured_missing_extra_failure_names_the_extra_and_the_working_sdk() {
        for installed in [Some(""), None] {
            assert_eq!(diagnose(NO_EXTRA, installed), Cause::MissingExtra);
        }
        let line = Cause::MissingExtra.advice();
        assert!(line.contains("iac-code[a2a]==0.16.0") && line.contains(SDK_REQUIREMENT));
    }

    #[test]
    fn the_captured_a2a_sdk_1_3_failure_is_a_version_problem() {
        assert_eq!(
            diagnose(SDK_130, Some("1.3.0")),
            Cause::SdkVersion(Some("1.3.0".into()))
        );
        // Without the version, the ImportError alone tells it.
        assert_eq!(diagnose(SDK_130, None), Cause::SdkVersion(None));
        let line = diagnose(SDK_130, Some("1.3.0")).advice();
        assert!(
            line.contains("a2a-sdk 1.3.0") && line.contains(SDK_REQUIREMENT),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn the_wheels_kernel_extra_asks_for_the_same_range() {
        let wheel = include_str!("../../packaging/wheel.py");
        let sdk = SDK_REQUIREMENT;
        assert!(
            wheel.contains(&format!("\"{sdk}\"")),
            "packaging/wheel.py: {sdk}"
        );
    }

    #[test]
    fn a_kernel_not_found_names_where_it_was_looked_for_and_each_fix() {
        let dir = std::path::Path::new("/opt/agui/bin");
        let path = std::ffi::OsStr::new("/usr/bin:/bin");
        let default = not_found(
            "iac-code",
            &Search {
                variable: None,
                beside: Some(dir),
                path: Some(path),
            },
        );
        let typo = not_found(
            "iac-cod",
            &Search {
                variable: Some("iac-cod --verbose"),
                beside: Some(dir),
                path: Some(path),
            },
        );
        for line in [&default, &typo] {
            assert!(!line.contains('\n') && !line.contains("entity not found"));
            for fix in ["[kernel]", "a2a-sdk>=1.0.2,<1.2.1", "--a2a-url", "--demo"] {
                assert!(line.contains(fix), "{fix}: {line}");
            }
            assert!(line.contains("PATH=/usr/bin:/bin"), "{line}");
        }
        assert!(
            default.contains("beside iac-agui (in /opt/agui/bin)"),
            "{default}"
        );
        assert!(
            typo.contains("IAC_CODE_AGUI_KERNEL_CMD is \"iac-cod --verbose\""),
            "{typo}"
        );
        let absolute = not_found(
            "/nowhere/iac-code",
            &Search {
                variable: Some("/nowhere/iac-code"),
                ..Search::default()
            },
        );
        assert!(
            absolute.contains("/nowhere/iac-code is not a file"),
            "{absolute}"
        );
    }

    #[test]
    fn the_range_is_the_one_that_starts() {
        for ok in ["1.0.2", "1.1.0", "1.1.5", "1.2.0"] {
            assert!(sdk_works(ok), "{ok}");
        }
        for bad in ["1.0.1", "0.3.26", "1.2.1", "1.2.3", "1.3.0", "2.0", "x"] {
            assert!(!sdk_works(bad), "{bad}");
        }
    }

    #[test]
    fn each_cause_is_recognised_and_unknown_says_so() {
        assert_eq!(diagnose("boom", Some("")), Cause::MissingExtra);
        assert_eq!(
            diagnose("ModuleNotFoundError: No module named 'a2a'", None),
            Cause::MissingExtra
        );
        assert_eq!(
            diagnose("anything", Some("1.2.3")),
            Cause::SdkVersion(Some("1.2.3".into()))
        );
        assert_eq!(
            diagnose(
                "OSError: [Errno 98] error while attempting to bind",
                Some("1.1.5")
            ),
            Cause::PortInUse
        );
        assert_eq!(
            diagnose(
                "PermissionError: [Errno 13] Permission denied: '/root/.iac-code'",
                None
            ),
            Cause::StateDir
        );
        assert_eq!(
            diagnose("Segmentation fault", Some("1.1.5")),
            Cause::Unknown
        );
        assert!(
            Cause::Unknown
                .advice()
                .contains("not one iac-agui recognises")
        );
    }
}
