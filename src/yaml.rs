//! The configuration file format: a flat YAML mapping of scalar keys, which is all the
//! reference's config file may usefully hold. Anything richer (nesting, lists, anchors, block
//! scalars, tags) is refused with a clear error rather than half-understood.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Scalar::Null => "null",
            Scalar::Bool(_) => "a boolean",
            Scalar::Int(_) => "an integer",
            Scalar::Float(_) => "a number",
            Scalar::Str(_) => "a string",
        }
    }
}

/// One key's value, with how and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub value: Scalar,
    /// The text after `key:`, blanks and comment cut (`2.0`, `'abc'`): what an error quotes,
    /// and what a number given to a text setting is read as.
    pub raw: String,
    /// The line it is on (from 1).
    pub line: usize,
}

/// Parse the whole file. Keys have `-` normalised to `_` like the reference.
pub fn parse_flat(text: &str) -> Result<BTreeMap<String, Scalar>, String> {
    Ok(parse_entries(text)?
        .into_iter()
        .map(|(k, e)| (k, e.value))
        .collect())
}

/// [`parse_flat`] with each value's text and line; a key given twice is its last line.
pub fn parse_entries(text: &str) -> Result<BTreeMap<String, Entry>, String> {
    let mut map = BTreeMap::new();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = strip_comment(raw);
        let trimmed = line.trim_end();
        if trimmed.trim().is_empty() {
            continue;
        }
        if (n == 0 && trimmed == "---") || trimmed == "..." {
            continue;
        }
        if trimmed.starts_with([' ', '\t']) {
            return Err(format!(
                "line {line_no}: nested values are not supported (the file must be a flat mapping)"
            ));
        }
        if trimmed.starts_with(['-', '[', '{', '&', '*', '!', '?', '|', '>', '%', '@', '`']) {
            return Err(format!(
                "line {line_no}: the file must contain a mapping of keys to scalar values"
            ));
        }
        let Some((key, value)) = split_key(trimmed) else {
            return Err(format!("line {line_no}: expected `key: value`"));
        };
        let key = unquote_key(key.trim()).map_err(|e| format!("line {line_no}: {e}"))?;
        if key.is_empty() {
            return Err(format!("line {line_no}: empty key"));
        }
        let raw = value.trim();
        let value = parse_scalar(raw).map_err(|e| format!("line {line_no}: {e}"))?;
        let entry = Entry {
            value,
            raw: raw.to_string(),
            line: line_no,
        };
        map.insert(key.replace('-', "_"), entry);
    }
    Ok(map)
}

fn strip_comment(line: &str) -> &str {
    let mut in_single = false;
    let mut in_double = false;
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !in_double => in_single = !in_single,
            '"' if !in_single => in_double = !in_double,
            '#' if !in_single && !in_double && prev_space => return &line[..i],
            _ => {}
        }
        prev_space = c == ' ' || c == '\t';
    }
    line
}

/// Split at the first `: ` (or a trailing `:`) outside quotes.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let bytes = line.as_bytes();
    let mut in_single = false;
    let mut in_double = false;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !in_double => in_single = !in_single,
            b'"' if !in_single => in_double = !in_double,
            b':' if !in_single
                && !in_double
                && (i + 1 == bytes.len() || bytes[i + 1] == b' ' || bytes[i + 1] == b'\t') =>
            {
                return Some((&line[..i], &line[i + 1..]));
            }
            _ => {}
        }
    }
    None
}

fn unquote_key(k: &str) -> Result<String, String> {
    if k.starts_with('"') || k.starts_with('\'') {
        match parse_scalar(k)? {
            Scalar::Str(s) => Ok(s),
            _ => Err("invalid key".into()),
        }
    } else {
        Ok(k.to_string())
    }
}

fn parse_scalar(v: &str) -> Result<Scalar, String> {
    if v.is_empty() || v == "~" || v == "null" || v == "Null" || v == "NULL" {
        return Ok(Scalar::Null);
    }
    if let Some(inner) = v.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or("unterminated single-quoted string")?;
        if inner.replace("''", "").contains('\'') {
            return Err("stray quote in single-quoted string".into());
        }
        return Ok(Scalar::Str(inner.replace("''", "'")));
    }
    if let Some(inner) = v.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or("unterminated double-quoted string")?;
        return unescape_double(inner).map(Scalar::Str);
    }
    if v.starts_with(['[', '{', '&', '*', '!', '|', '>']) {
        return Err("only scalar values are supported".into());
    }
    match v {
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            return Ok(Scalar::Bool(true));
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            return Ok(Scalar::Bool(false));
        }
        _ => {}
    }
    let numeric = v.replace('_', "");
    if let Ok(i) = numeric.parse::<i64>() {
        return Ok(Scalar::Int(i));
    }
    let looks_numeric = numeric
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && numeric.chars().any(|c| c.is_ascii_digit());
    if looks_numeric && let Ok(f) = numeric.parse::<f64>() {
        return Ok(Scalar::Float(f));
    }
    Ok(Scalar::Str(v.to_string()))
}

fn unescape_double(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '"' {
            return Err("stray quote in double-quoted string".into());
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\\') => out.push('\\'),
            Some('"') => out.push('"'),
            Some('/') => out.push('/'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16).map_err(|_| "bad \\u escape")?;
                out.push(char::from_u32(code).ok_or("bad \\u escape")?);
            }
            _ => return Err("unsupported escape in double-quoted string".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_mapping() {
        let m = parse_flat(
            "---\n# comment\nhost: 0.0.0.0\nport: 9000 # trailing\nstate-dir: '/tmp/it''s'\ndebug: true\nidle_shutdown: 1.5\nauth_token: \"a#b\"\nempty:\n",
        )
        .unwrap();
        assert_eq!(m["host"], Scalar::Str("0.0.0.0".into()));
        assert_eq!(m["port"], Scalar::Int(9000));
        assert_eq!(m["state_dir"], Scalar::Str("/tmp/it's".into()));
        assert_eq!(m["debug"], Scalar::Bool(true));
        assert_eq!(m["idle_shutdown"], Scalar::Float(1.5));
        assert_eq!(m["auth_token"], Scalar::Str("a#b".into()));
        assert_eq!(m["empty"], Scalar::Null);
    }

    #[test]
    fn entries_keep_the_text_and_line_as_written() {
        let m = parse_entries("# c\nport: 2.0   # two\n\nhost: '0123'\nmax-runs: 1_000\n").unwrap();
        assert_eq!(
            m["port"],
            Entry {
                value: Scalar::Float(2.0),
                raw: "2.0".into(),
                line: 2
            }
        );
        assert_eq!((m["host"].raw.as_str(), m["host"].line), ("'0123'", 4));
        assert_eq!(m["max_runs"].raw, "1_000");
    }

    #[test]
    fn refuses_structure() {
        for bad in [
            "- a\n- b\n",
            "a:\n  b: 1\n",
            "a: [1, 2]\n",
            "a: {b: 1}\n",
            "a: &x 1\n",
            "just text\n",
            "a: 'open\n",
            "a: |\n  text\n",
        ] {
            assert!(parse_flat(bad).is_err(), "{bad:?}");
        }
        assert!(parse_flat("").unwrap().is_empty());
    }
}
