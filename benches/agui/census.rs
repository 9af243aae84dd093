//! Where an open stream's memory goes: the RSS split of `/proc/PID/smaps` (worker stacks,
//! heap, binary pages), and `cargo bench --bench agui -- census` (`make census`): the heap
//! by allocation site, from heaptrack's peak with 200 open streams.

use super::*;

/// Resident KiB by kind of mapping.
#[derive(Debug, Default, Clone)]
pub struct Split {
    /// malloc's: `[heap]` and every other anonymous mapping.
    pub heap: u64,
    /// File-backed pages (the binary, libc).
    pub file: u64,
    /// Resident KiB of each of the worker and call threads' stacks (1 MiB anonymous mappings,
    /// `WORKER_STACK_BYTES`).
    pub each_stack: Vec<u64>,
}

impl Split {
    pub fn stacks(&self) -> u64 {
        self.each_stack.iter().sum()
    }
}

pub fn split(pid: u32) -> Split {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out = Split::default();
    let mut kind = 0u8;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16))
        {
            let perms = f.next().unwrap_or("");
            let name = f.nth(3).unwrap_or("");
            kind = if name.starts_with('/') {
                2
            } else if name.starts_with('[') && name != "[heap]" {
                3
            } else if (hi - lo) == 1 << 20 && perms.starts_with("rw") {
                0
            } else {
                1
            };
        } else if first == "Rss:" {
            let kib: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            match kind {
                0 => out.each_stack.push(kib),
                1 => out.heap += kib,
                2 => out.file += kib,
                _ => {}
            }
        }
    }
    out
}

/// A legacy-mangled Rust symbol, readable enough to group by.
fn readable(sym: &str) -> String {
    let mut s = sym.trim().to_string();
    for (from, to) in [
        ("$LT$", "<"),
        ("$GT$", ">"),
        ("$u20$", " "),
        ("$RF$", "&"),
        ("$C$", ","),
        ("$u7b$", "{"),
        ("$u7d$", "}"),
        ("$LP$", "("),
        ("$RP$", ")"),
        ("..", "::"),
        ("_<", "<"),
    ] {
        s = s.replace(from, to);
    }
    if let Some(i) = s.rfind("::h")
        && s[i + 3..].len() == 16
        && s[i + 3..].bytes().all(|b| b.is_ascii_hexdigit())
    {
        s.truncate(i);
    }
    s
}

pub fn heap_census() {
    const K: usize = 200;
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if !have("heaptrack") || !have("heaptrack_print") {
        eprintln!("census: needs heaptrack (Debian: apt-get install heaptrack)");
        std::process::exit(1);
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/census");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let k = kernel();
    let dir = state_dir("census");
    let url = format!("http://{}/", k.addr);
    let profile = out.join("heap");
    let profile_arg = profile.to_string_lossy().into_owned();
    // Under heaptrack, with the tunables the server would re-execute itself with.
    let mut child = Command::new("heaptrack")
        .args([
            "-o",
            &profile_arg,
            super::bin(),
            "--port",
            "0",
            "--a2a-url",
            &url,
        ])
        .env("RUST_LOG", "warn")
        .env("IAC_CODE_AGUI_STATE_DIR", format!("{dir}/state"))
        .env("IAC_CODE_AGUI_ALLOWED_CWDS", &dir)
        .env(iac_agui::malloc::ORIGINAL, "")
        .env("GLIBC_TUNABLES", iac_agui::malloc::TUNABLES)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start heaptrack");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr: SocketAddr = loop {
        let line = lines.next().expect("a ready line").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.trim().trim_end_matches('/').parse().unwrap();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let (open, started) = open_streams(addr, &dir, K, "wait 30", "census");
    std::thread::sleep(Duration::from_secs(1));
    // SIGKILL: a graceful stop cancels every run's task, and that wind-down (each cancel's
    // answer read at once) would be the heap's peak instead of the open streams.
    // The server itself, not heaptrack's wrapper script around it.
    let _ = Command::new("pkill")
        .args([
            "-KILL",
            "-f",
            &format!("^{} --port 0 --a2a-url {url}", super::bin()),
        ])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.wait();
    drop(open);
    let data = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("heap."))
        .expect("a heaptrack profile");
    let stacks = out.join("peak.txt");
    let _ = Command::new("heaptrack_print")
        .arg("-f")
        .arg(&data)
        .args([
            "--print-peaks",
            "0",
            "--print-allocators",
            "0",
            "--print-temporary",
            "0",
            "--print-leaks",
            "0",
            "--flamegraph-cost-type",
            "peak",
            "-F",
        ])
        .arg(&stacks)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let text = std::fs::read_to_string(&stacks).expect("heaptrack_print's stacks");
    // Group by the innermost frame of this crate (the site that asked), and the first frame
    // below it outside the allocator.
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    let mut total = 0u64;
    for line in text.lines() {
        let Some((stack, bytes)) = line.rsplit_once(' ') else {
            continue;
        };
        let bytes: u64 = bytes.parse().unwrap_or(0);
        total += bytes;
        let frames: Vec<String> = stack
            .split(';')
            .map(|f| readable(f.split(" (").next().unwrap_or(f)))
            .filter(|f| !f.is_empty())
            .collect();
        let key = match frames.iter().rposition(|f| f.contains("iac_agui")) {
            Some(i) => {
                let below = frames[i + 1..]
                    .iter()
                    .find(|f| {
                        !f.starts_with("alloc::")
                            && !f.starts_with("_R")
                            && !f.contains("malloc")
                            && !f.contains("core::")
                    })
                    .map(|f| format!(" → {f}"))
                    .unwrap_or_default();
                format!("{}{below}", frames[i])
            }
            None => format!(
                "(outside the crate) {}",
                frames.last().cloned().unwrap_or_default()
            ),
        };
        *by.entry(key).or_default() += bytes;
    }
    let mut rows: Vec<(u64, String)> = by.into_iter().map(|(k, v)| (v, k)).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    println!(
        "heap at its peak with {started}/{K} open streams: {} B, {:.1} KiB per stream",
        total,
        total as f64 / K as f64 / 1024.0
    );
    println!(
        "{:>10}  site (innermost frame of the crate → what it called)",
        "B/stream"
    );
    for (bytes, site) in rows.iter().take(30) {
        let mut site = site.clone();
        site.truncate(150);
        println!("{:>10.0}  {site}", *bytes as f64 / K as f64);
    }
    println!("\nprofile: {}", data.display());
}
