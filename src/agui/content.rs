//! The last user message → A2A parts (reference §2.5), validated before the stream starts
//! (REC D6: the documented pre-SSE `INVALID_INPUT`, retryable with the same runId).
//!
//! Images are decoded strictly and normalised by the reference's thresholds (`agui::image`).

use base64::Engine;
use serde_json::{Value, json};

use crate::agui::dialect::Dialect;
use crate::catalog::Msg;
use crate::limits;

/// The last user message: its id and its A2A parts.
#[derive(Debug, Clone, PartialEq)]
pub struct UserMessage {
    pub(crate) message_id: String,
    pub(crate) parts: Vec<Value>,
}

/// Why a message or part of a request did not reach the kernel (AG-UI 1.0 mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    UnknownRole,
    UnknownPartType,
    /// Audio, video, documents and legacy binary parts: the kernel takes text and images.
    MediaNotSupported,
    /// An image type the kernel does not take (it takes PNG, JPEG, GIF, WebP).
    ImageTypeNotSupported,
    /// Media by URL: this server fetches nothing on a client's behalf.
    RemoteMedia,
    /// A model provider's file handle: only that provider resolves it.
    ProviderFile,
    /// A `context[]` entry past `limits::MAX_CONTEXT_BYTES`.
    ContextTooLarge,
    /// `context[]` on a message the kernel reads as a command (`/…`): it would become the
    /// command's arguments.
    ContextOnCommand,
}

impl SkipReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SkipReason::UnknownRole => "unknown-role",
            SkipReason::UnknownPartType => "unknown-part-type",
            SkipReason::MediaNotSupported => "media-not-supported",
            SkipReason::ImageTypeNotSupported => "image-type-not-supported",
            SkipReason::RemoteMedia => "remote-media",
            SkipReason::ProviderFile => "provider-file",
            SkipReason::ContextTooLarge => "context-too-large",
            SkipReason::ContextOnCommand => "context-on-command",
        }
    }
}

/// A message (`part: None`) or a part of one that the run goes on without.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub(crate) message_id: Option<String>,
    pub(crate) part: Option<usize>,
    /// The part's type, or the message's role.
    pub(crate) kind: String,
    pub(crate) reason: SkipReason,
}

impl Skipped {
    /// `{"messageId","part","type","reason"}` (absent fields omitted).
    pub(crate) fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        if let Some(id) = &self.message_id {
            o.insert("messageId".into(), id.as_str().into());
        }
        if let Some(p) = self.part {
            o.insert("part".into(), p.into());
        }
        o.insert("type".into(), self.kind.as_str().into());
        o.insert("reason".into(), self.reason.as_str().into());
        Value::Object(o)
    }
}

/// The last user message by the reference's rules (0.1 mode).
pub fn user_message(messages: &[Value]) -> Result<UserMessage, Msg> {
    user_message_as(messages, &Dialect::V0_1, &mut Vec::new())
}

/// The last user message by the rules of `dialect`. AG-UI 1.0 mode skips what the kernel
/// cannot take (media other than inline images of the four web types, unknown parts), adding
/// it to `skipped`, instead of refusing the run; a message left with nothing is refused.
pub fn user_message_as(
    messages: &[Value],
    dialect: &Dialect,
    skipped: &mut Vec<Skipped>,
) -> Result<UserMessage, Msg> {
    let m = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .ok_or(Msg::UserMessageRequired)?;
    let message_id = m
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let v1 = dialect.reads_1_0_messages;
    let parts = match m.get("content") {
        Some(Value::String(s)) => vec![json!({"text": s})],
        Some(Value::Array(items)) => {
            let mut skip = |part: usize, kind: &str, reason: SkipReason| {
                skipped.push(Skipped {
                    message_id: Some(message_id.clone()),
                    part: Some(part),
                    kind: kind.to_string(),
                    reason,
                });
            };
            let parts = to_parts(items, v1.then_some(&mut skip as _))?;
            // Every part left out (media here, unknown types by the envelope): nothing to send.
            if v1 && parts.is_empty() && !items.is_empty() {
                return Err(Msg::NothingTheAgentTakes);
            }
            parts
        }
        _ => return Err(Msg::UserMessageRequired),
    };
    Ok(UserMessage { message_id, parts })
}

