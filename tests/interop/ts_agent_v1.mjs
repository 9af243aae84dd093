// AG-UI 1.0's own client, `HttpAgent` from @ag-ui/client 1.0.0, against iac-agui with no
// dialect flag (the client declares 1.0 and is served in it), as a front-end team uses it: plain, reasoning, permission (a
// tool call) → resume, question → answer (a pipeline's clarifying question), an LLM failure,
// a cancel; after each, the server's stored conversation equals the client's messages.
//   node ts_agent_v1.mjs URL CWD
// Every event is also parsed with @ag-ui/core 1.0's schema for its type, `.strict()` (no
// unknown keys); any console.warn or console.error the client prints is a failure.
import { HttpAgent } from "@ag-ui/client";
import * as schemas from "@ag-ui/core/schemas";
import { checkStrict, failer, id, printed } from "./harness.mjs";

const [url, cwd] = process.argv.slice(2);
const fail = failer("TS AGENT");

/** `RUN_STARTED` → `RunStartedEventSchema`. */

/** Run once; the events seen (each checked strictly) and the outcome. */
async function run(flow, agent, params) {
  const events = [];
  let outcome = null;
  let interrupts = [];
  await agent.runAgent({ runId: id("run"), ...params }, {
    onEvent({ event }) {
      checkStrict(schemas, fail, flow, event);
      events.push(event);
      if (event.type === "CUSTOM" && event.name === "iac-code.session.v1") lastSession = event.value;
    },
    onRunFinishedEvent(p) {
      outcome = p.outcome;
      if (p.outcome === "interrupt") interrupts = p.interrupts;
    },
    onRunErrorEvent({ event }) {
      outcome = "error:" + event.code;
    },
  });
  if (printed.length) fail(flow, printed.join(" | "));
  return { events, outcome, interrupts };
}

let lastSession = null;

/** What the server keeps of a thread (issue 39) must be what the client built: same ids,
 * roles, content, tool calls and results, in the same order. */
async function sameHistory(flow, agent, ordered = true) {
  const r = await fetch(new URL(`/threads/${encodeURIComponent(agent.threadId)}/messages?limit=200`, url));
  if (r.status !== 200) fail(flow, `history: status ${r.status} ${await r.text()}`);
  const body = await r.json();
  const sorted = (ms) => (ordered ? ms : [...ms].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)));
  const norm = (ms) => JSON.stringify(sorted(ms).map((m) => Object.fromEntries(Object.entries(m).sort())));
  if (norm(body.messages) !== norm(agent.messages)) {
    fail(flow, `the stored conversation differs from the client's:\nserver ${norm(body.messages)}\nclient ${norm(agent.messages)}`);
  }
}
const user = (text) => ({ id: id("m"), role: "user", content: text });
const textOf = (m) => (typeof m.content === "string" ? m.content : "");

// plain
{
  const agent = new HttpAgent({ url, threadId: id("v1-plain") });
  agent.addMessage(user("hello"));
  const r = await run("plain", agent, {});
  if (r.outcome !== "success") fail("plain", `outcome ${r.outcome}`);
  if (!agent.messages.some((m) => m.role === "assistant" && textOf(m))) fail("plain", "no assistant text");
  await sameHistory("plain", agent);
  // A fresh client (a new tab) with only its new message gets the whole conversation back
  // (HttpAgent 1.0 keeps its own messages where they were, so its new message stays first:
  // the same messages, in its order).
  const fresh = new HttpAgent({ url, threadId: agent.threadId });
  fresh.addMessage(user("and again"));
  const again = await run("plain again", fresh, {});
  if (again.outcome !== "success") fail("plain again", `outcome ${again.outcome}`);
  if (!again.events.some((e) => e.type === "MESSAGES_SNAPSHOT")) fail("plain again", "no MESSAGES_SNAPSHOT");
  const held = new Set(fresh.messages.map((m) => m.id));
  if (!agent.messages.every((m) => held.has(m.id))) {
    fail("plain again", `the fresh client does not hold the earlier conversation: ${JSON.stringify(fresh.messages)}`);
  }
  await sameHistory("plain again", fresh, false);
  // The one that holds everything gets no snapshot.
  fresh.addMessage(user("once more"));
  const third = await run("plain third", fresh, {});
  if (third.events.some((e) => e.type === "MESSAGES_SNAPSHOT")) fail("plain third", "a snapshot for a complete history");
  await sameHistory("plain third", fresh, false);
}

// reasoning: the thinking is a reasoning message before the answer, kept by the server too
{
  const agent = new HttpAgent({ url, threadId: id("v1-think") });
  agent.addMessage(user("think about it"));
  const r = await run("reasoning", agent, {});
  if (r.outcome !== "success") fail("reasoning", `outcome ${r.outcome}`);
  const roles = agent.messages.map((m) => m.role);
  if (roles.indexOf("reasoning") < 0 || roles.indexOf("reasoning") > roles.lastIndexOf("assistant")) {
    fail("reasoning", `roles ${roles}`);
  }
  await sameHistory("reasoning", agent);
}

