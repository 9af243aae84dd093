use super::*;
use serde_json::json;

#[test]
fn states_normalise() {
    assert_eq!(
        TaskState::parse("TASK_STATE_INPUT_REQUIRED"),
        TaskState::InputRequired
    );
    assert_eq!(TaskState::parse(" working "), TaskState::Working);
    assert_eq!(TaskState::parse("auth_required"), TaskState::AuthRequired);
    assert_eq!(
        TaskState::parse("TASK_STATE_UNSPECIFIED"),
        TaskState::Other("unspecified".into())
    );
    assert!(TaskState::Canceled.is_terminal());
    assert!(TaskState::InputRequired.is_stop());
    assert!(!TaskState::Working.is_stop());
}

/// The shortcut for the kernel's spelling answers what the normalising read does.
#[test]
fn canonical_states_read_like_normalised_ones() {
    for name in [
        "SUBMITTED",
        "WORKING",
        "INPUT_REQUIRED",
        "COMPLETED",
        "CANCELED",
        "FAILED",
        "REJECTED",
        "AUTH_REQUIRED",
    ] {
        let raw = format!("TASK_STATE_{name}");
        assert_eq!(
            TaskState::canonical(&raw),
            Some(TaskState::normalised(&raw)),
            "{raw}"
        );
    }
    for other in ["TASK_STATE_UNSPECIFIED", "TASK_STATE_working", "WORKING"] {
        assert_eq!(TaskState::canonical(other), None, "{other}");
    }
}

#[test]
fn unwrapping() {
    let p = Payload::from_value(
        json!({"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}},"id":"x","jsonrpc":"2.0"}),
    );
    let Payload::Event(e) = p else { panic!() };
    assert_eq!(e.kind, Kind::StatusUpdate);
    assert_eq!(e.task_id(), Some("t"));
    assert_eq!(e.state(), Some(TaskState::Working));
    let p = Payload::from_value(
        json!({"result":{"id":"t2","contextId":"c","status":{"state":"TASK_STATE_CANCELED"}},"id":"x","jsonrpc":"2.0"}),
    );
    let Payload::Event(e) = p else { panic!() };
    assert_eq!((e.kind, e.task_id()), (Kind::Bare, Some("t2")));
}

#[test]
fn rpc_errors_are_never_tasks() {
    let p = Payload::from_value(
        json!({"error":{"code":-32602,"message":"Session backup is still synchronizing. Retry after 3 seconds.","data":{"code":"SESSION_BACKUP_NOT_READY","retryable":true}},"id":"abc","jsonrpc":"2.0"}),
    );
    let Payload::Error(e) = p else { panic!() };
    assert_eq!(e.code, Some(-32602));
    assert!(e.is_backup_not_ready());
    let p = Payload::from_value(
        json!({"error":{"code":-32001,"message":"Task not found","data":[{"reason":"TASK_NOT_FOUND"}]},"id":"abc","jsonrpc":"2.0"}),
    );
    let Payload::Error(e) = p else { panic!() };
    assert!(!e.is_backup_not_ready());
}

#[test]
fn session_id_sources() {
    let e = A2aEvent::new(
        Kind::StatusUpdate,
        json!({"metadata":{"iac_code":{"pipelineBatch":{"events":[{"x":1},{"iacCodeSessionId":"s3"}]}}}}),
    );
    assert_eq!(e.session_id(), Some("s3"));
}

#[test]
fn integers_accept_integral_floats_only() {
    let v: Value = serde_json::from_str(r#"[7, 7.0, 7.5, true, "7", 1e3, -0.0]"#).unwrap();
    let got: Vec<Option<i64>> = v.as_array().unwrap().iter().map(as_int).collect();
    assert_eq!(
        got,
        [Some(7), Some(7), None, None, None, Some(1000), Some(0)]
    );
}
