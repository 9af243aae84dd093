//! The last user message → A2A parts (reference §2.5), validated before the stream starts
//! (REC D6: the documented pre-SSE `INVALID_INPUT`, retryable with the same runId).
//!
//! Images are decoded strictly and normalised by the reference's thresholds (`agui::image`).

use base64::Engine;
use serde_json::{Value, json};

use crate::catalog::Msg;
use crate::limits;

/// The last user message: its id and its A2A parts.
#[derive(Debug, Clone, PartialEq)]
pub struct UserMessage {
    pub(crate) message_id: String,
    pub(crate) parts: Vec<Value>,
}

pub fn user_message(messages: &[Value]) -> Result<UserMessage, Msg> {
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
    let parts = match m.get("content") {
        Some(Value::String(s)) => vec![json!({"text": s})],
        Some(Value::Array(items)) => to_parts(items)?,
        _ => return Err(Msg::UserMessageRequired),
    };
    Ok(UserMessage { message_id, parts })
}

fn to_parts(items: &[Value]) -> Result<Vec<Value>, Msg> {
    let mut parts = Vec::with_capacity(items.len());
    let mut total = 0usize;
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = item.get("text").and_then(Value::as_str).unwrap_or("");
                parts.push(json!({"text": t}));
            }
            Some("image") => {
                let src = item.get("source").unwrap_or(&Value::Null);
                if src.get("type").and_then(Value::as_str) != Some("data") {
                    return Err(Msg::RemoteMediaUnsupported);
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
                    return Err(Msg::ImageTypeUnsupported);
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
}
