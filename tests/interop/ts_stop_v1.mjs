// Stop with `HttpAgent` from @ag-ui/client 1.0.0 against `iac-agui --demo` (no dialect flag)
// (which keeps a run through a disconnect for 30 s), as docs/clients.md says (issue 46.9):
// `abortRun()` alone leaves the thread busy (the next turn is 409 THREAD_BUSY); the guide's
// `stoppable` (its http-agent-stop.mjs block, taken verbatim) frees it at once.
//   node ts_stop_v1.mjs URL
import { HttpAgent } from "@ag-ui/client";
import { stoppable } from "./http-agent-stop.mjs";
import { failer, id, printed } from "./harness.mjs";

const [url] = process.argv.slice(2);
const fail = failer("TS STOP");
const user = (text) => ({ id: id("m"), role: "user", content: text });

/** Start a slow run on `agent`; resolves once its session event arrived (the run is going),
 * with `done`, the run's own promise. */
async function slowRun(agent) {
  let started = false;
  agent.addMessage(user("slow please"));
  const done = agent
    .runAgent({ runId: id("run") }, {
      onCustomEvent({ event }) { if (event.name === "iac-code.session.v1") started = true; },
    })
    .then(() => "finished", (e) => `rejected: ${e?.name ?? e}`);
  const deadline = Date.now() + 30000;
  while (!started && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (!started) fail("start", "no session event within 30 s");
  return { done };
}

/** A new turn on the thread, straight to the server: its status. */
async function nextTurn(threadId) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ threadId, runId: id("run"), state: {}, tools: [], context: [], messages: [user("hello")] }),
  });
  const body = await r.text();
  return r.status === 200 ? 200 : `${r.status} ${body}`;
}

// abortRun() alone: the run goes on for the grace, the thread stays busy.
{
  const agent = new HttpAgent({ url, threadId: id("abort-only") });
  const { done } = await slowRun(agent);
  agent.abortRun();
  await done;
  const status = await nextTurn(agent.threadId);
  if (!String(status).startsWith("409 ")) fail("abortRun alone", `the next turn got ${status}, not 409 THREAD_BUSY (the docs say it does)`);
}

// The guide's stop: the run is cancelled and the next turn starts at once.
{
  const agent = new HttpAgent({ url, threadId: id("stop") });
  const stop = stoppable(agent);
  const { done } = await slowRun(agent);
  await stop();
  await done;
  const status = await nextTurn(agent.threadId);
  if (status !== 200) fail("stoppable", `the next turn got ${status}, not 200`);
}

if (printed.length) fail("console", printed.join(" | "));
console.log("ts-stop-v1 ok: abortRun() alone leaves the thread busy (409); the guide's stop frees it at once");
