//! Inline image validation and normalisation (reference §2.5 steps 5–6), by the reference's
//! thresholds and media types; the re-encoded bytes differ from Pillow's (REC: byte identity
//! is not achievable).
//!
//! Decoding is strict (truncated or corrupt data is invalid) and refuses more than Pillow's
//! decompression-bomb limit of pixels. Runs on a call thread (admission), never the loop; one
//! image at a time process-wide, so peak memory is one decoded image, not one per run.

use std::io::Cursor;
use std::sync::Mutex;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};

use crate::limits;
pub use crate::limits::{MAX_FORWARD_BYTES, MAX_IMAGE_SIDE};

const JPEG_QUALITIES: [u8; 4] = [80, 60, 40, 20];

/// An image ready for the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    pub(crate) media_type: &'static str,
    /// `None`: forward the original bytes unchanged.
    pub bytes: Option<Vec<u8>>,
    pub width: u32,
    pub height: u32,
}

/// Why an image was refused (both map to "the image data is invalid").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Decode `data` strictly and decide what the kernel receives.
pub fn normalize(data: &[u8]) -> Result<Normalized, Invalid> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (format, img) = decode(data)?;
    let (w, h) = (img.width(), img.height());
    let web = match format {
        ImageFormat::Png => Some("image/png"),
        ImageFormat::Jpeg => Some("image/jpeg"),
        ImageFormat::Gif => Some("image/gif"),
        ImageFormat::WebP => Some("image/webp"),
        _ => None,
    };
    let fits = |len: usize| len <= MAX_FORWARD_BYTES && w <= MAX_IMAGE_SIDE && h <= MAX_IMAGE_SIDE;
    let is_png = match web {
        Some(t) if fits(data.len()) => {
            return Ok(Normalized {
                media_type: t,
                bytes: None,
                width: w,
                height: h,
            });
        }
        Some(_) => format == ImageFormat::Png,
        None => {
            // Any other decodable format (BMP) becomes PNG, then follows the PNG rules.
            let png = encode_png(&img, false)?;
            if fits(png.len()) {
                return Ok(Normalized {
                    media_type: "image/png",
                    bytes: Some(png),
                    width: w,
                    height: h,
                });
            }
            true
        }
    };
    let small = if w > MAX_IMAGE_SIDE || h > MAX_IMAGE_SIDE {
        thumbnail(&img, MAX_IMAGE_SIDE)
    } else {
        img
    };
    if is_png {
        let png = encode_png(&small, true)?;
        if png.len() <= MAX_FORWARD_BYTES {
            return Ok(done("image/png", png, &small));
        }
    }
    let rgb = DynamicImage::ImageRgb8(small.to_rgb8());
    for q in JPEG_QUALITIES {
        let jpeg = encode_jpeg(&rgb, q)?;
        if jpeg.len() <= MAX_FORWARD_BYTES {
            return Ok(done("image/jpeg", jpeg, &rgb));
        }
    }
    let tiny = thumbnail(&rgb, limits::FALLBACK_IMAGE_SIDE);
    let jpeg = encode_jpeg(&tiny, 20)?;
    if jpeg.len() <= MAX_FORWARD_BYTES {
        return Ok(done("image/jpeg", jpeg, &tiny));
    }
    Err(Invalid)
}

fn done(media_type: &'static str, bytes: Vec<u8>, img: &DynamicImage) -> Normalized {
    Normalized {
        media_type,
        bytes: Some(bytes),
        width: img.width(),
        height: img.height(),
    }
}

/// The format recognised from the bytes and the first frame, decoded strictly.
/// The bytes are of a format decoded here (PNG, JPEG, GIF, WebP, BMP), whatever their label
/// says; whether they are whole is `normalize`'s to find.
pub fn decodable_format(data: &[u8]) -> bool {
    ImageReader::new(Cursor::new(data))
        .with_guessed_format()
        .ok()
        .and_then(|r| r.format())
        .is_some_and(is_decoded)
}

fn is_decoded(format: ImageFormat) -> bool {
    matches!(
        format,
        ImageFormat::Png
            | ImageFormat::Jpeg
            | ImageFormat::Gif
            | ImageFormat::WebP
            | ImageFormat::Bmp
    )
}

fn decode(data: &[u8]) -> Result<(ImageFormat, DynamicImage), Invalid> {
    let reader = ImageReader::new(Cursor::new(data))
        .with_guessed_format()
        .map_err(|_| Invalid)?;
    let format = reader.format().ok_or(Invalid)?;
    if !is_decoded(format) {
        return Err(Invalid);
    }
    if format == ImageFormat::Jpeg && !jpeg_is_complete(data) {
        return Err(Invalid);
    }
    let mut limits = image::Limits::default();
    // The pixel limit is checked below; allocation may reach that many RGBA pixels.
    limits.max_alloc = Some(limits::MAX_IMAGE_PIXELS * 4 + (1 << 20));
    let mut reader = reader;
    reader.limits(limits);
    let decoder = reader.into_decoder().map_err(|_| Invalid)?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 || u64::from(w) * u64::from(h) > limits::MAX_IMAGE_PIXELS {
        return Err(Invalid);
    }
    let img = DynamicImage::from_decoder(decoder).map_err(|_| Invalid)?;
    Ok((format, img))
}

/// Pillow refuses a JPEG whose entropy-coded data ends before the End Of Image marker; the
/// Rust decoder pads such data silently, so the marker is required here.
fn jpeg_is_complete(data: &[u8]) -> bool {
    // Trailing bytes after EOI are tolerated (cameras append data), as Pillow does.
    data.windows(2).rev().any(|w| w == [0xFF, 0xD9])
}

