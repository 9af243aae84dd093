use std::os::unix::fs::PermissionsExt;

use super::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iac-agui-audit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn rec(n: usize) -> Vec<u8> {
    format!("{{\"n\":{n}}}\n").into_bytes()
}

#[test]
fn records_are_appended_whole_with_mode_0600() {
    let d = scratch("append");
    let p = d.join("audit.jsonl");
    let (f, rec0) = AuditFile::open(&p, 1 << 20, 3).unwrap();
    assert_eq!(rec0, Recovered::default());
    f.append(&rec(1)).unwrap();
    f.append(&rec(2)).unwrap();
    assert_eq!(
        lines(&p),
        vec![serde_json::json!({"n": 1}), serde_json::json!({"n": 2})]
    );
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Reopened, it goes on after what is there.
    drop(f);
    let (f, _) = AuditFile::open(&p, 1 << 20, 3).unwrap();
    f.append(&rec(3)).unwrap();
    assert_eq!(lines(&p).len(), 3);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_existing_file_with_a_wider_mode_is_narrowed_to_0600() {
    let d = scratch("mode");
    let p = d.join("audit.jsonl");
    std::fs::write(&p, rec(1)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _ = AuditFile::open(&p, 1 << 20, 3).unwrap();
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_torn_last_line_is_set_aside_at_start_up() {
    let d = scratch("torn");
    let p = d.join("audit.jsonl");
    let mut bytes = rec(1);
    bytes.extend(rec(2));
    bytes.extend(b"{\"n\":3,\"cut");
    std::fs::write(&p, &bytes).unwrap();
    let (f, r) = AuditFile::open(&p, 1 << 20, 3).unwrap();
    assert_eq!(r.torn_bytes, 11);
    assert_eq!(lines(&p).len(), 2);
    assert_eq!(
        std::fs::read(with_suffix(&p, ".torn")).unwrap(),
        b"{\"n\":3,\"cut\n"
    );
    f.append(&rec(4)).unwrap();
    assert_eq!(lines(&p).last().unwrap()["n"], 4);
    // A file that is nothing but a torn line.
    std::fs::write(&p, b"{\"half").unwrap();
    let (_, r) = AuditFile::open(&p, 1 << 20, 3).unwrap();
    assert_eq!(r.torn_bytes, 6);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_torn_line_longer_than_a_read_block_is_found() {
    let d = scratch("torn-long");
    let p = d.join("audit.jsonl");
    let mut bytes = rec(1);
    bytes.extend(vec![b'x'; 200 * 1024]);
    std::fs::write(&p, &bytes).unwrap();
    let (_, r) = AuditFile::open(&p, 1 << 30, 3).unwrap();
    assert_eq!(r.torn_bytes, 200 * 1024);
    assert_eq!(lines(&p).len(), 1);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_file_rotates_by_size_and_keeps_n_files() {
    let d = scratch("rotate");
    let p = d.join("audit.jsonl");
    let one = rec(0).len() as u64;
    // Two records per file.
    let (f, _) = AuditFile::open(&p, 2 * one, 2).unwrap();
    for n in 0..7 {
        f.append(&rec(n)).unwrap();
    }
    let n_of =
        |p: &Path| -> Vec<u64> { lines(p).iter().map(|v| v["n"].as_u64().unwrap()).collect() };
    assert_eq!(n_of(&p), vec![6]);
    assert_eq!(n_of(&with_suffix(&p, ".1")), vec![4, 5]);
    assert_eq!(n_of(&with_suffix(&p, ".2")), vec![2, 3]);
    assert!(!with_suffix(&p, ".3").exists());
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn keep_zero_drops_the_full_file() {
    let d = scratch("keep0");
    let p = d.join("audit.jsonl");
    let one = rec(0).len() as u64;
    let (f, _) = AuditFile::open(&p, one, 0).unwrap();
    for n in 0..3 {
        f.append(&rec(n)).unwrap();
    }
    assert_eq!(lines(&p), vec![serde_json::json!({"n": 2})]);
    assert!(!with_suffix(&p, ".1").exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_full_disk_is_an_error_and_leaves_nothing() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        return;
    }
    let (f, r) = AuditFile::open(full, 1 << 20, 3).unwrap();
    assert_eq!(r, Recovered::default());
    let e = f.append(&rec(1)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(28), "ENOSPC: {e}");
}

#[test]
fn an_unopenable_path_is_an_error() {
    let d = scratch("missing");
    assert!(AuditFile::open(&d.join("no/such/dir/audit.jsonl"), 1, 1).is_err());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_removed_file_is_made_again_at_its_path_and_rotation_goes_on() {
    let d = scratch("removed");
    let p = d.join("audit.jsonl");
    let one = rec(0).len() as u64;
    // Three records per file.
    let (f, _) = AuditFile::open(&p, 3 * one, 2).unwrap();
    f.append(&rec(1)).unwrap();
    std::fs::remove_file(&p).unwrap();
    // Not into the unlinked inode: a new file at the path, mode 0600.
    f.append(&rec(2)).unwrap();
    f.append(&rec(3)).unwrap();
    assert_eq!(
        lines(&p),
        vec![serde_json::json!({"n": 2}), serde_json::json!({"n": 3})]
    );
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Removed again when the next record is due to rotate it: nothing to rotate, no error.
    f.append(&rec(4)).unwrap();
    std::fs::remove_file(&p).unwrap();
    f.append(&rec(5)).unwrap();
    f.append(&rec(6)).unwrap();
    f.append(&rec(7)).unwrap();
    f.append(&rec(8)).unwrap();
    let n_of =
        |p: &Path| -> Vec<u64> { lines(p).iter().map(|v| v["n"].as_u64().unwrap()).collect() };
    assert_eq!(n_of(&p), vec![8]);
    assert_eq!(n_of(&with_suffix(&p, ".1")), vec![5, 6, 7]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_file_replaced_under_the_server_is_followed_and_a_non_file_refused() {
    let d = scratch("replaced");
    let p = d.join("audit.jsonl");
    let (f, _) = AuditFile::open(&p, 1 << 20, 2).unwrap();
    f.append(&rec(1)).unwrap();
    // An outside rotation: renamed away, a new file (wider mode) at the path.
    std::fs::rename(&p, d.join("old")).unwrap();
    std::fs::write(&p, rec(2)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    f.append(&rec(3)).unwrap();
    assert_eq!(lines(&d.join("old")), vec![serde_json::json!({"n": 1})]);
    assert_eq!(
        lines(&p),
        vec![serde_json::json!({"n": 2}), serde_json::json!({"n": 3})]
    );
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A directory in its place: refused, and taken up again once a file can be made there.
    std::fs::remove_file(&p).unwrap();
    std::fs::create_dir(&p).unwrap();
    assert!(f.append(&rec(4)).is_err());
    std::fs::remove_dir(&p).unwrap();
    f.append(&rec(5)).unwrap();
    assert_eq!(lines(&p), vec![serde_json::json!({"n": 5})]);
    let _ = std::fs::remove_dir_all(&d);
}
