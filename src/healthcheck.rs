//! `iac-agui healthcheck [URL] [server options]`: GET the server's `/health` and exit 0 on 200,
//! else 1 (2 for unusable options). For container health checks in an image without a shell
//! or curl.

use std::ffi::OsString;
use std::net::ToSocketAddrs;
use std::process::ExitCode;

use crate::config::{self, Command};
use crate::startup::{EXIT_FAILURE, EXIT_USAGE};

/// The health URL of the server that `args` (the server's own options: flags, environment,
/// `--config`) describe: its port on loopback, or on its address when it listens on one.
fn health_url(args: Vec<OsString>, env: &config::Environ) -> Result<String, String> {
    let cfg = match config::parse(args, env, crate::extras::EXTRAS) {
        Ok(Command::Serve(c)) => c,
        Ok(_) => return Err("options only, no --help or --version".into()),
        Err(e) => return Err(e.to_string()),
    };
    if cfg.port == 0 {
        return Err("the server's port is 0 (any free port): give the URL".into());
    }
    let host = match cfg.host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() && ip.is_ipv6() => "[::1]".to_string(),
        Ok(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        Ok(ip) => ip.to_string(),
        Err(_) => cfg.host.clone(),
    };
    Ok(format!("http://{host}:{}/health", cfg.port))
}

/// The path to GET for a URL's path: the URL's own when it already ends in `/health`, else
/// `/health` under it. Users give the base URL their clients are given (`http://host:8000`,
/// with or without the `/`, or a proxy's prefix), whose own path answers 405 to a GET.
pub(crate) fn probe_path(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    if path.ends_with("/health") {
        return path.to_string();
    }
    format!("{}/health", path.trim_end_matches('/'))
}

/// The `healthcheck` subcommand; `args` follow the word `healthcheck`. Without a URL it
/// checks the server the same options, environment and `--config` describe. `/health` is
/// answered whatever the `Host`, so `--allowed-hosts` does not get in the way.
pub(crate) fn main(args: impl Iterator<Item = OsString>, env: &config::Environ) -> ExitCode {
    let mut args: Vec<OsString> = args.collect();
    let given = args
        .first()
        .and_then(|a| a.to_str())
        .filter(|a| !a.starts_with('-'))
        .map(str::to_string);
    if given.is_some() {
        args.remove(0);
    }
    let url = match given.map_or_else(|| health_url(args, env), Ok) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("iac-agui healthcheck: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let Some((authority, path)) = crate::authority::http_url(&url) else {
        eprintln!("iac-agui healthcheck: {url}: only http:// URLs are supported");
        return ExitCode::from(EXIT_USAGE);
    };
    let path = probe_path(path);
    let probed = format!("http://{authority}{path}");
    match status(authority, &path) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("iac-agui healthcheck: {probed}: status {status}");
            ExitCode::from(EXIT_FAILURE)
        }
        Err(e) => {
            eprintln!("iac-agui healthcheck: {probed}: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// The status of one `GET path` to `authority`, each step bounded by 3 s.
fn status(authority: &str, path: &str) -> Result<u16, String> {
    use std::io::{Read, Write};
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or("no address")?;
    let timeout = std::time::Duration::from_secs(3);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| "not an HTTP answer".to_string())
}

#[cfg(test)]
mod tests {
    use super::probe_path;

    #[test]
    fn the_probe_path_is_health_under_the_base_url() {
        for (given, probed) in [
            ("", "/health"),
            ("/", "/health"),
            ("/health", "/health"),
            ("/agui", "/agui/health"),
            ("/agui/", "/agui/health"),
            ("/agui/health", "/agui/health"),
            ("/?x=1", "/health"),
            ("/health?x=1", "/health"),
            ("?x", "/health"),
        ] {
            assert_eq!(probe_path(given), probed, "{given:?}");
        }
    }
}
