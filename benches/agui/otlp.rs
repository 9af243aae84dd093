//! The cost of `--otlp-endpoint` when the collector is dead (issue 44): adapter CPU per event
//! of the same flood with the export off and with it on against a port where nothing
//! listens (each export a refused connection, its spans dropped), runs alternated.
//! `cargo bench --bench agui -- otlp`.

use super::{Add, Proc, adapter, flood_through, median, state_dir};

pub fn figures(k: &Proc, add: &mut Add<'_>) {
    // A port that was free a moment ago: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(9);
    let endpoint = format!("http://127.0.0.1:{dead}");
    let (dir_off, dir_on) = (state_dir("otlp-off"), state_dir("otlp-on"));
    let off = adapter(k, &[], &dir_off);
    let on = adapter(k, &["--otlp-endpoint", &endpoint], &dir_on);
    let n = 200_000;
    let (mut cpu_off, mut cpu_on) = (Vec::new(), Vec::new());
    for i in 0..3 {
        cpu_off.push(flood_through(&off, &dir_off, n, &format!("otlp-off{i}")).1);
        cpu_on.push(flood_through(&on, &dir_on, n, &format!("otlp-on{i}")).1);
    }
    let (off_us, on_us) = (median(cpu_off) * 1e6, median(cpu_on) * 1e6);
    add(
        "adapter CPU per event, OTLP export off (µs)",
        format!("{off_us:.2}"),
        "",
        None,
        off_us,
    );
    add(
        "adapter CPU per event, OTLP export to a dead collector (µs)",
        format!("{on_us:.2}"),
        "within 0.5 µs of off (the VM's noise)",
        Some(on_us <= off_us + 0.5),
        on_us,
    );
}
