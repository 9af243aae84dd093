//! The text-delta frame, read by hand: the one shape most of a run's frames have.
//!
//! serde's derived read of the same shape took ~4 KiB of a worker's stack (a frame per
//! nesting level, each holding its fields and the deserializer's state) and built an error
//! message for every frame of another shape; this reader is one small frame per level and
//! allocates nothing but unescaped strings. It accepts only what the kernel sends for a text
//! delta: the fields named below, strings, `null`, and for the fields the adapter does not
//! read also booleans. Anything else — another field, a duplicate, a number, another type —
//! is `None`, and the frame is read as a `Value` (same answers, more work; the oracles of
//! `a2a/frame.rs`, in tests and the `delta_frame` fuzz target, hold the two to that).

use std::borrow::Cow;

/// The fields of a delta frame, as in `types::F_*` order: taskId, contextId, state,
/// iacCodeSessionId, messageId, role.
#[derive(Default)]
pub(super) struct Fields<'a> {
    pub(super) strs: [Option<Cow<'a, str>>; 6],
    /// `status.message` was an object: the `text` of its parts, joined.
    pub(super) text: Option<Cow<'a, str>>,
}

/// Read `s` as a text-delta frame.
pub(super) fn read(s: &str) -> Option<Fields<'_>> {
    let mut r = Reader { s, i: 0 };
    let mut f = Fields::default();
    let mut result = false;
    r.object(&[&b"result"[..], b"id", b"jsonrpc"], |r, k| match k {
        0 => {
            result = true;
            r.result(&mut f)
        }
        _ => r.scalar(),
    })?;
    r.ws();
    (result && r.i == s.len()).then_some(f)
}

/// The JSON string whose opening quote is at `at` in `s`, and where it ends (one past its
/// closing quote).
pub(super) fn string_at(s: &str, at: usize) -> Option<(Cow<'_, str>, usize)> {
    let mut r = Reader { s, i: at };
    let v = r.string()?;
    Some((v, r.i))
}