/// Scale down to fit `side`×`side`, keeping the aspect ratio (Pillow `thumbnail`, LANCZOS).
fn thumbnail(img: &DynamicImage, side: u32) -> DynamicImage {
    if img.width() <= side && img.height() <= side {
        return img.clone();
    }
    img.resize(side, side, image::imageops::FilterType::Lanczos3)
}

fn encode_png(img: &DynamicImage, best: bool) -> Result<Vec<u8>, Invalid> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let mut out = Vec::new();
    let enc = if best {
        PngEncoder::new_with_quality(&mut out, CompressionType::Best, FilterType::Adaptive)
    } else {
        PngEncoder::new(&mut out)
    };
    img.write_with_encoder(enc).map_err(|_| Invalid)?;
    Ok(out)
}

fn encode_jpeg(img: &DynamicImage, quality: u8) -> Result<Vec<u8>, Invalid> {
    let mut out = Vec::new();
    let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality);
    img.write_with_encoder(enc).map_err(|_| Invalid)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageBuffer, Rgb, RgbImage};

    /// Deterministic noise: incompressible enough to exercise the size branches.
    pub(crate) fn noise(w: u32, h: u32, seed: u32) -> RgbImage {
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
        ImageBuffer::from_fn(w, h, |_, _| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            Rgb([x as u8, (x >> 8) as u8, (x >> 16) as u8])
        })
    }

    fn flat(w: u32, h: u32) -> RgbImage {
        ImageBuffer::from_pixel(w, h, Rgb([10, 120, 200]))
    }

    pub(crate) fn encode(img: RgbImage, format: ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        DynamicImage::ImageRgb8(img)
            .write_to(&mut out, format)
            .unwrap();
        out.into_inner()
    }

    fn dims(n: &Normalized) -> (u32, u32) {
        (n.width, n.height)
    }

    #[test]
    fn small_web_images_are_forwarded_unchanged_with_the_detected_type() {
        for (format, t) in [
            (ImageFormat::Png, "image/png"),
            (ImageFormat::Jpeg, "image/jpeg"),
            (ImageFormat::Gif, "image/gif"),
            (ImageFormat::WebP, "image/webp"),
        ] {
            let n = normalize(&encode(flat(40, 30), format)).unwrap();
            assert_eq!(
                (n.media_type, n.bytes.is_none(), dims(&n)),
                (t, true, (40, 30))
            );
        }
    }

    #[test]
    fn bmp_is_re_encoded_as_png() {
        let n = normalize(&encode(flat(20, 10), ImageFormat::Bmp)).unwrap();
        assert_eq!(n.media_type, "image/png");
        let png = n.bytes.unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        assert_eq!(
            image::load_from_memory(&png).unwrap().to_rgb8(),
            flat(20, 10)
        );
    }

    #[test]
    fn large_sides_are_scaled_to_fit_2000() {
        // PNG: stays PNG (optimized) when that fits.
        let n = normalize(&encode(flat(4000, 1000), ImageFormat::Png)).unwrap();
        assert_eq!((n.media_type, dims(&n)), ("image/png", (2000, 500)));
        // JPEG input never becomes PNG.
        let n = normalize(&encode(flat(1000, 2600), ImageFormat::Jpeg)).unwrap();
        assert_eq!(n.media_type, "image/jpeg");
        assert_eq!(dims(&n), (769, 2000));
        let out = image::load_from_memory(n.bytes.as_ref().unwrap()).unwrap();
        assert_eq!((out.width(), out.height()), (769, 2000));
    }

    #[test]
    fn large_gif_and_webp_become_jpeg() {
        for format in [ImageFormat::Gif, ImageFormat::WebP] {
            let n = normalize(&encode(flat(2400, 100), format)).unwrap();
            assert_eq!(
                (n.media_type, dims(&n)),
                ("image/jpeg", (2000, 83)),
                "{format:?}"
            );
        }
    }

    #[test]
    fn too_many_bytes_within_2000_falls_back_to_jpeg() {
        // 1200×1200 noise as PNG is ~4.3 MB: over 3.75 MiB, sides already fit.
        let png = encode(noise(1200, 1200, 7), ImageFormat::Png);
        assert!(png.len() > MAX_FORWARD_BYTES, "{}", png.len());
        let n = normalize(&png).unwrap();
        assert_eq!((n.media_type, dims(&n)), ("image/jpeg", (1200, 1200)));
        assert!(n.bytes.unwrap().len() <= MAX_FORWARD_BYTES);
    }

    #[test]
    fn truncated_corrupt_and_bomb_images_are_invalid() {
        let png = encode(noise(64, 64, 1), ImageFormat::Png);
        assert_eq!(normalize(&png[..33]), Err(Invalid), "a 33-byte PNG");
        assert_eq!(normalize(&png[..png.len() - 20]), Err(Invalid));
        let jpeg = encode(noise(64, 64, 2), ImageFormat::Jpeg);
        assert_eq!(normalize(&jpeg[..jpeg.len() / 2]), Err(Invalid));
        let mut bad = png.clone();
        bad[100] ^= 0xff;
        assert_eq!(normalize(&bad), Err(Invalid), "a corrupt IDAT (CRC)");
        assert_eq!(normalize(b"hello"), Err(Invalid));
        assert_eq!(normalize(b""), Err(Invalid));
        // A PNG header claiming 20000×20000 = 400 M pixels: refused before any allocation.
        let mut bomb = encode(flat(1, 1), ImageFormat::Png);
        bomb[16..20].copy_from_slice(&20000u32.to_be_bytes());
        bomb[20..24].copy_from_slice(&20000u32.to_be_bytes());
        let crc = crc32(&bomb[12..29]);
        bomb[29..33].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(normalize(&bomb), Err(Invalid));
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut c = 0xffff_ffffu32;
        for b in data {
            c ^= u32::from(*b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
}
