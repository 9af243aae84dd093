//! Workspace (`cwd`) rules (reference §2.3): absolute after `~`, normalised, resolved through
//! symlinks, inside an allowed root, a directory (created when missing).
//!
//! Deviation (REC D16): `$VAR` in a client-supplied path is *not* expanded; it stays literal,
//! so the environment cannot be used to steer the path.

use std::path::{Component, Path, PathBuf};

use crate::catalog::Msg;

/// The allowed roots: `IAC_CODE_AGUI_ALLOWED_CWDS`, else `IACCODE_A2A_ALLOWED_CWDS` (split on
/// `:`, `~` expanded, resolved, only existing directories kept), else the process cwd and the
/// temp dir.
pub(crate) fn allowed_roots(get: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let raw = get("IAC_CODE_AGUI_ALLOWED_CWDS")
        .filter(|s| !s.is_empty())
        .or_else(|| get("IACCODE_A2A_ALLOWED_CWDS").filter(|s| !s.is_empty()));
    let home = get("HOME");
    match raw {
        Some(list) => list
            .split(':')
            .filter(|s| !s.is_empty())
            .filter_map(|item| {
                let p = expand_user(item, home.as_deref())?;
                let r = std::fs::canonicalize(p).ok()?;
                r.is_dir().then_some(r)
            })
            .collect(),
        None => {
            let tmp = get("TMPDIR")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            [std::env::current_dir().ok(), Some(tmp)]
                .into_iter()
                .flatten()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect()
        }
    }
}

fn expand_user(raw: &str, home: Option<&str>) -> Option<PathBuf> {
    if raw == "~" {
        return home.map(PathBuf::from);
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        return home.map(|h| Path::new(h).join(rest));
    }
    Some(PathBuf::from(raw))
}

/// Lexical normalisation like Python `os.path.normpath` for absolute paths.
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `realpath` without `strict`: symlinks resolved for the part that exists, the missing tail
/// appended as is.
fn resolve(logical: &Path) -> std::io::Result<PathBuf> {
    let mut existing = logical.to_path_buf();
    let mut tail: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if std::fs::symlink_metadata(&existing).is_ok() {
            let mut r = std::fs::canonicalize(&existing)?;
            for t in tail.iter().rev() {
                r.push(t);
            }
            return Ok(r);
        }
        match (
            existing.file_name().map(|s| s.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                existing = parent.to_path_buf();
            }
            _ => return Err(std::io::Error::other("no existing ancestor")),
        }
    }
}

/// Resolve and check a workspace; creates it when missing. Returns the resolved path string.
pub(crate) fn resolve_cwd(raw: &str, roots: &[PathBuf], home: Option<&str>) -> Result<String, Msg> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(Msg::CwdNotAbsolute);
    }
    let expanded = expand_user(raw, home).ok_or(Msg::CwdNotAbsolute)?;
    if !expanded.is_absolute() {
        return Err(Msg::CwdNotAbsolute);
    }
    let logical = normalise(&expanded);
    let resolved = resolve(&logical).map_err(|_| Msg::CwdInvalid)?;
    if !roots.iter().any(|root| resolved.starts_with(root)) {
        return Err(Msg::CwdOutsideRoots);
    }
    match std::fs::metadata(&resolved) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(Msg::CwdNotDirectory),
        Err(_) => {
            std::fs::create_dir_all(&resolved).map_err(|_| Msg::CwdCreateFailed)?;
            // The reference creates it silently; a mistyped path then becomes a new, empty
            // workspace with nothing to tell why the agent sees no files.
            log::warn!(
                "created the workspace {} (it did not exist; if the path is mistyped, the run \
                 works in this new, empty directory)",
                resolved.display()
            );
        }
    }
    resolved
        .into_os_string()
        .into_string()
        .map_err(|_| Msg::CwdInvalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("iac-agui-cwd-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::canonicalize(d).unwrap()
    }

    #[test]
    fn workspace_rules() {
        let root = tmp("root");
        let outside = tmp("outside");
        let roots = vec![root.clone()];
        let r = root.to_str().unwrap();
        assert_eq!(resolve_cwd(r, &roots, None).unwrap(), r);
        // Missing directories under a root are created.
        let new = format!("{r}/a/b");
        assert_eq!(resolve_cwd(&new, &roots, None).unwrap(), new);
        assert!(Path::new(&new).is_dir());
        // Lexical `..` cannot climb out.
        assert_eq!(
            resolve_cwd(&format!("{r}/a/../../x"), &roots, None),
            Err(Msg::CwdOutsideRoots)
        );
        assert_eq!(
            resolve_cwd("relative/x", &roots, None),
            Err(Msg::CwdNotAbsolute)
        );
        assert_eq!(resolve_cwd("", &roots, None), Err(Msg::CwdNotAbsolute));
        assert_eq!(
            resolve_cwd("$HOME/x", &roots, Some("/home/u")),
            Err(Msg::CwdNotAbsolute)
        );
        assert_eq!(
            resolve_cwd("/etc/x", &roots, None),
            Err(Msg::CwdOutsideRoots)
        );
        // `~` expands to HOME.
        assert_eq!(resolve_cwd("~", &roots, Some(r)).unwrap(), r);
        // A file is not a workspace.
        std::fs::write(root.join("f"), b"x").unwrap();
        assert_eq!(
            resolve_cwd(&format!("{r}/f"), &roots, None),
            Err(Msg::CwdNotDirectory)
        );
        // A symlink inside the root pointing outside is caught by the realpath check.
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        assert_eq!(
            resolve_cwd(&format!("{r}/escape/sub"), &roots, None),
            Err(Msg::CwdOutsideRoots)
        );
        // Variables stay literal (a directory named `$HOME` inside the root).
        let lit = format!("{r}/$HOME");
        assert_eq!(resolve_cwd(&lit, &roots, Some("/etc")).unwrap(), lit);
        // Very long paths are refused, not a crash.
        let long = format!("{r}/{}", "x".repeat(5000));
        assert!(resolve_cwd(&long, &roots, None).is_err());
        // No roots: everything is refused.
        assert_eq!(resolve_cwd(r, &[], None), Err(Msg::CwdOutsideRoots));
        let _ = std::fs::remove_dir_all(root);
        let _ = std::fs::remove_dir_all(outside);
    }

    #[test]
    fn roots_from_the_environment() {
        let a = tmp("ra");
        let list = format!("{}::/nonexistent/zz", a.display());
        let roots = allowed_roots(|k| (k == "IAC_CODE_AGUI_ALLOWED_CWDS").then(|| list.clone()));
        assert_eq!(roots, vec![a.clone()]);
        let roots = allowed_roots(|k| {
            (k == "IACCODE_A2A_ALLOWED_CWDS").then(|| "/nonexistent/q".to_string())
        });
        assert!(roots.is_empty());
        let roots = allowed_roots(|_| None);
        assert!(roots.len() >= 2);
        let _ = std::fs::remove_dir_all(a);
    }
}