struct Reader<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.s.as_bytes()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes().get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.bytes().get(self.i..end)? == word).then(|| self.i = end)
    }

    /// An object whose keys are among `keys`, each at most once; `value` reads the value of
    /// key number `k`.
    fn object(
        &mut self,
        keys: &[&[u8]],
        mut value: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        let mut seen = 0u8;
        loop {
            let key = self.string()?;
            let k = keys.iter().position(|n| *n == key.as_bytes())?;
            if seen & (1 << k) != 0 {
                return None;
            }
            seen |= 1 << k;
            self.eat(b':')?;
            value(self, k)?;
            if self.after_item(b'}')? {
                return Some(());
            }
        }
    }

    /// After an item of an object or array: a comma (`false`: more follow) or `end`.
    fn after_item(&mut self, end: u8) -> Option<bool> {
        let c = self.peek()?;
        if c != b',' && c != end {
            return None;
        }
        self.i += 1;
        Some(c == end)
    }

    /// `null`, or what `value` reads.
    fn null_or(&mut self, value: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        if self.peek()? == b'n' {
            return self.literal(b"null");
        }
        value(self)
    }

    /// A field the adapter does not read: a string, a boolean or null.
    fn scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => None,
        }
    }

    /// A string or null, into `slot`.
    fn opt_string(&mut self, slot: &mut Option<Cow<'a, str>>) -> Option<()> {
        if self.peek()? == b'n' {
            return self.literal(b"null");
        }
        *slot = Some(self.string()?);
        Some(())
    }

    /// A JSON string, borrowed unless it has escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let b = self.bytes();
        let mut owned: Option<String> = None;
        let mut from = self.i;
        loop {
            let c = *b.get(self.i)?;
            match c {
                b'"' => {
                    let tail = self.s.get(from..self.i)?;
                    self.i += 1;
                    return Some(match owned {
                        None => Cow::Borrowed(tail),
                        Some(mut o) => {
                            o.push_str(tail);
                            Cow::Owned(o)
                        }
                    });
                }
                b'\\' => {
                    let o = owned.get_or_insert_with(String::new);
                    o.push_str(self.s.get(from..self.i)?);
                    self.i += 1;
                    self.escape(o)?;
                    from = self.i;
                }
                0..=0x1f => return None,
                _ => self.i += 1 + crate::scan::json_plain_prefix(b.get(self.i + 1..)?),
            }
        }
    }

    /// The escape after a backslash, appended to `o`.
    fn escape(&mut self, o: &mut String) -> Option<()> {
        let c = *self.bytes().get(self.i)?;
        self.i += 1;
        let ch = match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                match hi {
                    0xD800..=0xDBFF => {
                        self.literal(b"\\u")?;
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                    }
                    // A lone trailing surrogate: the Value read refuses it.
                    0xDC00..=0xDFFF => return None,
                    _ => char::from_u32(hi)?,
                }
            }
            _ => return None,
        };
        o.push(ch);
        Some(())
    }

    fn hex4(&mut self) -> Option<u32> {
        let end = self.i.checked_add(4)?;
        let h = self.s.get(self.i..end)?;
        if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.i = end;
        u32::from_str_radix(h, 16).ok()
    }

    fn result(&mut self, f: &mut Fields<'a>) -> Option<()> {
        let mut update = false;
        self.object(&[&b"statusUpdate"[..]], |r, _| {
            update = true;
            r.update(f)
        })?;
        update.then_some(())
    }

    fn update(&mut self, f: &mut Fields<'a>) -> Option<()> {
        let mut status = false;
        self.object(
            &[&b"taskId"[..], b"contextId", b"status", b"metadata"],
            |r, k| match k {
                0 | 1 => r.opt_string(&mut f.strs[k]),
                2 => {
                    status = true;
                    r.status(f)
                }
                _ => r.null_or(|r| r.metadata(f)),
            },
        )?;
        status.then_some(())
    }

    fn metadata(&mut self, f: &mut Fields<'a>) -> Option<()> {
        self.object(&[&b"iac_code"[..]], |r, _| {
            r.null_or(|r| {
                r.object(&[&b"iacCodeSessionId"[..]], |r, _| {
                    r.opt_string(&mut f.strs[3])
                })
            })
        })
    }

    fn status(&mut self, f: &mut Fields<'a>) -> Option<()> {
        self.object(&[&b"state"[..], b"message", b"timestamp"], |r, k| match k {
            0 => r.opt_string(&mut f.strs[2]),
            1 => r.null_or(|r| r.message(f)),
            _ => r.scalar(),
        })
    }

    fn message(&mut self, f: &mut Fields<'a>) -> Option<()> {
        f.text = Some(Cow::Borrowed(""));
        self.object(
            &[
                &b"messageId"[..],
                b"contextId",
                b"taskId",
                b"role",
                b"parts",
            ],
            |r, k| match k {
                0 => r.opt_string(&mut f.strs[4]),
                3 => r.opt_string(&mut f.strs[5]),
                4 => r.null_or(|r| r.parts(f)),
                _ => r.scalar(),
            },
        )
    }

    fn parts(&mut self, f: &mut Fields<'a>) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            let mut text = None;
            self.object(&[&b"text"[..]], |r, _| r.opt_string(&mut text))?;
            if let Some(t) = text {
                let joined = f.text.get_or_insert(Cow::Borrowed(""));
                if joined.is_empty() {
                    *joined = t;
                } else {
                    joined.to_mut().push_str(&t);
                }
            }
            if self.after_item(b']')? {
                return Some(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"{"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"a\u00e9"},{"text":"b"}]}},"metadata":{"iac_code":{"iacCodeSessionId":"s"}}}},"id":"1","jsonrpc":"2.0"}"#;

    #[test]
    fn reads_every_field_of_the_kernel_shape() {
        let f = read(BASE).unwrap();
        let got: Vec<Option<&str>> = f.strs.iter().map(|s| s.as_deref()).collect();
        assert_eq!(
            got,
            [
                Some("t"),
                Some("c"),
                Some("TASK_STATE_WORKING"),
                Some("s"),
                Some("m"),
                Some("ROLE_AGENT")
            ]
        );
        assert_eq!(f.text.as_deref(), Some("a\u{e9}b"));
    }

    #[test]
    fn escapes_decode_as_json_says() {
        let escaped = BASE.replace(
            r#""text":"b""#,
            r#""text":"\"\\\/\b\f\n\r\t\ud83d\ude00\u0041""#,
        );
        let f = read(&escaped).unwrap();
        assert_eq!(
            f.text.as_deref(),
            Some("a\u{e9}\"\\/\u{8}\u{c}\n\r\t\u{1F600}A")
        );
        // Keys are compared unescaped, as serde compares them.
        assert!(read(&BASE.replace(r#""taskId":"t""#, r#""t\u0061skId":"t""#)).is_some());
    }

    #[test]
    fn anything_else_is_left_to_the_value_read() {
        for odd in [
            BASE.replace(r#""taskId":"t""#, r#""taskId":"t","taskId":"u""#),
            BASE.replace(r#""taskId":"t""#, r#""taskId":7"#),
            BASE.replace(r#""id":"1""#, r#""id":1"#),
            BASE.replace(r#""id":"1""#, r#""id":[]"#),
            BASE.replace(r#""text":"b""#, r#""text":"\ud83d""#),
            BASE.replace(r#""text":"b""#, r#""text":"\ude00""#),
            BASE.replace(r#""text":"b""#, r#""text":"\x""#),
            BASE.replace(r#""text":"b""#, "\"text\":\"\u{1}\""),
            BASE.replace(r#"{"text":"b"}"#, "null"),
            BASE.replace(r#""status":{"#, r#""status":null,"x":{"#),
            BASE.replace(r#","id":"1","jsonrpc":"2.0"}"#, "}}"),
            BASE.replace(r#""statusUpdate""#, r#""artifactUpdate""#),
            format!("{BASE}x"),
            BASE[..BASE.len() - 1].to_string(),
            r#"{"id":"1"}"#.to_string(),
            r#"{"result":{}}"#.to_string(),
            r#"{"result":{"statusUpdate":{}}}"#.to_string(),
        ] {
            assert!(read(&odd).is_none(), "{odd}");
        }
        // Whitespace, nulls, booleans and empty containers are the kernel's to use.
        for same in [
            BASE.replace(':', " :\n\t").replace(',', " , "),
            BASE.replace(r#""jsonrpc":"2.0""#, r#""jsonrpc":false"#),
            BASE.replace(r#""id":"1""#, r#""id":null"#),
            BASE.replace(
                r#""metadata":{"iac_code":{"iacCodeSessionId":"s"}}"#,
                r#""metadata":{}"#,
            ),
            BASE.replace(
                r#""iac_code":{"iacCodeSessionId":"s"}"#,
                r#""iac_code":null"#,
            ),
            BASE.replace(r#"{"text":"b"}"#, r#"{"text":null},{}"#),
        ] {
            assert!(read(&same).is_some(), "{same}");
        }
        // A message with null parts has an empty text, not none.
        let null_parts = BASE
            .replace(r#""message":{"#, r#""message":{"parts":null,"#)
            .replace(r#","parts":[{"text":"a\u00e9"},{"text":"b"}]"#, "");
        let f = read(&null_parts).unwrap();
        assert_eq!(f.text.as_deref(), Some(""));
    }
}
