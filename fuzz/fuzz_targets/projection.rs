//! Arbitrary A2A payload sequences through the projection mapper: no panic, and after
//! `close_all` every span is balanced.
#![no_main]
use std::collections::BTreeSet;

use iac_agui::a2a::types::Payload;
use iac_agui::adapter::env::TestEnv;
use iac_agui::adapter::projection::Mapper;
use iac_agui::agui::events::check_spans;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let env = TestEnv::new(1);
    let mut steps = BTreeSet::new();
    steps.insert("step:resumed".to_string());
    let mut m = Mapper::new(&env, "t", "r", steps, BTreeSet::new());
    m.reopen_pipeline_steps();
    let mut all = m.take();
    for (i, item) in items.into_iter().enumerate() {
        if i % 7 == 6 {
            m.pipeline_recovery(&item);
        } else if let Payload::Event(e) = Payload::from_value(item) {
            m.map(&e, i % 5 != 4, i % 3 != 2);
            let _ = iac_agui::adapter::interrupts::inputs(&e);
        }
        all.extend(m.take());
    }
    m.close_all();
    all.extend(m.take());
    if let Err(e) = check_spans(&all) {
        panic!("{e}");
    }
    for ev in &all {
        let json = ev.to_json();
        assert!(serde_json::from_slice::<serde_json::Value>(&json).is_ok());
    }
});
