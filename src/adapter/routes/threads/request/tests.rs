use super::*;
use crate::i18n::Lang;

/// Every refusal names its field, in every language.
fn names_field(e: &FieldError, want: &str) {
    assert_eq!(e.path, want);
    for lang in Lang::ALL {
        let shown = if want.is_empty() { "body" } else { want };
        assert!(e.message(lang).contains(&format!("`{shown}`")), "{lang:?}");
    }
}

/// A thread route as the head decides it.
fn work(route: &'static str, method: &'static str, id: Option<&str>, query: &str) -> ExtraWork {
    ExtraWork {
        extra: super::super::EXTRA,
        route,
        method,
        body: None,
        id: id.map(str::to_string),
        query: query.into(),
    }
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
fn a_path_id_is_bounded_and_printable() {
    let long = "x".repeat(crate::limits::MAX_ID_BYTES + 1);
    for bad in [long.as_str(), "t\u{202e}"] {
        for (route, method) in [
            (THREAD, "GET"),
            (THREAD, "PATCH"),
            (MESSAGES, "GET"),
            (THREAD, "DELETE"),
        ] {
            let w = work(route, method, Some(bad), "");
            let Err(BodyError::Field(e)) = ThreadsQuery::parse(&w, br#"{"title":"x"}"#) else {
                panic!("{w:?}");
            };
            assert_eq!(e.problem, Problem::Id);
            names_field(&e, "threadId");
        }
    }
}

#[test]
fn titles_and_searches_refuse_bidi_controls_and_search_folds_case() {
    let rename = |title: &str| {
        let body = format!(r#"{{"title":{}}}"#, json(title));
        ThreadsQuery::parse(&work(THREAD, "PATCH", Some("t"), ""), body.as_bytes())
    };
    for bad in ["a\u{202e}gnp.exe", "x\u{2067}y", "\u{200f}", "\u{61c}"] {
        let Err(BodyError::Field(e)) = rename(bad) else {
            panic!("{bad:?}");
        };
        names_field(&e, "title");
    }
    // Joiners and tags stay: emoji need them.
    for ok in [
        "👨\u{200d}👩\u{200d}👧 family",
        "🏴\u{e0067}\u{e0062}\u{e0073}\u{e0063}\u{e0074}\u{e007f}",
    ] {
        assert!(rename(ok).is_ok(), "{ok:?}");
    }
    let list = |q: &str| ThreadsQuery::parse(&work(LIST, "GET", None, &format!("q={q}")), b"");
    let Err(BodyError::Field(e)) = list("a%E2%80%AEb") else {
        panic!("an override in q");
    };
    names_field(&e, "q");
    let Ok(ThreadsQuery::List { filter, .. }) = list(" STRASSE ") else {
        panic!("q");
    };
    assert_eq!(filter.q.as_deref(), Some("strasse"));
}
