//! Log set-up. Every record is written on one line with its control and Unicode format
//! characters escaped, so a client string that reaches a message (a runId with a newline, a
//! kernel error text, a right-to-left override) can never forge, split or visually reorder a
//! log line, whichever call site logged it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::OnceLock;

/// The format chosen at start-up, for the lines written outside the logger (the ready line,
/// a fatal error, the kernel's relayed output, a panic).
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

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

/// A Unicode format character (general category Cf, as of Unicode 15): invisible, yet it changes
/// how a viewer shows the text around it. The bidi overrides and isolates (U+202A–U+202E,
/// U+2066–U+2069) make a terminal or an editor show the rest of a log line reversed, so one
/// outcome can be made to read as another (issue 57, 4).
pub(crate) fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// What a log line never holds as it is: control characters (C0, DEL, C1), the Unicode line
/// and paragraph separators (collectors split on them) and format characters.
pub(crate) fn unsafe_in_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}' || is_format(c)
}

/// `s` with the characters of [`unsafe_in_line`] written as escapes.
pub(crate) fn escape(s: &str) -> Cow<'_, str> {
    if !s.contains(unsafe_in_line) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_in_line(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with DEL, C1 controls, U+2028/U+2029 and format characters written as
/// `\uXXXX` (a surrogate pair past U+FFFF). They can only stand inside strings there, where
/// the escape means the same character (serde_json escapes C0 itself). The JSON log and the
/// audit log go through it.
pub(crate) fn escape_json_extra(json: &str) -> Cow<'_, str> {
    let bad = |c: char| matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}') || is_format(c);
    if !json.contains(bad) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 12);
    for c in json.chars() {
        if bad(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
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
                        let quoted = serde_json::to_string(s).unwrap_or_default();
                        write!(out, " {k}={}", escape_json_extra(&quoted))?
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
            // Records written while a request or run is in force name its trace (a field the
            // call site set itself wins).
            if !o.contains_key("trace_id")
                && let Some(t) = crate::trace::current_trace_id()
            {
                o.insert("trace_id".into(), t.into());
            }
            // serde_json escapes C0 controls; DEL, C1 and the Unicode line separators (which
            // some collectors split on) are escaped here: one object per line.
            let line = serde_json::to_string(&o).unwrap_or_default();
            out.write_all(escape_json_extra(&line).as_bytes())?;
            writeln!(out)
        }
    }
}

/// The log format in force (text before `init`).
pub(crate) fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or(LogFormat::Text)
}