// permission → resume: the answer after the approval is its own assistant message, after the
// tool result.
{
  const agent = new HttpAgent({ url, threadId: id("v1-perm") });
  agent.addMessage(user("please run bash"));
  const first = await run("permission", agent, {});
  if (first.outcome !== "interrupt" || first.interrupts.length !== 1) fail("permission", `outcome ${first.outcome}`);
  const before = agent.messages.length;
  const r = await run("permission resume", agent, {
    resume: [{ interruptId: first.interrupts[0].id, status: "resolved", payload: { decision: "allow_once" } }],
  });
  if (r.outcome !== "success") fail("permission resume", `outcome ${r.outcome}`);
  const msgs = agent.messages;
  const tool = msgs.findIndex((m, i) => i >= 0 && m.role === "tool");
  const answer = msgs.findIndex((m, i) => i > tool && m.role === "assistant" && textOf(m));
  if (tool < 0) fail("permission resume", `no tool message in ${JSON.stringify(msgs)}`);
  if (answer < 0) fail("permission resume", `no assistant message after the tool result: ${JSON.stringify(msgs)}`);
  if (answer < before) fail("permission resume", "the post-approval text went into an earlier message");
  await sameHistory("permission resume", agent);
}

// question → answer: a pipeline's clarifying question, answered with its first option
{
  const agent = new HttpAgent({ url, threadId: id("v1-question") });
  agent.addMessage(user("build a pipeline for a web app"));
  const props = { iacCode: { schemaVersion: 1, rosInvocationId: "ros-v1", cwd, runMode: "pipeline" } };
  const first = await run("question", agent, { forwardedProps: props });
  if (first.outcome !== "interrupt") fail("question", `outcome ${first.outcome}`);
  const q = first.interrupts[0];
  const option = (q.responseSchema?.oneOf || []).map((s) => s.properties?.selectedId?.const).find(Boolean);
  const payload = option ? { selectedId: option } : { freeText: "the cheapest one" };
  const r = await run("question answer", agent, {
    forwardedProps: props,
    resume: [{ interruptId: q.id, status: "resolved", payload }],
  });
  // The answer is taken (its tool result shown) and the step concludes: the run succeeds.
  if (!r.events.some((e) => e.type === "TOOL_CALL_RESULT")) fail("question answer", "the answer produced no tool result");
  if (!r.events.some((e) => e.type === "STEP_FINISHED")) fail("question answer", "the step did not finish");
  if (r.outcome !== "success") fail("question answer", `outcome ${r.outcome}`);
  await sameHistory("question answer", agent);
}

// an LLM failure: one RUN_ERROR, still strictly 1.0
{
  const agent = new HttpAgent({ url, threadId: id("v1-fail") });
  agent.addMessage(user("llm-error please"));
  const r = await run("fail", agent, {});
  if (!String(r.outcome).startsWith("error:")) fail("fail", `outcome ${r.outcome}`);
  await sameHistory("fail", agent);
}

// cancel: the cancel route while the agent streams; the run ends `cancelled`
{
  const threadId = id("v1-cancel");
  const agent = new HttpAgent({ url, threadId });
  agent.addMessage(user("slow please"));
  lastSession = null;
  const done = run("cancel", agent, {});
  const deadline = Date.now() + 30000;
  // The session event (first in the stream) names the execution to cancel.
  while (!lastSession && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const sessionId = lastSession;
  if (!sessionId) fail("cancel", "no session event");
  const c = await fetch(new URL(`/extensions/iac-code/v1/executions/${sessionId.executionId}/cancel`, url), {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ threadId, rosInvocationId: sessionId.rosInvocationId }),
  });
  if (![200, 202].includes(c.status)) fail("cancel", `cancel route ${c.status}`);
  const r = await done;
  if (r.outcome !== "cancelled") fail("cancel", `outcome ${r.outcome}`);
  await sameHistory("cancel", agent);
}

// capabilities: an AgentCapabilities object by @ag-ui/core's own schema, strict at the top
{
  const r = await fetch(new URL("/capabilities", url));
  if (r.status !== 200) fail("capabilities", `status ${r.status}`);
  const caps = await r.json();
  const parsed = schemas.AgentCapabilitiesSchema.strict().safeParse(caps);
  if (!parsed.success) fail("capabilities", parsed.error.message);
  if (!caps.transport?.streaming || !caps.humanInTheLoop?.interrupts) fail("capabilities", JSON.stringify(caps));
}

console.log("ts-agent-v1 ok: plain (+ a fresh client's snapshot), reasoning, permission (tool call) resume, question answer, fail, cancel, capabilities; each history as the client built it");
process.exit(0);
