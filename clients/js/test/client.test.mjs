// iac-agui-client against the server: `iac-agui --demo --default-cwd DIR` (the demo kernel; a
// 30 s disconnect grace; no dialect flag: the package declares AG-UI 1.0 and is served in it,
// issue 57), with @ag-ui/client 1.0 as installed beside it.
//   node client.test.mjs path/to/iac-agui
// Checks: a run through the package declares protocolVersion 1.0 and sends no iacCode (and no
// null) when nothing is set; a second agent on the thread sees the history before it sends, and
// its new message lands after the history (issue 46.3); iacCode without cwd runs in the
// server's --default-cwd; a permission's resumed answer is a message of its own after the tool
// result; Stop cancels and the next turn starts at once; no console.warn/console.error from the
// client.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IacCodeAgent } from "iac-agui-client";

const printed = [];
for (const level of ["warn", "error"]) {
  const original = console[level];
  console[level] = (...args) => {
    printed.push(`console.${level}: ${args.map(String).join(" ")}`);
    original.apply(console, args);
  };
}

const [bin] = process.argv.slice(2);
if (!bin) {
  process.stdout.write("usage: node client.test.mjs IAC_AGUI_BINARY\n");
  process.exit(2);
}
const id = (p) => `${p}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
const user = (text) => ({ id: id("m"), role: "user", content: text });

const dir = mkdtempSync(join(tmpdir(), "iac-agui-client-"));
const ws = join(dir, "ws");
mkdirSync(ws);
const server = spawn(bin, ["--demo", "--port", "0", "--default-cwd", ws], {
  env: { ...process.env, IAC_CODE_AGUI_ALLOWED_CWDS: dir, IAC_CODE_AGUI_STATE_DIR: join(dir, "state") },
  stdio: ["ignore", "ignore", "pipe"],
});
let log = "";
const url = await new Promise((resolve) => {
  const timer = setTimeout(() => resolve(null), 30000);
  server.stderr.setEncoding("utf8");
  server.stderr.on("data", (chunk) => {
    log += chunk;
    const m = log.match(/listening on (http:\/\/[^\s"]+)/) ?? log.match(/"url":"(http:\/\/[^"]+)"/);
    if (m) {
      clearTimeout(timer);
      resolve(`${m[1].replace(/\/$/, "")}/`);
    }
  });
  server.on("exit", () => resolve(null));
});

function done(code, line) {
  process.stdout.write(`${line}\n`);
  server.kill("SIGTERM");
  setTimeout(() => server.kill("SIGKILL"), 300).unref();
  rmSync(dir, { recursive: true, force: true });
  process.exit(code);
}
const fail = (flow, what) => done(1, `CLIENT PACKAGE FAILED [${flow}]: ${what}`);
if (!url) fail("start", `the demo server did not start: ${log.slice(-500)}`);

/** An agent whose request bodies are recorded in `sent` (the run bodies, as sent). */
function agent(config) {
  const sent = [];
  const a = new IacCodeAgent({
    url,
    ...config,
    fetch: (u, init) => {
      if (init?.method === "POST" && u === url) sent.push(init.body);
      return fetch(u, init);
    },
  });
  return { a, sent };
}
const roles = (a) => a.messages.map((m) => m.role).join(",");

// 1. A run through the package: nothing set, so no iacCode (the server's --default-cwd).
const thread = id("thread");
const first = agent({ threadId: thread });
first.a.addMessage(user("hello"));
const r1 = await first.a.runAgent({ runId: id("run") });
if (roles(first.a) !== "user,assistant") fail("first run", `messages ${roles(first.a)}`);
if (first.sent.length !== 1) fail("first run", `${first.sent.length} run requests`);
const body1 = JSON.parse(first.sent[0]);
if (body1.protocolVersion !== "1.0") fail("first run", `protocolVersion ${body1.protocolVersion}: ${first.sent[0]}`);
if ("iacCode" in (body1.forwardedProps ?? {})) fail("first run", `iacCode sent: ${first.sent[0]}`);
if (first.sent[0].includes("null")) fail("first run", `a null in the body: ${first.sent[0]}`);
if (!first.a.threadLoaded) fail("first run", "the thread was not loaded before the run");
if (r1.newMessages.length < 1) fail("first run", "no new messages");

// 2. A second agent on the same thread sees the history before it sends (connectAgent) ...
const second = agent({ threadId: thread });
await second.a.connectAgent();
const history = first.a.messages.map((m) => m.id);
const loaded = second.a.messages.map((m) => m.id);
if (loaded.join() !== history.join()) fail("connect", `loaded ${loaded} for the history ${history}`);
// ... and a third that just sends gets history first, then its message, then the answer.
const third = agent({ threadId: thread });
const next = user("hello again");
third.a.addMessage(next);
await third.a.runAgent({ runId: id("run") });
const order = third.a.messages.map((m) => m.id);
if (order.slice(0, history.length).join() !== history.join() || order[history.length] !== next.id
    || third.a.messages.at(-1).role !== "assistant" || order.length !== history.length + 2) {
  fail("fresh agent order", `messages ${roles(third.a)} ${order} (history ${history}, new ${next.id})`);
}

// 3. iacCode without a cwd (a rosInvocationId of the client's): the server's --default-cwd.
const own = agent({ threadId: id("own"), rosInvocationId: id("ros"), cwd: undefined, iacCode: { model: null } });
own.a.addMessage(user("hello"));
let session = null;
await own.a.runAgent({ runId: id("run") }, {
  onCustomEvent({ event }) { if (event.name === "iac-code.session.v1") session = event.value; },
  onRunErrorEvent({ event }) { fail("iacCode without cwd", `RUN_ERROR ${JSON.stringify(event)}`); },
}).catch((e) => fail("iacCode without cwd", `${e?.message ?? e}`));
const props = JSON.parse(own.sent[0]).forwardedProps?.iacCode;
if (!props || "cwd" in props || "model" in props || own.sent[0].includes("null")) {
  fail("iacCode without cwd", `sent ${own.sent[0]}`);
}
if (session?.rosInvocationId !== own.a.rosInvocationId) fail("iacCode without cwd", `session ${JSON.stringify(session)}`);
if (roles(own.a) !== "user,assistant") fail("iacCode without cwd", `messages ${roles(own.a)}`);

// The properties as built: a cwd in `iacCode` stands when `cwd` is not set; the options win.
const built = new IacCodeAgent({ url, iacCode: { cwd: ws, model: "m" }, cwd: undefined }).iacCodeFor("t");
if (built?.cwd !== ws || built.model !== "m" || built.rosInvocationId !== "agui-client-t" || built.schemaVersion !== 1) {
  fail("iacCode as built", JSON.stringify(built));
}
if (new IacCodeAgent({ url, iacCode: { cwd: "/a" }, cwd: ws }).iacCodeFor("t").cwd !== ws) fail("iacCode as built", "cwd option");

// 4. A permission, allowed: the resumed answer is a message of its own after the tool result
// (served in 0.1, it was appended to the interrupted run's message, above the result).
const asking = agent({ threadId: id("perm") });
asking.a.addMessage(user("create a file (permission)"));
let interrupts = [];
await asking.a.runAgent({ runId: id("run") }, {
  onRunFinishedEvent(p) { interrupts = p.interrupts ?? []; },
});
if (interrupts.length !== 1) fail("permission", `interrupts ${JSON.stringify(interrupts)}`);
await asking.a.runAgent({
  runId: id("run"),
  resume: [{ interruptId: interrupts[0].id, status: "resolved", payload: { decision: "allow_once" } }],
});
const kept = asking.a.messages;
const toolAt = kept.findIndex((m) => m.role === "tool");
const answers = kept.filter((m) => m.role === "assistant" && typeof m.content === "string" && m.content);
if (toolAt < 0 || kept.at(-1).role !== "assistant" || kept.length - 1 <= toolAt
    || new Set(answers.map((m) => m.id)).size !== answers.length) {
  fail("permission", `the resumed answer is not its own message after the result: ${roles(asking.a)}`);
}

// 5. Stop: the run ends cancelled and the next turn on the thread starts at once (the demo
// keeps an aborted run for 30 s: a plain abort would leave the thread busy).
const stopping = agent({ threadId: id("stop") });
stopping.a.addMessage(user("slow please"));
let outcome = null;
const running = stopping.a.runAgent({ runId: id("run") }, {
  onRunFinishedEvent(p) { outcome = p.outcome; },
}).then(() => "finished", (e) => `rejected: ${e?.message ?? e}`);
const deadline = Date.now() + 30000;
while (!stopping.a.session && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
if (!stopping.a.session) fail("stop", "no session event within 30 s");
const took = await stopping.a.stop();
const how = await running;
if (!took || how !== "finished" || outcome !== "cancelled") fail("stop", `cancel taken ${took}, run ${how}, outcome ${outcome}`);
stopping.a.addMessage(user("hello"));
const after = await stopping.a.runAgent({ runId: id("run") }).then(() => "ok", (e) => `${e?.message ?? e}`);
if (after !== "ok") fail("stop", `the next turn: ${after}`);

if (printed.length) fail("console", printed.join(" | "));
done(0, "client-package ok: run (declared 1.0), history before the new message, iacCode without cwd, resumed answer, stop");
