// CopilotKit 1.75 in front of iac-agui (0.1 mode), wired as docs/clients.md says: the
// CopilotKit runtime (`@copilotkit/runtime` v2, pinned) registers `IacCodeAgent`, the
// `HttpAgent` subclass of docs/clients.md (extracted verbatim into iac-code-agent.mjs by
// run.sh), which sets `forwardedProps.iacCode` on the server. The browser side is
// CopilotKit's own `CopilotKitCore` (what `<CopilotKit runtimeUrl>` runs), with no properties.
//   node copilotkit.mjs URL CWD
// Flows: a plain run, permission → resume, Stop (the server keeps runs through a disconnect,
// so only the cancel route `IacCodeAgent.abortRun` calls frees the thread for the next turn).
// Any console.warn or console.error in this process (runtime or client) is a failure.
import http from "node:http";
import { CopilotRuntime } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";
import { CopilotKitCore } from "@copilotkit/core";
import { IacCodeAgent } from "./iac-code-agent.mjs";
import { failer, id, printed } from "./harness.mjs";

const [url, cwd] = process.argv.slice(2);
const fail = failer("COPILOTKIT");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const textOf = (m) => (typeof m.content === "string" ? m.content : "");

// The runtime, as an application serves it.
const runtime = new CopilotRuntime({ agents: { "iac-code": new IacCodeAgent({ url, cwd }) } });
const server = http.createServer(createCopilotNodeListener({ runtime, basePath: "/api/copilotkit", activateChannels: false }));
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const runtimeUrl = `http://127.0.0.1:${server.address().port}/api/copilotkit`;

// The browser side. CopilotKitCore connects to the runtime only where `window` exists: the one
// thing of a browser it needs here.
globalThis.window = { location: new URL(runtimeUrl), addEventListener() {}, removeEventListener() {} };
const core = new CopilotKitCore({ runtimeUrl });
for (let i = 0; i < 200 && !core.getAgent("iac-code"); i++) await sleep(25);
if (!core.getAgent("iac-code")) fail("connect", `the runtime's agent did not appear (${core.runtimeConnectionStatus})`);

/** One chat turn through CopilotKit; the event types seen and how the run ended. */
async function turn(flow, agent, text, params = {}) {
  const types = [];
  let outcome = null;
  const sub = agent.subscribe({
    onEvent({ event }) {
      types.push(event.type);
    },
    onRunFinishedEvent(p) {
      outcome = p.outcome ?? "success";
    },
    onRunErrorEvent({ event }) {
      outcome = "error:" + event.code;
    },
  });
  if (text) agent.addMessage({ id: id("m"), role: "user", content: text });
  try {
    await core.runAgent({ agent, ...params });
  } finally {
    sub.unsubscribe();
  }
  if (printed.length) fail(flow, printed.join(" | "));
  return { types, outcome };
}

/** A fresh chat (a new CopilotKit thread) on the runtime's agent. */
function chat() {
  const agent = core.getAgent("iac-code");
  agent.threadId = id("ck");
  agent.setMessages([]);
  return agent;
}

// plain
{
  const agent = chat();
  const r = await turn("plain", agent, "hello");
  if (r.outcome !== "success") fail("plain", `outcome ${r.outcome} ${r.types}`);
  if (!agent.messages.some((m) => m.role === "assistant" && textOf(m))) fail("plain", `no assistant text: ${JSON.stringify(agent.messages)}`);
}

// permission → resume
{
  const agent = chat();
  const first = await turn("permission", agent, "please run bash");
  const pending = agent.pendingInterrupts ?? [];
  if (first.outcome !== "interrupt" || pending.length !== 1) fail("permission", `outcome ${first.outcome}, ${pending.length} interrupts`);
  if (pending[0].reason !== "tool_call") fail("permission", JSON.stringify(pending[0]));
  const r = await turn("permission resume", agent, "", {
    resume: [{ interruptId: pending[0].id, status: "resolved", payload: { decision: "allow_once" } }],
  });
  if (r.outcome !== "success") fail("permission resume", `outcome ${r.outcome} ${r.types}`);
  if (!r.types.includes("TOOL_CALL_RESULT")) fail("permission resume", `no tool result: ${r.types}`);
  const tool = agent.messages.findIndex((m) => m.role === "tool");
  if (tool < 0) fail("permission resume", `no tool message: ${JSON.stringify(agent.messages)}`);
  if (!agent.messages.some((m) => m.role === "assistant" && textOf(m).includes("The command finished."))) {
    fail("permission resume", `no post-approval text: ${JSON.stringify(agent.messages)}`);
  }
  // Another agent (a reload, another device) loads the thread from the server without a run.
  const fresh = new IacCodeAgent({ url, cwd, threadId: agent.threadId });
  await fresh.connectAgent();
  if (printed.length) fail("connect", printed.join(" | "));
  // In 0.1 mode the answer after the approval continues the interrupted run's message on the
  // wire, and the server's copy keeps it as its own message after the tool result (as in 1.0
  // mode; docs/clients.md): the same messages otherwise, and the same assistant text in order.
  const ids = (ms) => ms.filter((m) => m.role !== "activity" && m.role !== "assistant").map((m) => `${m.role}:${m.id}`).join(",");
  const said = (ms) => ms.filter((m) => m.role === "assistant").map(textOf).join("");
  if (ids(fresh.messages) !== ids(agent.messages) || said(fresh.messages) !== said(agent.messages)) {
    fail("connect", `the loaded thread differs:\n${JSON.stringify(fresh.messages)}\n${JSON.stringify(agent.messages)}`);
  }
}

// Stop while the answer streams, then the next turn at once on the same thread.
{
  const agent = chat();
  let streaming = false;
  const watch = agent.subscribe({
    onTextMessageContentEvent() {
      streaming = true;
    },
  });
  const done = turn("stop", agent, "slow please");
  for (let i = 0; i < 1200 && !streaming; i++) await sleep(25);
  if (!streaming) fail("stop", "the slow answer never streamed");
  core.stopAgent({ agent });
  await done;
  watch.unsubscribe();
  // Without the cancel the execution would go on (the server keeps it for a re-attach) and the
  // next turn would be refused THREAD_BUSY until the slow answer ends.
  const r = await turn("turn after stop", agent, "hello");
  if (r.outcome !== "success") fail("turn after stop", `outcome ${r.outcome} ${r.types}`);
}

server.close();
console.log("copilotkit ok: plain, permission resume (and the thread loaded by connect), stop then send");
process.exit(0);
