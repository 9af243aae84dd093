//! Every captured kernel stream through the projection mapper: the AG-UI sequence (type plus
//! its id, delta or name) must equal the reviewed golden summary in
//! `tests/fixtures/projection/<capture>.txt`. `UPDATE_GOLDEN=1` rewrites them (review the diff).

use std::collections::BTreeSet;

use iac_agui::a2a::types::Payload;
use iac_agui::adapter::env::TestEnv;
use iac_agui::adapter::projection::Mapper;
use iac_agui::agui::events::check_spans;

fn summary(sse: &str) -> String {
    let env = TestEnv::new(0);
    let mut m = Mapper::new(&env, "th", "run", BTreeSet::new(), BTreeSet::new());
    let mut events = Vec::new();
    for line in sse.split("\r\n").filter_map(|l| l.strip_prefix("data: ")) {
        if let Payload::Event(e) = Payload::from_value(serde_json::from_str(line).unwrap()) {
            m.map(&e, true, true);
            events.extend(m.take());
        }
    }
    m.close_all();
    events.extend(m.take());
    check_spans(&events).unwrap();
    let mut out = String::new();
    for e in &events {
        let v: serde_json::Value = serde_json::from_slice(&e.to_json()).unwrap();
        let detail = ["stepName", "toolCallId", "messageId", "name"]
            .iter()
            .find_map(|k| v[*k].as_str())
            .unwrap_or("");
        let extra = v["delta"]
            .as_str()
            .or(v["content"].as_str())
            .or(v["value"]["eventType"].as_str())
            .unwrap_or("");
        out.push_str(&format!(
            "{} {} {}\n",
            v["type"].as_str().unwrap(),
            detail,
            extra.replace('\n', "\\n")
        ));
    }
    let usage: Vec<String> = m
        .usage()
        .iter()
        .map(|u| {
            format!(
                "{:?}/{:?} {} {} {} {}",
                u.provider,
                u.model,
                u.input_tokens,
                u.output_tokens,
                u.total_tokens,
                u.cached_input_tokens
            )
        })
        .collect();
    out.push_str(&format!("usage {}\n", usage.join("; ")));
    out
}

#[test]
fn every_captured_stream_projects_to_its_reviewed_sequence() {
    let update = iac_agui::config::Environ::capture()
        .get("UPDATE_GOLDEN")
        .is_some();
    let mut n = 0;
    let mut names: Vec<_> = std::fs::read_dir("tests/fixtures/a2a")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".response.sse"))
        .collect();
    names.sort();
    for path in names {
        let name = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".response.sse", "");
        let got = summary(&std::fs::read_to_string(&path).unwrap());
        let golden = std::path::Path::new("tests/fixtures/projection").join(format!("{name}.txt"));
        if update {
            std::fs::write(&golden, &got).unwrap();
        }
        let want = std::fs::read_to_string(&golden)
            .unwrap_or_else(|_| panic!("no golden file for {name}"));
        assert_eq!(got, want, "projection of {name} changed");
        n += 1;
    }
    assert!(n >= 15);
}
