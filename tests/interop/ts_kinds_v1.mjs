// Issue 47 with AG-UI 1.0's own client, `HttpAgent` from @ag-ui/client 1.0.0, against
// `--demo` (no dialect flag: the client declares 1.0): a cloud resource selection (the demo kernel's `select`, with
// the selector capability `/capabilities` gives), a candidate choice (`candidates`) and a
// deployment confirmation (`pipeline confirm`) each end a run in an interrupt of its own
// reason, which is parsed with @ag-ui/core 1.0's schema (`.strict()`) and resumed (a value,
// an option, an action) to a successful run.
//   node ts_kinds_v1.mjs URL
// Any console.warn or console.error the client prints is a failure.
import { HttpAgent } from "@ag-ui/client";
import * as schemas from "@ag-ui/core/schemas";
import { checkStrict, failer, id, printed } from "./harness.mjs";

const [url] = process.argv.slice(2);
const fail = failer("TS KINDS");

async function run(flow, agent, params) {
  let outcome = null;
  let interrupts = [];
  await agent.runAgent({ runId: id("run"), ...params }, {
    onEvent({ event }) {
      checkStrict(schemas, fail, flow, event);
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
  return { outcome, interrupts };
}

/** The interrupt itself, by the 1.0 schema, strict: the kinds' new shapes add no key. */
function checkInterrupt(flow, i, reason) {
  const strict = typeof schemas.InterruptSchema?.strict === "function" ? schemas.InterruptSchema.strict() : null;
  if (strict) {
    const r = strict.safeParse(i);
    if (!r.success) fail(flow, `the interrupt does not parse strictly: ${r.error.message} ${JSON.stringify(i)}`);
  }
  if (i.reason !== reason) fail(flow, `reason ${i.reason}, expected ${reason}`);
  if (!i.responseSchema?.oneOf) fail(flow, `no responseSchema: ${JSON.stringify(i)}`);
}

/** The thread's listing entry and its own page name the pending interrupt whole: without the
 * listing's `kind` and `summary` beside it, it parses as an AG-UI 1.0 `Interrupt` (strict) and
 * is the one RUN_FINISHED carried. */
async function listed(flow, threadId, interrupt) {
  const page = await (await fetch(new URL("/threads?status=interrupted&limit=200", url))).json();
  const entry = (page.threads ?? []).find((t) => t.threadId === threadId);
  if (!entry) fail(flow, `thread ${threadId} not listed as interrupted: ${JSON.stringify(page)}`);
  const one = await (await fetch(new URL(`/threads/${encodeURIComponent(threadId)}`, url))).json();
  for (const [where, found] of [["listing", entry.interrupts], ["thread", one.interrupts]]) {
    if (!Array.isArray(found) || found.length !== 1) fail(flow, `${where}: interrupts ${JSON.stringify(found)}`);
    const { kind, summary, ...rest } = found[0];
    if (kind !== interrupt.metadata?.kind || typeof summary !== "string" || !summary) {
      fail(flow, `${where}: kind ${kind}, summary ${summary}`);
    }
    const r = schemas.InterruptSchema.strict().safeParse(rest);
    if (!r.success) fail(flow, `${where}: the pending interrupt does not parse strictly: ${r.error.message}`);
    if (JSON.stringify(r.data) !== JSON.stringify(interrupt)) {
      fail(flow, `${where}: ${JSON.stringify(r.data)} is not the interrupt the run ended with ${JSON.stringify(interrupt)}`);
    }
  }
}

const caps = await (await fetch(new URL("/capabilities", url))).json();
const selector = caps.custom?.iacCode?.resourceSelector;
if (!selector) fail("capabilities", `no resourceSelector in ${JSON.stringify(caps)}`);
const props = { iacCode: { schemaVersion: 1, rosInvocationId: "ros-kinds", resourceSelector: selector } };

// cloud resource selection → selected
{
  const agent = new HttpAgent({ url, threadId: id("v1-select") });
  agent.addMessage({ id: id("m"), role: "user", content: "select a vswitch" });
  const first = await run("select", agent, { forwardedProps: props });
  if (first.outcome !== "interrupt" || first.interrupts.length !== 1) fail("select", `outcome ${first.outcome}`);
  const i = first.interrupts[0];
  checkInterrupt("select", i, "cloud_resource_selection");
  if (i.metadata?.selector?.id !== "vpc.vswitch") fail("select", `selector ${JSON.stringify(i.metadata)}`);
  await listed("select", agent.threadId, i);
  const r = await run("select resume", agent, {
    forwardedProps: props,
    resume: [{ interruptId: i.id, status: "resolved", payload: { status: "selected", value: "vsw-ts1", label: "TS" } }],
  });
  if (r.outcome !== "success") fail("select resume", `outcome ${r.outcome}`);
}

// candidate choice → the first candidate
{
  const agent = new HttpAgent({ url, threadId: id("v1-candidates") });
  agent.addMessage({ id: id("m"), role: "user", content: "compare candidates" });
  const first = await run("candidates", agent, { forwardedProps: props });
  if (first.outcome !== "interrupt" || first.interrupts.length !== 1) fail("candidates", `outcome ${first.outcome}`);
  const i = first.interrupts[0];
  checkInterrupt("candidates", i, "candidate_selection");
  const option = i.responseSchema.oneOf.map((s) => s.properties?.selectedId?.const).find(Boolean);
  if (!option) fail("candidates", `no option in ${JSON.stringify(i.responseSchema)}`);
  const r = await run("candidates resume", agent, {
    forwardedProps: props,
    resume: [{ interruptId: i.id, status: "resolved", payload: { selectedId: option } }],
  });
  if (r.outcome !== "success") fail("candidates resume", `outcome ${r.outcome}`);
}

// deployment confirmation → the first offered action
{
  const agent = new HttpAgent({ url, threadId: id("v1-confirm") });
  agent.addMessage({ id: id("m"), role: "user", content: "pipeline: confirm the deployment" });
  const first = await run("confirm", agent, { forwardedProps: props });
  if (first.outcome !== "interrupt" || first.interrupts.length !== 1) fail("confirm", `outcome ${first.outcome}`);
  const i = first.interrupts[0];
  checkInterrupt("confirm", i, "deployment_confirmation");
  const action = i.responseSchema.oneOf[0].properties.action.enum[0];
  const r = await run("confirm resume", agent, {
    forwardedProps: props,
    resume: [{ interruptId: i.id, status: "resolved", payload: { action } }],
  });
  if (r.outcome !== "success") fail("confirm resume", `outcome ${r.outcome}`);
}

console.log("ts-kinds-v1 ok: cloud_resource_selection, candidate_selection and deployment_confirmation interrupts parsed strictly and resumed; the pending selection read from the thread listing and page");
process.exit(0);
