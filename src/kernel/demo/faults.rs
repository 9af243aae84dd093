//! Fault injection for tests (`fault-…` keywords): garbage, dying streams, wrong ids, errors.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    Garbage,
    Die,
    Huge,
    WrongContext,
    WrongTask,
    NoInputId,
    Hang,
    Http500,
    RpcError,
    Drip,
}

pub(super) fn fault(em: &mut Emitter<'_>, f: Fault) -> Result<(), Stop> {
    em.text("Starting… ")?;
    match f {
        Fault::Garbage => em.raw(b"this is not json"),
        Fault::Die => {
            let _ = em.sock.shutdown(std::net::Shutdown::Both);
            Err(Stop)
        }
        Fault::Huge => {
            let big = "y".repeat(20 * 1024 * 1024);
            em.text(&big)
        }
        Fault::WrongContext => {
            let upd = json!({"statusUpdate": {"taskId": em.task_id, "contextId": "agui-0000000000000000000000000000000000000000", "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": {"iacCodeSessionId": em.session_id}}}});
            em.frame(upd)
        }
        Fault::WrongTask => {
            let upd = json!({"statusUpdate": {"taskId": ids::uuid4(), "contextId": em.context_id, "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": {"iacCodeSessionId": em.session_id}}}});
            em.frame(upd)
        }
        Fault::NoInputId => {
            let tool = "call_noid";
            let mut input = permission_input(em, tool, "ls");
            if let Some(o) = input.as_object_mut() {
                o.remove("inputId");
            }
            let iac = em.with_session(json!({"input": input}));
            em.status("TASK_STATE_INPUT_REQUIRED", None, false, iac)
        }
        Fault::Drip => {
            let frame = serde_json::to_vec(&json!({"result": {"statusUpdate": {"taskId": em.task_id, "contextId": em.context_id, "status": {"state": "TASK_STATE_WORKING", "message": em.msg("message", "drip")}, "metadata": {"iac_code": {"iacCodeSessionId": em.session_id}}}}, "id": em.req_id, "jsonrpc": "2.0"})).unwrap_or_default();
            let mut all = b"data: ".to_vec();
            all.extend(frame);
            all.extend_from_slice(b"\r\n\r\n");
            for b in all {
                em.pause(Duration::from_millis(8))?;
                write_chunk(em.sock, &[b]).map_err(|_| Stop)?;
            }
            em.finish_turn("")
        }
        Fault::Hang | Fault::Http500 | Fault::RpcError => Ok(()),
    }
}
