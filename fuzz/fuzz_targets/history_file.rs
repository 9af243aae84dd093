//! Conversation files and the tokens file: the strict readers never panic; an accepted
//! conversation survives a save → load round trip, and bounding it keeps it within its
//! bounds with one marker at most; a conversation log that replays takes a snapshot of
//! itself and one more record and replays to the same.
#![no_main]
use iac_agui::auth::TokenTable;
use iac_agui::conversation::{Bounds, TRIMMED_ID, Transcript, log};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = log::replay(data, "t") {
        let b = Bounds {
            max_messages: 3,
            max_bytes: 2048,
        };
        let (t, _) = r.bounded(b);
        let mut again = log::snapshot(&t);
        again.extend(log::cut(t.updated_at, "x"));
        let back = log::replay(&again, "t").expect("a snapshot replays");
        assert_eq!(back.bounded(b).0.messages, t.messages);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = TokenTable::parse(text);
    }
    if let Ok(mut t) = Transcript::from_bytes(data, "t") {
        let saved = t.to_bytes();
        let again = Transcript::from_bytes(&saved, "t").expect("a saved conversation loads");
        assert_eq!(again, t);
        let before = t.messages.len();
        t.add_input(&again.messages);
        assert_eq!(t.messages.len(), before, "restated messages are not added twice");
        let b = Bounds {
            max_messages: 3,
            max_bytes: 2048,
        };
        t.bound(b);
        let markers = t.messages.iter().filter(|m| m["id"] == TRIMMED_ID).count();
        assert!(markers <= 1);
        assert!(t.messages.len() - markers <= 3);
        Transcript::from_bytes(&t.to_bytes(), "t").expect("a bounded conversation loads");
    }
});
