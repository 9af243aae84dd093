//! Log set-up. Every record is written on one line with its control characters escaped, so
//! a client string that reaches a message (a runId with a newline, a kernel error text) can
//! never forge or split a log line, whichever call site logged it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::{self, Write};

/// How log records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `[ts LEVEL target] msg key=value …`
    Text,
    /// One JSON object per line: `ts`, `level`, `target`, `msg` and each field as its own key.
    Json,
}

impl LogFormat {
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s.trim() {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// A field value of an access-log line.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Str(String),
    Num(u64),
}

thread_local! {
    /// Fields of the record being logged on this thread (the formatter runs in the caller).
    static FIELDS: RefCell<Vec<(&'static str, Field)>> = const { RefCell::new(Vec::new()) };
}

/// One `info` line for a finished request: method, path, status, duration, bytes and (for
/// runs) the AG-UI identities and outcome. Values are client strings: they are escaped like
/// every message, and never carry a body, a header value or a secret.
pub fn access(fields: Vec<(&'static str, Field)>) {
    FIELDS.with(|f| *f.borrow_mut() = fields);
    log::info!(target: "iac_agui::access", "request");
    FIELDS.with(|f| f.borrow_mut().clear());
}

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

/// One log line in `format`, the message and every field escaped.
pub fn write_line(
    out: &mut impl Write,
    format: LogFormat,
    ts: &dyn std::fmt::Display,
    level: log::Level,
    target: &str,
    args: &std::fmt::Arguments<'_>,
    fields: &[(&'static str, Field)],
) -> io::Result<()> {
    let msg = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    match format {
        LogFormat::Text => {
            write!(out, "[{ts} {level:<5} {}] {}", escape(target), escape(&msg))?;
            for (k, v) in fields {
                match v {
                    Field::Num(n) => write!(out, " {k}={n}")?,
                    Field::Str(s) if s.is_empty() || s.contains([' ', '"', '=']) => {
                        write!(out, " {k}={}", serde_json::Value::String(s.clone()))?
                    }
                    Field::Str(s) => write!(out, " {k}={}", escape(s))?,
                }
            }
            writeln!(out)
        }
        LogFormat::Json => {
            let mut o = serde_json::Map::new();
            o.insert("ts".into(), ts.to_string().into());
            o.insert("level".into(), level.as_str().into());
            o.insert("target".into(), target.into());
            o.insert("msg".into(), msg.as_ref().into());
            for (k, v) in fields {
                let v = match v {
                    Field::Num(n) => serde_json::Value::from(*n),
                    Field::Str(s) => serde_json::Value::from(s.as_str()),
                };
                o.insert((*k).into(), v);
            }
            // serde_json escapes control characters: one object per line.
            serde_json::to_writer(&mut *out, &o)?;
            writeln!(out)
        }
    }
}

/// Install the logger: info by default, debug with `-d`, `RUST_LOG` overrides.
pub(crate) fn init(debug: bool, stdout: bool, format: LogFormat) {
    let line_format = format;
    let default = if debug { "debug" } else { "info" };
    let mut b =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default));
    // The HTTP client's debug/trace output shows kernel request bodies (API keys, cloud
    // credentials) and the kernel token: capped at info whatever RUST_LOG says.
    b.filter_module("ureq", log::LevelFilter::Info);
    b.filter_module("ureq_proto", log::LevelFilter::Info);
    b.format(move |f, record| {
        let ts = f.timestamp_millis();
        let fields = FIELDS.with(|x| std::mem::take(&mut *x.borrow_mut()));
        write_line(
            f,
            line_format,
            &ts,
            record.level(),
            record.target(),
            record.args(),
            &fields,
        )
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
            LogFormat::Text,
            &"ts",
            log::Level::Warn,
            "iac_agui::adapter",
            &format_args!("run {run_id}: client disconnected"),
            &[],
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

    #[test]
    fn access_lines_in_both_formats() {
        let fields = vec![
            ("method", Field::Str("POST".into())),
            ("path", Field::Str("/".into())),
            ("status", Field::Num(200)),
            ("run_id", Field::Str("r 1\nforged".into())),
        ];
        let line = |format| {
            let mut out = Vec::new();
            let args = format_args!("request");
            let target = "iac_agui::access";
            write_line(
                &mut out,
                format,
                &"2026",
                log::Level::Info,
                target,
                &args,
                &fields,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        let text = line(LogFormat::Json);
        assert_eq!(text.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["run_id"], "r 1\nforged");
        assert_eq!(
            (v["level"].as_str(), v["msg"].as_str()),
            (Some("INFO"), Some("request"))
        );
        let text = line(LogFormat::Text);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(" method=POST path=/ status=200 run_id=\"r 1\\nforged\""),
            "{text}"
        );
    }
}
