use super::*;

fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let env = Environ::from_pairs(env.iter().copied());
    let mut argv = vec![OsString::from("iac-agui")];
    argv.extend(args.iter().map(OsString::from));
    match parse(argv.into_iter().skip(1), &env, crate::extras::EXTRAS)? {
        // What `cli::main` does next: each extra reads its own settings, and amends the core's.
        Command::Serve(mut c) => {
            let extras = crate::extras::configure(&c.sources)?;
            crate::extras::amend(&extras, &mut c);
            Ok(*c)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn defaults() {
    let c = run(&[], &[]).unwrap();
    assert_eq!(c.host, "127.0.0.1");
    assert_eq!(c.port, 8000);
    assert_eq!(c.agui_protocol, AguiProtocol::V0_1);
}

#[test]
fn precedence_flag_env_file() {
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "port: 7000\nhost: 10.0.0.1\nauth-token: filetok\n").unwrap();
    let f = file.to_str().unwrap();
    let c = run(&["--config", f], &[]).unwrap();
    assert_eq!((c.port, c.host.as_str()), (7000, "10.0.0.1"));
    assert_eq!(c.auth_token.as_deref(), Some("filetok"));
    let c = run(
        &["--config", f],
        &[
            ("IAC_CODE_AGUI_PORT", "7100"),
            ("IAC_CODE_AGUI_AUTH_TOKEN", "envtok"),
        ],
    )
    .unwrap();
    assert_eq!(c.port, 7100);
    assert_eq!(c.auth_token.as_deref(), Some("envtok"));
    let c = run(
        &["--config", f, "--port", "7200"],
        &[("IAC_CODE_AGUI_PORT", "7100")],
    )
    .unwrap();
    assert_eq!(c.port, 7200);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_values_are_errors() {
    assert!(run(&["--port", "70000"], &[]).is_err());
    assert!(run(&["--port", "x"], &[]).is_err());
    assert!(run(&["--idle-shutdown", "-1"], &[]).is_err());
    assert!(run(&["--agui-protocol", "2.0"], &[]).is_err());
    assert!(run(&["--bogus"], &[]).is_err());
    assert!(run(&["--config", "/nonexistent/iac-agui.yaml"], &[]).is_err());
    assert!(run(&["--a2a-url", "http://10.1.2.3:8000/"], &[]).is_err());
    assert!(run(&[], &[("IAC_CODE_AGUI_A2A_URL", "http://example.com/")]).is_err());
    assert_eq!(
        run(&["--a2a-url", "http://localhost:9/x"], &[])
            .unwrap()
            .a2a_url
            .as_deref(),
        Some("http://localhost:9/x/")
    );
}

#[test]
fn interrupt_ttl_is_accepted_with_one_warning() {
    // Regression: service files of the reference pass --interrupt-ttl; it made us exit 2.
    for (args, env) in [
        (vec!["--interrupt-ttl", "600"], vec![]),
        (vec![], vec![("IAC_CODE_AGUI_INTERRUPT_TTL", "600")]),
    ] {
        let c = run(&args, &env).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("interrupt"));
    }
    assert!(run(&[], &[]).unwrap().warnings.is_empty());
}

#[test]
fn unknown_config_keys_are_named_in_a_warning() {
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "port: 7000\nprot: 1\ninterrupt-ttl: 60\n").unwrap();
    let c = run(&["--config", file.to_str().unwrap()], &[]).unwrap();
    assert_eq!(c.port, 7000);
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(c.warnings.iter().any(|w| w.contains("prot ")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn allowed_hosts_from_flag_env_and_file() {
    let c = run(&["--allowed-hosts", "a.test, b.test"], &[]).unwrap();
    assert_eq!(
        c.allowed_hosts,
        Some(vec!["a.test".to_string(), "b.test".to_string()])
    );
    let c = run(&[], &[("IAC_CODE_AGUI_ALLOWED_HOSTS", "*")]).unwrap();
    assert_eq!(c.allowed_hosts, Some(vec!["*".to_string()]));
    assert_eq!(run(&[], &[]).unwrap().allowed_hosts, None);
    assert!(run(&["--allowed-hosts", " , "], &[]).is_err());
}

#[test]
fn protocol_from_env() {
    let c = run(&[], &[("IAC_CODE_AGUI_PROTOCOL", "1.0")]).unwrap();
    assert_eq!(c.agui_protocol, AguiProtocol::V1_0);
}

/// The README's option table says what the option table says: the same flags, environment
/// names and config keys, row for row.
#[test]
fn the_readme_option_table_matches_the_option_table() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("| Flag | Environment | Config key | Default |")
        .expect("the README has its option table");
    let token = |cell: &str, pick: &dyn Fn(&str) -> bool| {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .find(|t| pick(t))
            .map(str::to_string)
    };
    type Row = (Option<String>, Option<String>, Option<String>, String);
    let mut rows: Vec<Row> = readme[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            assert!(cells.len() >= 5, "{l}");
            (
                token(cells[0], &|t| t.starts_with("--")).map(|f| {
                    f.split_whitespace()
                        .next()
                        .unwrap_or("")
                        .trim_start_matches("--")
                        .to_string()
                }),
                token(cells[1], &|t| t.starts_with("IAC_")),
                token(cells[2], &|t| !t.is_empty()),
                cells[cells.len() - 1]
                    .trim_end_matches(" |")
                    .trim()
                    .to_string(),
            )
        })
        .collect();
    // Each option's feature: `core`, or the extra whose rows hold it.
    let feature = |o: &Opt| {
        crate::extras::EXTRAS
            .iter()
            .find(|e| e.options.iter().any(|x| x.key == o.key))
            .map_or("core", |e| e.feature)
            .to_string()
    };
    let mut table: Vec<Row> = options::every(crate::extras::EXTRAS)
        .map(|o| {
            (
                o.flag.map(str::to_string),
                o.env.map(str::to_string),
                o.file.then(|| o.key.to_string()),
                feature(o),
            )
        })
        .collect();
    rows.sort();
    table.sort();
    assert_eq!(rows, table);
}

#[test]
fn every_flag_in_the_table_parses_and_the_help_names_it() {
    let help = help(crate::extras::EXTRAS);
    for o in options::all(crate::extras::EXTRAS) {
        if let Some(f) = o.flag {
            assert!(help.contains(&format!("--{f}")), "{f} is not in the help");
        }
        if let Some(e) = o.env {
            assert!(help.contains(e), "{e} is not in the help");
        }
    }
    // A switch and a valued flag from the table, and something not in it.
    let c = run(&["-d", "--max-runs", "7"], &[]).unwrap();
    assert!(c.debug);
    assert_eq!(c.max_runs, 7);
    assert!(run(&["--no-such-flag"], &[]).is_err());
}

#[test]
fn the_output_budget_is_a_byte_count_of_at_least_one() {
    assert_eq!(run(&[], &[]).unwrap().output_budget, limits::OUTPUT_BUDGET);
    let c = run(&["--output-budget", "8388608"], &[]).unwrap();
    assert_eq!(c.output_budget, 8 << 20);
    assert!(run(&["--output-budget", "0"], &[]).is_err());
}

#[test]
fn the_metrics_token_is_a_secret() {
    let c = run(&[], &[("IAC_CODE_AGUI_METRICS_TOKEN", "m")]).unwrap();
    assert_eq!(c.metrics_token.as_deref(), Some("m"));
    // A secret has no flag (flags show up in `ps`).
    assert!(run(&["--metrics-token", "m"], &[]).is_err());
}

/// Issue 46.10: errors named the flag whatever the source, and showed `2.0` as `2`.
#[test]
fn errors_name_where_the_value_came_from_and_show_it_as_written() {
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-src-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        "# settings\nport: 7000\nagui_protocol: 2.0\nmax-runs: 0\ndebug: maybe\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let err = |args: &[&str], env: &[(&str, &str)]| run(args, env).err().unwrap().0;
    assert_eq!(
        err(&["--config", f], &[]),
        format!("agui_protocol (config file {f}, line 3) must be 0.1 or 1.0, not 2.0.")
    );
    assert_eq!(
        err(&["--config", f], &[("IAC_CODE_AGUI_PROTOCOL", "2.0")]),
        "IAC_CODE_AGUI_PROTOCOL must be 0.1 or 1.0, not \"2.0\"."
    );
    assert_eq!(
        err(&["--config", f, "--agui-protocol", "2.0"], &[]),
        "--agui-protocol must be 0.1 or 1.0, not \"2.0\"."
    );
    let ok = ["--config", f, "--agui-protocol", "1.0"];
    assert_eq!(
        err(&ok, &[]),
        format!("max_runs (config file {f}, line 4) must be at least 1, not 0.")
    );
    assert_eq!(
        err(&[&ok[..], &["--max-runs", "3"]].concat(), &[]),
        format!("debug (config file {f}, line 5) must be true or false, not maybe.")
    );
    std::fs::write(&file, "port: 80.5\n").unwrap();
    assert_eq!(
        err(&["--config", f], &[]),
        format!("port (config file {f}, line 1) must be an integer, not 80.5.")
    );
    assert_eq!(
        err(&[], &[("IAC_CODE_AGUI_PORT", "70000")]),
        "IAC_CODE_AGUI_PORT must be a port from 0 to 65535, not \"70000\"."
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A number given to a text setting is the text as written: a token `0123` is not `123`.
#[test]
fn a_number_given_to_a_text_setting_is_read_as_written() {
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "auth_token: 0123\nagui_protocol: 1.0\nhost: 1_0\n").unwrap();
    let c = run(&["--config", file.to_str().unwrap()], &[]).unwrap();
    assert_eq!(c.auth_token.as_deref(), Some("0123"));
    assert_eq!(c.agui_protocol, AguiProtocol::V1_0);
    assert_eq!(c.host, "1_0");
    // A secret's error never quotes it.
    std::fs::write(&file, "auth_token: yes\n").unwrap();
    let e = run(&["--config", file.to_str().unwrap()], &[])
        .err()
        .unwrap()
        .0;
    assert!(
        e.starts_with("auth_token (config file ") && !e.contains("yes"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cors")]
#[test]
fn cors_origins_come_from_the_flag_the_environment_or_the_file_normalised() {
    let origins = |c: &Config| {
        let x = crate::extras::configure(&c.sources).unwrap();
        x.cors.map(|c| c.origins).unwrap_or_default()
    };
    let c = run(
        &[
            "--cors-origins",
            "HTTP://Localhost:5173, https://app.example:443",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(
        origins(&c),
        ["http://localhost:5173", "https://app.example"]
    );
    let c = run(
        &[],
        &[("IAC_CODE_AGUI_CORS_ORIGINS", "http://127.0.0.1:3000")],
    )
    .unwrap();
    assert_eq!(origins(&c), ["http://127.0.0.1:3000"]);
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-cors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "cors_origins: http://localhost:8080\n").unwrap();
    let c = run(&["--config", file.to_str().unwrap()], &[]).unwrap();
    assert_eq!(origins(&c), ["http://localhost:8080"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(origins(&run(&[], &[]).unwrap()).is_empty());
    for bad in ["*", " , ", "http://localhost:5173/app"] {
        let e = run(&["--cors-origins", bad], &[]).unwrap_err();
        assert!(e.0.starts_with("--cors-origins"), "{e}");
    }
}

#[cfg(feature = "audit")]
#[test]
fn the_audit_log_options_come_from_a_flag_the_environment_or_the_file() {
    let audit = |c: &Config| crate::extras::configure(&c.sources).unwrap().audit;
    assert!(audit(&run(&[], &[]).unwrap()).is_none());
    let a = audit(
        &run(
            &["--audit-log", "/var/log/a.jsonl", "--audit-keep", "0"],
            &[("IAC_CODE_AGUI_AUDIT_MAX_BYTES", "4096")],
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(a.path, std::path::Path::new("/var/log/a.jsonl"));
    assert_eq!((a.max_bytes, a.keep), (4096, 0));
    let a = audit(&run(&["--audit-log", "/var/log/a.jsonl"], &[]).unwrap()).unwrap();
    assert_eq!((a.max_bytes, a.keep), (104_857_600, 5));
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "audit_log: /srv/audit.jsonl\naudit_keep: 9\n").unwrap();
    let a = audit(&run(&["--config", file.to_str().unwrap()], &[]).unwrap()).unwrap();
    assert_eq!(a.path, std::path::Path::new("/srv/audit.jsonl"));
    assert_eq!(a.keep, 9);
    std::fs::remove_dir_all(&dir).unwrap();
    let e = run(&["--audit-keep", "101"], &[]).unwrap_err();
    assert_eq!(e.0, "--audit-keep must be from 0 to 100, not \"101\".");
    assert!(run(&["--audit-max-bytes", "0"], &[]).is_err());
    assert!(run(&[], &[("IAC_CODE_AGUI_AUDIT_KEEP", "-1")]).is_err());
}

#[cfg(feature = "otlp")]
#[test]
fn an_otlp_endpoint_off_this_host_needs_its_allowing_option() {
    let endpoint = |c: &Config| {
        let x = crate::extras::configure(&c.sources).unwrap();
        x.otlp.map(|o| o.endpoint)
    };
    let c = run(&["--otlp-endpoint", "http://127.0.0.1:4318/"], &[]).unwrap();
    assert_eq!(endpoint(&c).as_deref(), Some("http://127.0.0.1:4318"));
    let e = run(
        &[],
        &[("IAC_CODE_AGUI_OTLP_ENDPOINT", "http://otel.example:4318")],
    )
    .unwrap_err();
    assert!(e.0.starts_with("IAC_CODE_AGUI_OTLP_ENDPOINT "), "{e}");
    assert!(e.0.contains("--otlp-allow-remote"), "{e}");
    let c = run(
        &[
            "--otlp-allow-remote",
            "--otlp-endpoint",
            "http://otel.example:4318",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(endpoint(&c).as_deref(), Some("http://otel.example:4318"));
    let e = run(&["--otlp-endpoint", "https://127.0.0.1:4318"], &[]).unwrap_err();
    assert!(e.0.starts_with("--otlp-endpoint "), "{e}");
    assert_eq!(endpoint(&run(&[], &[]).unwrap()), None);
}

#[cfg(feature = "demo")]
#[test]
fn a_config_files_state_dir_is_not_the_demos() {
    // Issue 57: `--config` with a `state_dir` and `--demo` put the demo's threads in the
    // configured (real) directory. The file's value is set aside, with a warning; the flag and
    // the variable still choose the demo's directory.
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "state_dir: /srv/agui\n").unwrap();
    let f = file.to_str().unwrap();
    let c = run(&["--config", f], &[]).unwrap();
    assert_eq!(c.state_dir, Some(PathBuf::from("/srv/agui")));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = run(&["--config", f, "--demo"], &[]).unwrap();
    assert_eq!(c.state_dir, None);
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0].starts_with(&format!(
            "state_dir (config file {f}, line 1) is not used by --demo"
        )),
        "{:?}",
        c.warnings
    );
    let c = run(&["--config", f, "--demo", "--state-dir", "/tmp/d"], &[]).unwrap();
    assert_eq!(c.state_dir, Some(PathBuf::from("/tmp/d")));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = run(
        &["--config", f, "--demo"],
        &[("IAC_CODE_AGUI_STATE_DIR", "/tmp/e")],
    )
    .unwrap();
    assert_eq!(c.state_dir, Some(PathBuf::from("/tmp/e")));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // `demo: true` in the same file: the same rule.
    std::fs::write(&file, "state_dir: /srv/agui\ndemo: true\n").unwrap();
    let c = run(&["--config", f], &[]).unwrap();
    assert_eq!(c.state_dir, None);
    assert!(
        c.warnings[0].contains("is not used by demo (config file"),
        "{:?}",
        c.warnings
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 58: a flag, a variable or a config-file key of an extra this build lacks refuses
/// start-up with one line naming it and the feature — never silently ignored (an operator who
/// asked for an audit log must not run without one). In a build with the extra, the same
/// settings are its own (they parse, or fail on their value, never as lacking). Run in both
/// builds (`cargo test` and `cargo test --no-default-features`).
#[test]
fn an_extras_options_are_refused_by_name_in_a_build_without_it() {
    let dir = std::env::temp_dir().join(format!("iac-agui-lacking-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut tried = 0;
    for extra in crate::extras::EXTRAS {
        for o in extra.options {
            let value = if o.value.is_some() { "1" } else { "true" };
            let mut given: Vec<(String, Result<Config, ConfigError>)> = Vec::new();
            if let Some(flag) = o.flag {
                let mut args = vec![format!("--{flag}")];
                if o.value.is_some() {
                    args.push(value.into());
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                given.push((format!("--{flag}"), run(&args, &[])));
            }
            if let Some(env) = o.env {
                given.push((env.to_string(), run(&[], &[(env, value)])));
            }
            if o.file {
                let file = dir.join(format!("{}.yaml", o.key));
                std::fs::write(&file, format!("{}: {value}\n", o.key)).unwrap();
                let f = file.to_str().unwrap();
                given.push((o.key.to_string(), run(&["--config", f], &[])));
            }
            for (name, got) in given {
                tried += 1;
                match (extra.built, got) {
                    (false, Err(e)) => {
                        assert!(
                            e.0.starts_with(&name) && e.0.contains(&format!("`{}`", extra.feature)),
                            "{name}: {e}"
                        );
                        assert!(!e.0.contains('\n'), "one line: {e}");
                    }
                    (false, Ok(_)) => panic!("{name} of `{}` was accepted", extra.feature),
                    (true, Err(e)) => assert!(!e.0.contains("lacks"), "{name}: {e}"),
                    (true, Ok(_)) => {}
                }
            }
        }
    }
    assert!(tried > 0);
    // What a build lacks is not offered in its help.
    let help = help(crate::extras::EXTRAS);
    for extra in crate::extras::EXTRAS.iter().filter(|e| !e.built) {
        for f in extra.options.iter().filter_map(|o| o.flag) {
            assert!(!help.contains(&format!("--{f} ")), "--{f} is in the help");
        }
    }
}

/// `--demo` (feature `demo`) amends the core's settings and brings the console; the demo
/// kernel alone is a port given on the command line only.
#[cfg(feature = "demo")]
#[test]
fn the_demo_serves_the_console_with_a_grace_and_refuses_another_kernel() {
    let extras = |c: &Config| crate::extras::configure(&c.sources).unwrap();
    let c = run(&["--demo"], &[]).unwrap();
    assert!(extras(&c).console.is_some());
    assert_eq!(c.disconnect_grace, limits::DEMO_DISCONNECT_GRACE);
    let c = run(&["--demo", "--disconnect-grace", "0"], &[]).unwrap();
    assert_eq!(c.disconnect_grace, Duration::ZERO);
    let c = run(&[], &[]).unwrap();
    assert!(extras(&c).console.is_none() && extras(&c).demo.is_none());
    assert_eq!(c.disconnect_grace, limits::DISCONNECT_GRACE);
    // Its workspace: the first allowed root, unless one is given.
    let root = std::env::temp_dir().canonicalize().unwrap();
    let roots = [("IAC_CODE_AGUI_ALLOWED_CWDS", root.to_str().unwrap())];
    let c = run(&["--demo"], &roots).unwrap();
    assert_eq!(c.default_cwd.as_deref(), root.to_str());
    assert_eq!(run(&[], &roots).unwrap().default_cwd, None);
    let e = run(&["--demo", "--a2a-url", "http://127.0.0.1:1/"], &[]).unwrap_err();
    assert_eq!(e.0, "--demo and --a2a-url cannot be combined.");
    let c = run(&["--demo-kernel-only", "0"], &[]).unwrap();
    let x = extras(&c);
    assert!(crate::extras::instead(&x).is_some() && x.console.is_none());
    assert!(crate::extras::instead(&extras(&run(&["--demo"], &[]).unwrap())).is_none());
    let e = run(&["--demo-kernel-only", "70000"], &[]).unwrap_err();
    assert_eq!(
        e.0,
        "--demo-kernel-only must be a port from 0 to 65535, not \"70000\"."
    );
}

/// `--console` (feature `console`): its switch, its variable (as a switch's words) or the file.
#[cfg(feature = "console")]
#[test]
fn the_console_is_served_by_its_switch_its_variable_or_the_file() {
    let on = |args: &[&str], env: &[(&str, &str)]| {
        let c = run(args, env).unwrap();
        crate::extras::configure(&c.sources)
            .unwrap()
            .console
            .is_some()
    };
    assert!(!on(&[], &[]));
    assert!(on(&["--console"], &[]));
    for v in ["1", "true", "Yes", " on "] {
        assert!(on(&[], &[("IAC_CODE_AGUI_CONSOLE", v)]), "{v}");
    }
    assert!(!on(&[], &[("IAC_CODE_AGUI_CONSOLE", "0")]));
    let dir = std::env::temp_dir().join(format!("iac-agui-cfg-console-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "console: true\n").unwrap();
    assert!(on(&["--config", file.to_str().unwrap()], &[]));
    std::fs::write(&file, "console: maybe\n").unwrap();
    assert!(run(&["--config", file.to_str().unwrap()], &[]).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