/// AG-UI 1.0 `context[]` ("a named piece of ambient information given to the agent for the
/// run, distinct from the conversation"; the 1.0 spec: it SHOULD reach the model) as one text
/// part after the user's own. The kernel joins a message's text parts into the model's user
/// turn and reads no metadata key as prompt text, so a text part is the one way in.
pub fn add_context(
    user: &mut UserMessage,
    context: &[(String, String)],
    skipped: &mut Vec<Skipped>,
) {
    if context.is_empty() {
        return;
    }
    let skip = |i: usize, reason| Skipped {
        message_id: None,
        part: Some(i),
        kind: "context".into(),
        reason,
    };
    let first_text = user
        .parts
        .iter()
        .find_map(|p| p.get("text").and_then(Value::as_str));
    if first_text.is_some_and(|t| t.trim_start().starts_with('/')) {
        skipped.extend((0..context.len()).map(|i| skip(i, SkipReason::ContextOnCommand)));
        return;
    }
    let mut text = String::from("Context from the application (not typed by the user):");
    for (i, (description, value)) in context.iter().enumerate() {
        let line = format!("\n- {description}: {value}");
        if text.len() + line.len() > limits::MAX_CONTEXT_BYTES {
            skipped.push(skip(i, SkipReason::ContextTooLarge));
            continue;
        }
        text.push_str(&line);
    }
    if text.contains('\n') {
        user.parts.push(json!({ "text": text }));
    }
}

type Skip<'a> = &'a mut dyn FnMut(usize, &str, SkipReason);

/// The parts as A2A parts. With `skip` (1.0 mode) what the kernel cannot take is passed to
/// it and left out; without it (0.1 mode) it refuses the message, as the reference does.
fn to_parts(items: &[Value], mut skip: Option<Skip<'_>>) -> Result<Vec<Value>, Msg> {
    let mut parts = Vec::with_capacity(items.len());
    let mut total = 0usize;
    for (at, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let mut refuse = |msg: Msg, reason: SkipReason| match skip.as_mut() {
            Some(skip) => {
                skip(at, kind, reason);
                Ok(())
            }
            None => Err(msg),
        };
        match kind {
            "text" => {
                let t = item.get("text").and_then(Value::as_str).unwrap_or("");
                parts.push(json!({"text": t}));
            }
            "image" => {
                let src = item.get("source").unwrap_or(&Value::Null);
                match src.get("type").and_then(Value::as_str) {
                    Some("data") => {}
                    Some("file") => {
                        refuse(Msg::RemoteMediaUnsupported, SkipReason::ProviderFile)?;
                        continue;
                    }
                    _ => {
                        refuse(Msg::RemoteMediaUnsupported, SkipReason::RemoteMedia)?;
                        continue;
                    }
                }
                let declared = src
                    .get("mimeType")
                    .or_else(|| src.get("mime_type"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_lowercase();
                if !matches!(
                    declared.as_str(),
                    "image/png" | "image/jpeg" | "image/gif" | "image/webp"
                ) {
                    refuse(Msg::ImageTypeUnsupported, SkipReason::ImageTypeNotSupported)?;
                    continue;
                }
                let b64 = src.get("value").and_then(Value::as_str).unwrap_or("");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| Msg::ImageBadBase64)?;
                if bytes.len() > limits::MAX_IMAGE_BYTES {
                    return Err(Msg::ImageTooLarge);
                }
                total += bytes.len();
                if total > limits::MAX_TOTAL_IMAGE_BYTES {
                    return Err(Msg::ImagesTooLarge);
                }
                // Bytes of a format not decoded here (TIFF, HEIC, ICO…) are content the kernel
                // cannot take, not broken data: skipped in 1.0; 0.1 refuses them, as before.
                if !super::image::decodable_format(&bytes) {
                    refuse(Msg::ImageInvalid, SkipReason::ImageTypeNotSupported)?;
                    continue;
                }
                let image = super::image::normalize(&bytes).map_err(|_| Msg::ImageInvalid)?;
                let filename = item
                    .get("metadata")
                    .and_then(|m| m.get("filename"))
                    .and_then(Value::as_str)
                    .filter(|f| f.len() <= 255 && is_safe_filename(f))
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("agui-image-{}", parts.len() + 1));
                let bytes = match &image.bytes {
                    None => b64.to_string(),
                    Some(b) => base64::engine::general_purpose::STANDARD.encode(b),
                };
                parts.push(json!({"data": {"filename": filename, "bytes": bytes}, "mediaType": image.media_type}));
            }
            "audio" | "video" | "document" | "binary" => {
                refuse(Msg::OnlyTextAndImages, SkipReason::MediaNotSupported)?;
            }
            // Listed by the envelope's check (1.0), refused as the reference does (0.1).
            _ if skip.is_some() => {}
            _ => return Err(Msg::OnlyTextAndImages),
        }
    }
    Ok(parts)
}

const RESERVED: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "COM¹", "COM²", "COM³", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8",
    "LPT9", "LPT¹", "LPT²", "LPT³",
];

