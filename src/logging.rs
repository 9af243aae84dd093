//! Log set-up. Every record is written on one line with its control characters escaped, so
//! a client string that reaches a message (a runId with a newline, a kernel error text) can
//! never forge or split a log line, whichever call site logged it.

use std::borrow::Cow;
use std::io::{self, Write};

/// `s` with control characters (C0, DEL, C1, U+2028/U+2029) written as escapes.
pub(crate) fn escape(s: &str) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !s.contains(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if bad(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// One log line: `[timestamp LEVEL target] message`, the message escaped.
pub(crate) fn write_line(
    out: &mut impl Write,
    ts: &dyn std::fmt::Display,
    level: log::Level,
    target: &str,
    args: &std::fmt::Arguments<'_>,
) -> io::Result<()> {
    let msg = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    writeln!(out, "[{ts} {level:<5} {}] {}", escape(target), escape(&msg))
}

/// Install the logger: info by default, debug with `-d`, `RUST_LOG` overrides.
pub(crate) fn init(debug: bool, stdout: bool) {
    let default = if debug { "debug" } else { "info" };
    let mut b =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default));
    // The HTTP client's debug/trace output shows kernel request bodies (API keys, cloud
    // credentials) and the kernel token: capped at info whatever RUST_LOG says.
    b.filter_module("ureq", log::LevelFilter::Info);
    b.filter_module("ureq_proto", log::LevelFilter::Info);
    b.format(|f, record| {
        let ts = f.timestamp_millis();
        write_line(f, &ts, record.level(), record.target(), record.args())
    });
    b.target(if stdout {
        env_logger::Target::Stdout
    } else {
        env_logger::Target::Stderr
    });
    let _ = b.try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_strings_cannot_forge_log_lines() {
        let run_id =
            "r1\n[2026-01-01T00:00:00Z INFO  iac_agui] run r2: admin logged in\r\u{85}\u{2028}";
        let mut out = Vec::new();
        write_line(
            &mut out,
            &"ts",
            log::Level::Warn,
            "iac_agui::adapter",
            &format_args!("run {run_id}: client disconnected"),
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.ends_with("\\r\\u{85}\\u{2028}: client disconnected\n"),
            "{text}"
        );
        assert!(text.contains("r1\\n[2026"));
        assert_eq!(escape("plain ü 日本"), "plain ü 日本");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(escape("a\u{7f}\u{1b}[31m"), "a\\u{7f}\\u{1b}[31m");
    }
}