/// One line on stderr in the log format, whatever the level filter says: lines that scripts
/// and collectors wait for (the ready line) or must never lose (a fatal error).
pub(crate) fn direct(
    level: log::Level,
    target: &str,
    text_line: &dyn std::fmt::Display,
    msg: &str,
    fields: &[(&'static str, Field)],
) {
    let mut buf = Vec::with_capacity(128);
    let _ = match format() {
        LogFormat::Text => writeln!(buf, "{}", escape(&text_line.to_string())),
        LogFormat::Json => write_line(
            &mut buf,
            LogFormat::Json,
            &now_rfc3339(),
            level,
            target,
            &format_args!("{msg}"),
            fields,
        ),
    };
    // One write of the whole line: records of other threads never interleave with it.
    let mut err = io::stderr().lock();
    let _ = err.write_all(&buf);
    let _ = err.flush();
}

/// The ready line: `iac-agui VERSION listening on URL` in text; in JSON the fixed message
/// `listening` with the URL and version as fields.
/// `part`: `None` for the server itself, else what listens (`demo kernel`).
pub(crate) fn ready(part: Option<&str>, version: &str, url: &str) {
    let (text, msg) = match part {
        None => (
            format!("iac-agui {version} listening on {url}"),
            "listening".to_string(),
        ),
        Some(p) => (
            format!("iac-agui {p} listening on {url}"),
            format!("{p} listening"),
        ),
    };
    direct(
        log::Level::Info,
        "iac_agui",
        &text,
        &msg,
        &[
            ("version", Field::Str(version.into())),
            ("url", Field::Str(url.into())),
        ],
    );
}

/// A fatal start-up or run-time error, just before the process exits.
pub(crate) fn fatal(e: &dyn std::fmt::Display) {
    let msg = e.to_string();
    direct(
        log::Level::Error,
        "iac_agui",
        &format_args!("iac-agui: {msg}"),
        &msg,
        &[],
    );
}

/// A line the managed kernel wrote on its stdout or stderr, as one record of ours (JSON
/// mode pipes the child's output through this, so every line on stderr stays JSON).
pub(crate) fn kernel_line(stream: &'static str, line: &str) {
    direct(
        log::Level::Info,
        "iac_agui::kernel",
        &line,
        line,
        &[("stream", Field::Str(stream.into()))],
    );
}

/// The wall clock as RFC 3339 with milliseconds in UTC, as env_logger writes it.
fn now_rfc3339() -> String {
    crate::rfc3339::format_millis(crate::clock::Clock::wall(&crate::clock::SystemClock))
}

/// Install the logger: info by default, debug with `-d`, `RUST_LOG` overrides.
pub(crate) fn init(debug: bool, stdout: bool, format: LogFormat) {
    let _ = FORMAT.set(format);
    if format == LogFormat::Json {
        install_json_panic_hook();
    }
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

/// In JSON mode a panic (caught per run by the handler, so the server goes on) is reported as
/// one JSON record instead of the default hook's plain lines.
fn install_json_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "panic".to_string()
        };
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        direct(
            log::Level::Error,
            "iac_agui::panic",
            &"",
            &format!("panic: {msg}"),
            &[
                ("thread", Field::Str(thread.name().unwrap_or("?").into())),
                ("location", Field::Str(location)),
            ],
        );
    }));
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
    fn unicode_line_separators_are_escaped_in_quoted_and_json_values() {
        let hostile = "a b\u{2028}c\u{2029}d\u{85}e\u{7f}";
        let fields = vec![("run_id", Field::Str(hostile.into()))];
        for format in [LogFormat::Text, LogFormat::Json] {
            let mut out = Vec::new();
            write_line(
                &mut out,
                format,
                &"ts",
                log::Level::Info,
                "t",
                &format_args!("m {hostile}"),
                &fields,
            )
            .unwrap();
            let text = String::from_utf8(out).unwrap();
            for c in ['\u{2028}', '\u{2029}', '\u{85}', '\u{7f}'] {
                assert!(
                    !text.contains(c),
                    "{format:?} kept U+{:04X}: {text}",
                    c as u32
                );
            }
            if format == LogFormat::Json {
                let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
                assert_eq!(v["run_id"], hostile, "the escape means the same string");
                assert_eq!(v["msg"], format!("m {hostile}"));
            } else {
                assert!(
                    text.contains(r#"run_id="a b\u2028c\u2029d\u0085e\u007f""#),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn format_characters_cannot_reorder_a_log_line() {
        // A runId with a right-to-left override: unescaped, a viewer shows "…: success" as
        // "sseccus :…" and the rest of the line reversed (issue 57, 4).
        let hostile = "r1\u{202e} a\u{2066}b\u{2069} \u{200b}\u{feff}\u{ad}\u{61c}\u{e0001}";
        let fields = vec![
            ("run_id", Field::Str(hostile.into())),
            ("thread_id", Field::Str(hostile.replace(' ', "_"))),
        ];
        for format in [LogFormat::Text, LogFormat::Json] {
            let mut out = Vec::new();
            write_line(
                &mut out,
                format,
                &"ts",
                log::Level::Info,
                "t",
                &format_args!("run {hostile}: success"),
                &fields,
            )
            .unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(!text.contains(is_format), "{format:?}: {text:?}");
            if format == LogFormat::Json {
                let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
                assert_eq!(v["run_id"], hostile, "the escape means the same string");
                assert!(text.contains(r"\udb40\udc01"), "a surrogate pair: {text}");
            } else {
                assert!(text.contains("run r1\\u{202e} a\\u{2066}b"), "{text}");
                assert!(
                    text.contains(r#"run_id="r1\u202e a\u2066b\u2069"#),
                    "{text}"
                );
                assert!(text.contains(r"thread_id=r1\u{202e}_a"), "{text}");
            }
        }
        for c in [
            '\u{ad}', '\u{600}', '\u{200b}', '\u{202e}', '\u{2069}', '\u{206f}', '\u{feff}',
        ] {
            assert!(is_format(c) && unsafe_in_line(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'é', '日', '😀', '\u{2070}', '\u{fe0f}', '\u{300}'] {
            assert!(!is_format(c) && !unsafe_in_line(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn json_records_name_the_trace_in_force() {
        let line = || {
            let mut out = Vec::new();
            let args = format_args!("m");
            write_line(
                &mut out,
                LogFormat::Json,
                &"ts",
                log::Level::Info,
                "t",
                &args,
                &[],
            )
            .unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        assert!(line().get("trace_id").is_none());
        let span = crate::trace::Span::incoming(
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            None,
            "r".into(),
            None,
        );
        let v = crate::trace::with_current(Some(span.ctx.clone()), line);
        assert_eq!(v["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert!(line().get("trace_id").is_none());
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
