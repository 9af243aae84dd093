//! Language negotiation (reference §1.7). The wording itself lives in `catalog.rs`.

/// The supported message languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lang {
    En,
    Zh,
    Es,
    Fr,
    De,
    Ja,
    Pt,
}

impl Lang {
    pub const ALL: [Lang; 7] = [
        Lang::En,
        Lang::Zh,
        Lang::Es,
        Lang::Fr,
        Lang::De,
        Lang::Ja,
        Lang::Pt,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
            Lang::Es => "es",
            Lang::Fr => "fr",
            Lang::De => "de",
            Lang::Ja => "ja",
            Lang::Pt => "pt",
        }
    }

    pub(crate) fn from_code(code: &str) -> Option<Lang> {
        Lang::ALL.into_iter().find(|l| l.code() == code)
    }
}

/// Server default language from the process environment: the first of `LANGUAGE`, `LC_ALL`,
/// `LC_MESSAGES`, `LANG` whose value starts with a supported code, else English.
pub(crate) fn server_default(get: impl Fn(&str) -> Option<String>) -> Lang {
    for var in ["LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"] {
        let Some(value) = get(var) else { continue };
        if value.is_empty() {
            continue;
        }
        let first = value.split('_').next().unwrap_or("");
        let first = first.split('.').next().unwrap_or("").to_lowercase();
        if let Some(l) = Lang::from_code(&first) {
            return l;
        }
    }
    Lang::En
}

/// `normalize(tag)`: strip, lowercase, `_`→`-`, keep the primary subtag if supported.
pub(crate) fn normalize(tag: &str) -> Option<Lang> {
    let t = tag.trim().to_lowercase().replace('_', "-");
    let primary = t.split('-').next().unwrap_or("");
    Lang::from_code(primary)
}

/// Python `float()` over a q-value: accepts what Rust accepts plus digit-separating
/// underscores (`1_0`); anything unparsable is quality 0.
fn python_float(s: &str) -> f64 {
    let s = s.trim();
    let cleaned;
    let s = if s.contains('_') {
        let b = s.as_bytes();
        let ok = b.iter().enumerate().all(|(i, &c)| {
            c != b'_'
                || (i > 0
                    && i + 1 < b.len()
                    && b[i - 1].is_ascii_digit()
                    && b[i + 1].is_ascii_digit())
        });
        if !ok {
            return 0.0;
        }
        cleaned = s.replace('_', "");
        cleaned.as_str()
    } else {
        s
    };
    s.parse::<f64>().unwrap_or(0.0)
}

/// The language chosen by an `Accept-Language` header (`default` is the server default `L0`).
pub fn header_language(accept: Option<&str>, default: Lang) -> Lang {
    let Some(accept) = accept else {
        return default;
    };
    let mut best: Option<(f64, Lang)> = None;
    for element in accept.split(',') {
        let mut segments = element.split(';').map(str::trim);
        let value = segments.next().unwrap_or("");
        let mut quality = 1.0;
        for seg in segments {
            if let Some((name, v)) = seg.split_once('=')
                && name.trim().to_lowercase() == "q"
            {
                quality = python_float(v);
                break;
            }
        }
        if !quality.is_finite() || quality <= 0.0 || quality > 1.0 {
            continue;
        }
        let lang = if value == "*" {
            Some(default)
        } else {
            normalize(value)
        };
        let Some(lang) = lang else { continue };
        if best.is_none_or(|(q, _)| quality > q) {
            best = Some((quality, lang));
        }
    }
    best.map_or(default, |(_, l)| l)
}

/// Payload language: `forwardedProps.iacCode.preferredLanguage` (camelCase keys only) when the
/// body has that shape, else the header language.
pub fn payload_language(body: &serde_json::Value, header: Lang) -> Lang {
    let pref = body
        .get("forwardedProps")
        .filter(|v| v.is_object())
        .and_then(|fp| fp.get("iacCode"))
        .filter(|v| v.is_object())
        .map(|ic| ic.get("preferredLanguage"));
    match pref {
        Some(Some(serde_json::Value::String(s))) => normalize(s).unwrap_or(header),
        _ => header,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_default_rules() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(server_default(env(&[("LANG", "zh_CN.UTF-8")])), Lang::Zh);
        assert_eq!(
            server_default(env(&[("LANG", "C.UTF-8"), ("LC_MESSAGES", "")])),
            Lang::En
        );
        assert_eq!(
            server_default(env(&[("LC_ALL", "C.UTF-8"), ("LANG", "fr_FR.UTF-8")])),
            Lang::Fr
        );
        assert_eq!(
            server_default(env(&[("LANGUAGE", "de"), ("LANG", "ja_JP")])),
            Lang::De
        );
        assert_eq!(server_default(env(&[])), Lang::En);
    }

    #[test]
    fn normalize_rules() {
        assert_eq!(normalize("pt-BR"), Some(Lang::Pt));
        assert_eq!(normalize(" zh_TW "), Some(Lang::Zh));
        assert_eq!(normalize("zh-Hant"), Some(Lang::Zh));
        assert_eq!(normalize("xx"), None);
        assert_eq!(normalize(""), None);
    }

    #[test]
    fn accept_language_table() {
        // The reference's observed examples (§1.7 / §9.1 #12) with L0 = es.
        let l0 = Lang::Es;
        let cases: &[(&str, Lang)] = &[
            ("de;q=0.5, zh-CN;q=0.9, *;q=1", Lang::Es),
            ("xx, ja;q=0.1", Lang::Ja),
            ("fr;q=2, pt;q=0", Lang::Es),
            ("es", Lang::Es),
            ("fr-CA, de;q=1", Lang::Fr),
            ("de;q=0.5, fr;q=0.5", Lang::De),
            ("de;q=0.5, fr;q=0.6", Lang::Fr),
            ("de;q=abc, fr;q=0.1", Lang::Fr),
            ("de;q=1e0", Lang::De),
            ("de;q=.5, ja;q=0.4", Lang::De),
            ("de;q=nan, ja;q=0.4", Lang::Ja),
            ("de;q=inf, ja;q=0.4", Lang::Ja),
            ("de;q=1_0, ja;q=0.4", Lang::Ja),
            ("de;Q=0.2;q=0.9, ja;q=0.4", Lang::Ja),
            ("de;x=1;q=0.9, ja;q=0.4", Lang::De),
            ("", Lang::Es),
            ("*", Lang::Es),
        ];
        for (header, want) in cases {
            assert_eq!(header_language(Some(header), l0), *want, "{header}");
        }
        assert_eq!(header_language(None, Lang::Zh), Lang::Zh);
    }

    #[test]
    fn payload_language_rules() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"forwardedProps":{"iacCode":{"preferredLanguage":"ja-JP"}}}"#)
                .unwrap();
        assert_eq!(payload_language(&v, Lang::Zh), Lang::Ja);
        let v: serde_json::Value =
            serde_json::from_str(r#"{"forwardedProps":{"iacCode":{"preferredLanguage":"xx"}}}"#)
                .unwrap();
        assert_eq!(payload_language(&v, Lang::Zh), Lang::Zh);
        let v: serde_json::Value =
            serde_json::from_str(r#"{"forwardedProps":{"iac_code":{"preferredLanguage":"ja"}}}"#)
                .unwrap();
        assert_eq!(payload_language(&v, Lang::Zh), Lang::Zh);
    }
}
