//! The run language (A2A `preferredLanguage`, RUN_ERROR text) is the client's preference
//! whichever spelling of the containers and the key carried it (reference §1.7).

use crate::common;

use common::*;
use iac_agui::catalog::Msg;
use iac_agui::i18n::Lang;
use serde_json::{Value, json};

fn body(ws: &str, container: &str, iac: &str, key: &str) -> Value {
    let mut inner = json!({"schemaVersion": 1, "rosInvocationId": "ros-1", "cwd": ws});
    inner[key] = "ja-JP".into();
    let mut b = json!({
        "threadId": "th-lang", "runId": "run-1", "state": {}, "tools": [], "context": [],
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
    });
    b[container] = json!({ iac: inner });
    b
}

const SPELLINGS: [(&str, &str, &str); 8] = [
    ("forwardedProps", "iacCode", "preferredLanguage"),
    ("forwardedProps", "iacCode", "preferred_language"),
    ("forwardedProps", "iac_code", "preferredLanguage"),
    ("forwardedProps", "iac_code", "preferred_language"),
    ("forwarded_props", "iacCode", "preferredLanguage"),
    ("forwarded_props", "iacCode", "preferred_language"),
    ("forwarded_props", "iac_code", "preferredLanguage"),
    ("forwarded_props", "iac_code", "preferred_language"),
];

fn post(addr: std::net::SocketAddr, b: &Value) -> Vec<Value> {
    let r = post_json(
        addr,
        "/",
        &[("Accept-Language", "fr")],
        &serde_json::to_vec(b).unwrap(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    sse_events(&r.body).0
}

#[test]
fn every_alias_spelling_gives_the_same_run_language_upstream() {
    for (container, iac, key) in SPELLINGS {
        let dir = tempdir(&format!("lang-{container}-{iac}-{key}"));
        let done = json!({"task": {"id": "t1", "contextId": iac_agui::adapter::admission::context_id("th-lang"), "status": {"state": "TASK_STATE_COMPLETED"}}});
        let k = ScriptKernel::start(vec![Canned {
            expect: "SendStreamingMessage".into(),
            status: 200,
            content_type: "text/event-stream",
            body: sse_body(&[done]),
        }]);
        let server = adapter_for(&k.url, &dir);
        let events = post(
            server.addr,
            &body(&dir.to_string_lossy(), container, iac, key),
        );
        assert_eq!(
            last(&events)["type"],
            "RUN_FINISHED",
            "{container}.{iac}.{key}"
        );
        let reqs = k.requests.lock().unwrap();
        let sent = &reqs[0].1["params"]["message"]["metadata"]["iac_code"]["preferredLanguage"];
        assert_eq!(sent, "ja", "{container}.{iac}.{key}: {sent}");
        drop(reqs);
        server.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_alias_spelling_gives_the_same_run_error_language() {
    for (container, iac, key) in SPELLINGS {
        let dir = tempdir(&format!("lang-err-{container}-{iac}-{key}"));
        // Nothing listens there: the run ends with a localized A2A_UNAVAILABLE.
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/", l.local_addr().unwrap())
        };
        let server = adapter_for(&dead, &dir);
        let events = post(
            server.addr,
            &body(&dir.to_string_lossy(), container, iac, key),
        );
        let end = last(&events);
        assert_eq!(end["type"], "RUN_ERROR", "{container}.{iac}.{key}");
        assert_eq!(
            end["message"],
            Msg::A2aUnavailable.text(Lang::Ja),
            "{container}.{iac}.{key}"
        );
        server.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
