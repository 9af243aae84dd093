//! The last user message → A2A parts (reference §2.5), validated before the stream starts
//! (REC D6: the documented pre-SSE `INVALID_INPUT`, retryable with the same runId).
//!
//! Images are inline base64 PNG, JPEG, GIF or WebP, recognised by their bytes, with their
//! dimensions read from the header. Deviation: they are forwarded unchanged (no re-encoding
//! or down-scaling); the reference re-encodes large or exotic images with Pillow.

use base64::Engine;
use serde_json::{Value, json};

use crate::catalog::Msg;

pub const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_TOTAL_IMAGE_BYTES: usize = 10 * 1024 * 1024;
/// Pillow's decompression-bomb limit, which the reference inherits.
pub const MAX_IMAGE_PIXELS: u64 = 178_956_970;

/// The last user message: its id and its A2A parts.
#[derive(Debug, Clone, PartialEq)]
pub struct UserMessage {
    pub message_id: String,
    pub parts: Vec<Value>,
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
                if bytes.len() > MAX_IMAGE_BYTES {
                    return Err(Msg::ImageTooLarge);
                }
                total += bytes.len();
                if total > MAX_TOTAL_IMAGE_BYTES {
                    return Err(Msg::ImagesTooLarge);
                }
                let info = sniff(&bytes)?;
                if u64::from(info.width) * u64::from(info.height) > MAX_IMAGE_PIXELS
                    || info.width == 0
                    || info.height == 0
                {
                    return Err(Msg::ImageInvalid);
                }
                let filename = item
                    .get("metadata")
                    .and_then(|m| m.get("filename"))
                    .and_then(Value::as_str)
                    .filter(|f| f.len() <= 255 && is_safe_filename(f))
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("agui-image-{}", parts.len() + 1));
                parts.push(json!({"data": {"filename": filename, "bytes": b64}, "mediaType": info.media_type}));
            }
            _ => return Err(Msg::OnlyTextAndImages),
        }
    }
    Ok(parts)
}

/// What the image bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    pub media_type: &'static str,
    pub width: u32,
    pub height: u32,
}

fn be16(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])))
}

fn le16(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?])))
}

fn le24(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from(*b.get(i)?) | u32::from(*b.get(i + 1)?) << 8 | u32::from(*b.get(i + 2)?) << 16)
}

/// Recognise an image by its bytes and read its dimensions from the header.
pub fn sniff(b: &[u8]) -> Result<ImageInfo, Msg> {
    let invalid = Msg::ImageInvalid;
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        if b.get(12..16) != Some(b"IHDR") {
            return Err(invalid);
        }
        let w = u32::from_be_bytes(
            b.get(16..20)
                .ok_or(invalid)?
                .try_into()
                .map_err(|_| invalid)?,
        );
        let h = u32::from_be_bytes(
            b.get(20..24)
                .ok_or(invalid)?
                .try_into()
                .map_err(|_| invalid)?,
        );
        return Ok(ImageInfo {
            media_type: "image/png",
            width: w,
            height: h,
        });
    }
    if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        let w = le16(b, 6).ok_or(invalid)?;
        let h = le16(b, 8).ok_or(invalid)?;
        return Ok(ImageInfo {
            media_type: "image/gif",
            width: w,
            height: h,
        });
    }
    if b.starts_with(b"\xFF\xD8\xFF") {
        let (w, h) = jpeg_size(b).ok_or(invalid)?;
        return Ok(ImageInfo {
            media_type: "image/jpeg",
            width: w,
            height: h,
        });
    }
    if b.len() >= 16 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        let (w, h) = webp_size(b).ok_or(invalid)?;
        return Ok(ImageInfo {
            media_type: "image/webp",
            width: w,
            height: h,
        });
    }
    if b.starts_with(b"BM") || b.starts_with(b"II*\0") || b.starts_with(b"MM\0*") {
        // Decodable elsewhere, but only the four web formats are forwarded unchanged.
        return Err(Msg::ImageTypeUnsupported);
    }
    Err(invalid)
}

fn jpeg_size(b: &[u8]) -> Option<(u32, u32)> {
    let mut i = 2;
    loop {
        // Skip fill bytes, find the next marker.
        while *b.get(i)? != 0xFF {
            i += 1;
        }
        while *b.get(i)? == 0xFF {
            i += 1;
        }
        let marker = *b.get(i)?;
        i += 1;
        match marker {
            0xD8 | 0x01 | 0xD0..=0xD7 => continue,
            0xD9 | 0xDA => return None, // end of image or scan data before any frame header
            _ => {}
        }
        let len = be16(b, i)? as usize;
        if len < 2 {
            return None;
        }
        // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
        if (0xC0..=0xCF).contains(&marker) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
            let h = be16(b, i + 3)?;
            let w = be16(b, i + 5)?;
            return Some((w, h));
        }
        i += len;
    }
}

fn webp_size(b: &[u8]) -> Option<(u32, u32)> {
    let chunk = b.get(12..16)?;
    let d = 20;
    match chunk {
        b"VP8 " => {
            // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height.
            if b.get(d + 3..d + 6)? != [0x9d, 0x01, 0x2a] {
                return None;
            }
            Some((le16(b, d + 6)? & 0x3fff, le16(b, d + 8)? & 0x3fff))
        }
        b"VP8L" => {
            if *b.get(d)? != 0x2f {
                return None;
            }
            let bits = u32::from_le_bytes(b.get(d + 1..d + 5)?.try_into().ok()?);
            Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
        }
        b"VP8X" => Some((le24(b, d + 4)? + 1, le24(b, d + 7)? + 1)),
        _ => None,
    }
}

const RESERVED: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "COM¹", "COM²", "COM³", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8",
    "LPT9", "LPT¹", "LPT²", "LPT³",
];

/// The reference's "safe filename, unchanged" rule.
pub fn is_safe_filename(f: &str) -> bool {
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
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_IMAGE_BYTES + 1]);
        assert_eq!(
            user_message(&user(json!([img("image/png", &big, None)]))),
            Err(Msg::ImageTooLarge)
        );
    }

    #[test]
    fn sniffing_reads_dimensions() {
        let png = base64::engine::general_purpose::STANDARD
            .decode(PNG_1X1)
            .unwrap();
        assert_eq!(
            sniff(&png).unwrap(),
            ImageInfo {
                media_type: "image/png",
                width: 1,
                height: 1
            }
        );
        let gif = b"GIF89a\x10\x00\x20\x00\x00\x00\x00;";
        assert_eq!(
            sniff(gif).unwrap(),
            ImageInfo {
                media_type: "image/gif",
                width: 16,
                height: 32
            }
        );
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00,
            0x30, 0x00, 0x40, 0x03,
        ];
        assert_eq!(
            sniff(&jpeg).unwrap(),
            ImageInfo {
                media_type: "image/jpeg",
                width: 64,
                height: 48
            }
        );
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0".to_vec();
        webp.extend_from_slice(&[0x0f, 0, 0, 0x07, 0, 0]);
        assert_eq!(
            sniff(&webp).unwrap(),
            ImageInfo {
                media_type: "image/webp",
                width: 16,
                height: 8
            }
        );
        assert_eq!(sniff(b"BM\0\0"), Err(Msg::ImageTypeUnsupported));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF]), Err(Msg::ImageInvalid));
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