/// The reference's "safe filename, unchanged" rule.
pub(crate) fn is_safe_filename(f: &str) -> bool {
    if f.is_empty() || f == "." || f == ".." {
        return false;
    }
    if f.chars().any(|c| {
        (c as u32) < 0x20 || matches!(c, '<' | '>' | ':' | '"' | '/' | '\\' | '|' | '?' | '*')
    }) {
        return false;
    }
    if f.ends_with(' ') || f.ends_with('.') {
        return false;
    }
    let stem = f.split('.').next().unwrap_or("").to_uppercase();
    !RESERVED.contains(&stem.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    fn img(mime: &str, value: &str, filename: Option<&str>) -> Value {
        let mut v = json!({"type":"image","source":{"type":"data","value":value,"mimeType":mime}});
        if let Some(f) = filename {
            v["metadata"] = json!({"filename": f});
        }
        v
    }

    fn user(content: Value) -> Vec<Value> {
        vec![json!({"id":"u1","role":"user","content":content})]
    }

    #[test]
    fn text_and_last_user_message() {
        let msgs = vec![
            json!({"id":"a","role":"user","content":"first"}),
            json!({"id":"b","role":"user","content":"second"}),
            json!({"id":"c","role":"assistant","content":"x"}),
        ];
        let u = user_message(&msgs).unwrap();
        assert_eq!(u.message_id, "b");
        assert_eq!(u.parts, vec![json!({"text":"second"})]);
        assert_eq!(user_message(&[]), Err(Msg::UserMessageRequired));
        assert_eq!(user_message(&user(json!([]))).unwrap().parts.len(), 0);
    }

    #[test]
    fn image_rules() {
        let ok = user_message(&user(
            json!([{"type":"text","text":"see"}, img("IMAGE/PNG", PNG_1X1, Some("shot.png"))]),
        ))
        .unwrap();
        assert_eq!(
            ok.parts[1],
            json!({"data":{"filename":"shot.png","bytes":PNG_1X1},"mediaType":"image/png"})
        );
        let unsafe_name =
            user_message(&user(json!([img("image/png", PNG_1X1, Some("../x.png"))]))).unwrap();
        assert_eq!(unsafe_name.parts[0]["data"]["filename"], "agui-image-1");
        // Declared jpeg, actually png: the detected type wins.
        let detected = user_message(&user(json!([img("image/jpeg", PNG_1X1, None)]))).unwrap();
        assert_eq!(detected.parts[0]["mediaType"], "image/png");
        let cases = [
            (
                json!([{"type":"image","source":{"type":"url","value":"http://x/y.png"}}]),
                Msg::RemoteMediaUnsupported,
            ),
            (
                json!([img("image/svg+xml", PNG_1X1, None)]),
                Msg::ImageTypeUnsupported,
            ),
            (
                json!([img("image/jpg", PNG_1X1, None)]),
                Msg::ImageTypeUnsupported,
            ),
            (
                json!([img("image/png", &format!("{}\n", &PNG_1X1[..20]), None)]),
                Msg::ImageBadBase64,
            ),
            (json!([img("image/png", "@@@@", None)]), Msg::ImageBadBase64),
            (json!([img("image/png", "", None)]), Msg::ImageInvalid),
            (
                json!([img("image/png", "aGVsbG8=", None)]),
                Msg::ImageInvalid,
            ),
            (
                json!([{"type":"audio","source":{"type":"data","value":"x","mimeType":"audio/wav"}}]),
                Msg::OnlyTextAndImages,
            ),
            (
                json!([{"type":"binary","mimeType":"a/b","data":"x"}]),
                Msg::OnlyTextAndImages,
            ),
        ];
        for (content, want) in cases {
            assert_eq!(user_message(&user(content.clone())), Err(want), "{content}");
        }
        // Regression: a truncated PNG (its 33-byte header only) was forwarded.
        let png = base64::engine::general_purpose::STANDARD
            .decode(PNG_1X1)
            .unwrap();
        let head = base64::engine::general_purpose::STANDARD.encode(&png[..33]);
        assert_eq!(
            user_message(&user(json!([img("image/png", &head, None)]))),
            Err(Msg::ImageInvalid)
        );
        let big = base64::engine::general_purpose::STANDARD
            .encode(vec![0u8; limits::MAX_IMAGE_BYTES + 1]);
        assert_eq!(
            user_message(&user(json!([img("image/png", &big, None)]))),
            Err(Msg::ImageTooLarge)
        );
    }

    #[test]
    fn bmp_declared_as_png_is_sent_as_png() {
        // Regression: BMP was refused; the reference converts it (edge case #49).
        let mut bmp = std::io::Cursor::new(Vec::new());
        image::DynamicImage::new_rgb8(3, 2)
            .write_to(&mut bmp, image::ImageFormat::Bmp)
            .unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(bmp.into_inner());
        let u = user_message(&user(json!([img("image/png", &b64, None)]))).unwrap();
        assert_eq!(u.parts[0]["mediaType"], "image/png");
        let sent = base64::engine::general_purpose::STANDARD
            .decode(u.parts[0]["data"]["bytes"].as_str().unwrap())
            .unwrap();
        assert!(sent.starts_with(b"\x89PNG\r\n\x1a\n"));
    }

    #[test]
    fn filenames() {
        for ok in ["shot.png", "a b.jpg", "日本.png", "con2.png"] {
            assert!(is_safe_filename(ok), "{ok}");
        }
        for bad in [
            "", ".", "..", "a/b", "a\\b", "c:x", "x.", "x ", "CON", "con.txt", "com1.png",
            "LPT¹.x", "a\u{1}b", "a*b",
        ] {
            assert!(!is_safe_filename(bad), "{bad}");
        }
    }

    /// Issue 36 (1.0 request rules): content the kernel cannot take does not fail the run in
    /// 1.0 mode: it is left out and listed, and the rest goes to the kernel.
    #[test]
    fn media_the_kernel_cannot_take_is_skipped_and_listed_in_1_0_mode() {
        let content = json!([
            {"type":"text","text":"look"},
            {"type":"image","source":{"type":"url","value":"https://x/y.png"}},
            {"type":"image","source":{"type":"file","value":"file-1","provider":"openai"}},
            img("image/svg+xml", PNG_1X1, None),
            {"type":"audio","source":{"type":"data","value":"AAAA","mimeType":"audio/wav"}},
            {"type":"video","source":{"type":"url","value":"https://x/v.mp4"}},
            {"type":"document","source":{"type":"data","value":"JVBERi0=","mimeType":"application/pdf"}},
            {"type":"binary","mimeType":"image/png","data":PNG_1X1},
            {"type":"hologram"},
            img("image/png", PNG_1X1, None),
            // Regression (outside review): a format not decoded here (TIFF bytes under a PNG
            // label) was a 400 in 1.0 mode, as if the data were broken.
            img("image/png", "SUkqAAgAAAA=", None),
        ]);
        let mut skipped = Vec::new();
        let u = user_message_as(&user(content.clone()), &Dialect::V1_0, &mut skipped).unwrap();
        assert_eq!(u.parts.len(), 2, "{:?}", u.parts);
        assert_eq!(u.parts[0], json!({"text":"look"}));
        assert_eq!(u.parts[1]["mediaType"], "image/png");
        let reasons: Vec<(usize, &str)> = skipped
            .iter()
            .map(|s| (s.part.unwrap(), s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (1, "remote-media"),
                (2, "provider-file"),
                (3, "image-type-not-supported"),
                (4, "media-not-supported"),
                (5, "media-not-supported"),
                (6, "media-not-supported"),
                (7, "media-not-supported"),
                (10, "image-type-not-supported"),
            ]
        );
        assert!(
            skipped
                .iter()
                .all(|s| s.message_id.as_deref() == Some("u1"))
        );
        // The reference's rule in 0.1 mode: the first one refuses the message.
        assert_eq!(
            user_message(&user(content)),
            Err(Msg::RemoteMediaUnsupported)
        );
        // Nothing left to send: refused before the stream, not an empty message.
        let only = json!([{"type":"audio","source":{"type":"data","value":"AAAA","mimeType":"audio/wav"}}]);
        assert_eq!(
            user_message_as(&user(only), &Dialect::V1_0, &mut Vec::new()),
            Err(Msg::NothingTheAgentTakes)
        );
        // Regression: parts of unknown types only (listed by the envelope, not here) went to
        // the kernel as an empty message.
        assert_eq!(
            user_message_as(
                &user(json!([{"type":"hologram"}])),
                &Dialect::V1_0,
                &mut Vec::new()
            ),
            Err(Msg::NothingTheAgentTakes)
        );
        // 0.1 mode refuses a format not decoded here as the reference does.
        assert_eq!(
            user_message(&user(json!([img("image/png", "SUkqAAgAAAA=", None)]))),
            Err(Msg::ImageInvalid)
        );
        // Broken data of a type the kernel takes is still the client's error.
        assert_eq!(
            user_message_as(
                &user(json!([img("image/png", "@@@@", None)])),
                &Dialect::V1_0,
                &mut Vec::new()
            ),
            Err(Msg::ImageBadBase64)
        );
    }
}
