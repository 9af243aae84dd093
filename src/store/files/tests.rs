use super::*;
use crate::store::document::Execution;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iac-agui-store-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn doc(tid: &str) -> ThreadDoc {
    ThreadDoc {
        thread_id: tid.into(),
        context_id: "agui-x".into(),
        cwd: "/w".into(),
        execution: Execution {
            execution_id: "e1".into(),
            ros_invocation_id: "r".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn save_load_modes_and_lock() {
    let d = dir("basic");
    let s = FileStore::open(&d).unwrap();
    assert_eq!(s.load(&ThreadKey::shared("t1")).unwrap(), None);
    s.save(&doc("t1")).unwrap();
    assert_eq!(s.load(&ThreadKey::shared("t1")).unwrap(), Some(doc("t1")));
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&s.path_for(&ThreadKey::shared("t1"))), 0o600);
    assert_eq!(mode(&d), 0o700);
    assert_eq!(mode(&d.join("threads")), 0o700);
    // A second process (here: a second open) is refused while the lock is held.
    assert!(
        FileStore::open(&d)
            .unwrap_err()
            .contains("another iac-agui process")
    );
    drop(s);
    assert!(FileStore::open(&d).is_ok());
    let _ = fs::remove_dir_all(d);
}

#[test]
fn symlinks_and_garbage_are_refused() {
    let d = dir("evil");
    let s = FileStore::open(&d).unwrap();
    let target = d.join("elsewhere.json");
    fs::write(&target, doc("t2").to_bytes()).unwrap();
    std::os::unix::fs::symlink(&target, s.path_for(&ThreadKey::shared("t2"))).unwrap();
    assert!(matches!(
        s.load(&ThreadKey::shared("t2")),
        Err(StoreError::Invalid(_))
    ));
    fs::write(s.path_for(&ThreadKey::shared("t3")), b"{not json").unwrap();
    assert!(matches!(
        s.load(&ThreadKey::shared("t3")),
        Err(StoreError::Invalid(_))
    ));
    fs::write(
        s.path_for(&ThreadKey::shared("t4")),
        doc("other").to_bytes(),
    )
    .unwrap();
    assert!(matches!(
        s.load(&ThreadKey::shared("t4")),
        Err(StoreError::Invalid(_))
    ));
    let _ = fs::remove_dir_all(d);
}

#[test]
fn stale_temp_files_are_removed_on_open() {
    let d = dir("stale");
    let s = FileStore::open(&d).unwrap();
    fs::write(d.join("threads/.t.json.deadbeef.tmp"), b"half").unwrap();
    drop(s);
    let _s = FileStore::open(&d).unwrap();
    assert!(!d.join("threads/.t.json.deadbeef.tmp").exists());
    let _ = fs::remove_dir_all(d);
}

#[test]
fn state_root_rules() {
    let get = |pairs: Vec<(&'static str, &'static str)>| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        state_root(None, get(vec![("HOME", "/h")])),
        PathBuf::from("/h/.iac-code/agui")
    );
    assert_eq!(
        state_root(
            None,
            get(vec![("HOME", "/h"), ("IAC_CODE_CONFIG_DIR", "~/cfg")])
        ),
        PathBuf::from("/h/cfg/agui")
    );
    assert_eq!(
        state_root(
            Some(Path::new("/s")),
            get(vec![("IAC_CODE_CONFIG_DIR", "/c")])
        ),
        PathBuf::from("/s")
    );
}

#[test]
fn state_dir_expands_variables_like_python() {
    let env = |k: &str| match k {
        "HOME" => Some("/h".to_string()),
        "BASE" => Some("/srv/agui".to_string()),
        _ => None,
    };
    assert_eq!(
        state_root(Some(Path::new("$BASE/state")), env),
        PathBuf::from("/srv/agui/state")
    );
    assert_eq!(
        state_root(Some(Path::new("${BASE}x")), env),
        PathBuf::from("/srv/aguix")
    );
    assert_eq!(
        state_root(None, |k: &str| match k {
            "IAC_CODE_CONFIG_DIR" => Some("~/$SUB".into()),
            "SUB" => Some("conf".into()),
            "HOME" => Some("/h".into()),
            _ => None,
        }),
        PathBuf::from("/h/conf/agui")
    );
    for kept in ["/a/$UNSET/b", "/a/$", "/a/${BASE", "/a/${}", "/a/$-x"] {
        assert_eq!(expand_vars(kept, env), kept);
    }
    assert_eq!(expand_vars("$BASE$BASE", env), "/srv/agui/srv/agui");
}

#[test]
fn missing_parent_directories_are_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let base = dir("parents");
    let root = base.join("config").join("agui");
    let store = FileStore::open(&root).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&base.join("config")), 0o700, "the config directory");
    assert_eq!(mode(&root), 0o700);
    drop(store);
    let _ = fs::remove_dir_all(&base);
}

#[test]
fn a_new_principals_first_saves_at_once_all_succeed() {
    // Regression (issue 45, item 3): the principal's directory was made through one fixed
    // temp name with no lock, so concurrent first runs failed with EEXIST or ENOENT.
    let d = dir("principals-at-once");
    let s = std::sync::Arc::new(FileStore::open(&d).unwrap());
    for p in 0..20 {
        let caller = Caller::named(format!("p{p}").as_bytes()).unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let saves: Vec<_> = (0..8)
            .map(|i| {
                let (s, caller, barrier) = (s.clone(), caller.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut doc = doc(&format!("t{i}"));
                    doc.owner = caller;
                    barrier.wait();
                    s.save(&doc)
                })
            })
            .collect();
        for h in saves {
            h.join().unwrap().unwrap();
        }
        assert_eq!(
            s.callers().iter().filter(|c| **c == caller).count(),
            1,
            "{caller:?} has its name file"
        );
    }
    let _ = fs::remove_dir_all(d);
}
