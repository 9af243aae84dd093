// The browser console against `iac-agui --demo`, in headless Chromium (issue 16).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { startDemo, startServer } from "./server.mjs";

const arg = (name) => process.argv[process.argv.indexOf(name) + 1];
const BIN = arg("--bin"), CHROMIUM = arg("--chromium"), SHOTS = arg("--shots");
const started = [];
let passed = 0;
// Requests leaving the server's origin, and script or console errors, of every tab.
const foreign = [], problems = [];

function fail(step, what) {
  throw new Error(`BROWSER TEST FAILED [${step}]: ${what}`);
}

/** Click a row of the threads list: the list is drawn again from the server now and then, and
 * a row taken just before that is gone when clicked; the click is tried again on the new one. */
async function clickRow(p, sel) {
  for (let i = 0; ; i++) {
    try {
      return await p.click(sel);
    } catch (e) {
      if (i === 20) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

const server = (args, env) => startServer(BIN, started, args, env);

async function step(name, fn) {
  const t0 = Date.now();
  const seen = problems.length;
  await fn();
  // The error is the failing step's, not only the last step's.
  if (problems.length > seen) fail(name, `script or console error: ${problems.slice(seen).join(" | ")}`);
  passed++;
  console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
}

const work = mkdtempSync(join(tmpdir(), "iac-agui-browser-"));
let browser;
try {
  const base = await server(["--demo"], { IAC_CODE_AGUI_ALLOWED_CWDS: work });

  await step("headers: CSP, nosniff, no-store; absent without --console/--demo", async () => {
    const r = await fetch(base + "/console");
    if (r.status !== 200) fail("headers", `status ${r.status}`);
    const csp = r.headers.get("content-security-policy") || "";
    for (const part of ["default-src 'none'", "connect-src 'self'", "script-src 'sha256-"]) {
      if (!csp.includes(part)) fail("headers", `CSP without ${part}: ${csp}`);
    }
    if (r.headers.get("x-content-type-options") !== "nosniff") fail("headers", "no nosniff");
    if (r.headers.get("cache-control") !== "no-store") fail("headers", "cacheable");
    const plain = await server(["--a2a-url", "http://127.0.0.1:9/"], { IAC_CODE_AGUI_ALLOWED_CWDS: work });
    const r2 = await fetch(plain + "/console");
    if (r2.status !== 404) fail("absent", `/console without --console answered ${r2.status}`);
  });

  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  const origin = new URL(base).origin;
  const listen = (tab, own) => {
    tab.on("request", (req) => { if (!req.url().startsWith(own)) foreign.push(req.url()); });
    tab.on("console", (m) => { if (m.type() === "error" && !/Failed to load resource|net::ERR_ABORTED/.test(m.text())) problems.push(m.text()); });
    tab.on("pageerror", (e) => problems.push(String(e)));
  };
  listen(page, origin);
  const shot = (name) => page.screenshot({ path: join(SHOTS, name + ".png"), fullPage: true });
  const send = async (text) => {
    await page.$eval("#input", (e, t) => { e.value = t; }, text);
    await page.click("#send");
  };
  const finished = (n) => page.waitForFunction(
    (n) => document.querySelectorAll("#log .status.ok, #log .status.bad, #log .msg.error, #log .interrupt").length >= n,
    { timeout: 20000 }, n);
  const ends = () => page.$$eval("#log .status.ok, #log .status.bad, #log .msg.error, #log .interrupt", (x) => x.length);
  // Regression (issue 57): the log scrolled to a new form while it was empty, then the form
  // grew below the fold (its answers hidden). The newest form must be wholly in the log's view.
  let scrolledForms = 0;
  const formInView = async (tab, tag) => {
    const r = await tab.evaluate(() => {
      const log = document.querySelector("#log"), f = [...log.querySelectorAll(".interrupt")].pop().getBoundingClientRect();
      const l = log.getBoundingClientRect();
      return { above: l.top - f.top, below: f.bottom - l.bottom, scrolls: log.scrollHeight > log.clientHeight };
    });
    if (r.above > 0.5 || r.below > 0.5) fail(tag, `the form is not wholly in view: ${JSON.stringify(r)}`);
    if (r.scrolls) scrolledForms++;
  };

  await page.goto(base + "/console", { waitUntil: "load" });

  await step("a plain run renders its text", async () => {
    await send("hello");
    await finished(1);
    const text = await page.$eval("#log", (e) => e.innerText);
    if (!text.includes("Hello! This is the iac-agui demo kernel.")) fail("plain", text);
    await shot("01-plain");
  });

  await step("a permission interrupt: Allow renders the tool result and the rest", async () => {
    const n = await ends();
    await send("create a file (permission)");
    await page.waitForSelector(".interrupt button[data-decision=allow_once]", { timeout: 20000 });
    const labels = await page.$$eval(".interrupt:last-of-type button", (b) => b.map((x) => x.textContent));
    if (!labels.includes("Allow once") || !labels.includes("Deny")) fail("permission", labels.join(","));
    // Regression (issue 46 item 8): the title and the question ran together on one line.
    const { title, prompt } = await page.$eval(".interrupt:last-of-type", (b) => ({
      title: b.querySelector(".title")?.textContent, prompt: b.querySelector(".prompt")?.textContent }));
    if (title !== "Run a local shell command" || !prompt || prompt.includes(title) || !prompt.endsWith("?")) fail("permission", `title ${JSON.stringify(title)} prompt ${JSON.stringify(prompt)}`);
    await shot("02-permission-interrupt");
    await page.click(".interrupt button[data-decision=allow_once]");
    await finished(n + 2);
    const results = await page.$$eval("#log pre.result", (r) => r.map((x) => x.textContent));
    if (!results.length) fail("permission", "no tool result rendered");
    const last = await page.$eval("#state", (e) => e.textContent);
    if (last !== "finished") fail("permission", `state ${last}`);
    await shot("03-permission-allowed");
  });

  await step("a question answered by option and by free text", async () => {
    let n = await ends();
    await send("which region? (question)");
    await page.waitForSelector(".interrupt button[data-selected-id]", { timeout: 20000 });
    await shot("04-question");
    await page.click(".interrupt button[data-selected-id]");
    await finished(n + 2);
    if ((await page.$eval("#state", (e) => e.textContent)) !== "finished") fail("question", "option answer did not finish");
    n = await ends();
    await send("another question please");
    await page.waitForSelector(".interrupt input.free:not([disabled])", { timeout: 20000 });
    await formInView(page, "question-free");
    await page.type(".interrupt input.free:not([disabled])", "somewhere quiet");
    await page.click(".interrupt button.free:not([disabled])");
    await finished(n + 2);
    if ((await page.$eval("#state", (e) => e.textContent)) !== "finished") fail("question", "free-text answer did not finish");
    await shot("05-question-answered");
  });

  await step("a cloud resource selection: its selector shown, a value selected, then one canceled", async () => {
    let n = await ends();
    await send("select a vswitch");
    await page.waitForSelector(".interrupt input.sel-value:not([disabled])", { timeout: 20000 });
    await formInView(page, "selection");
    const shown = await page.$eval(".interrupt:last-of-type .summary.selector", (e) => e.textContent);
    if (!shown.includes("ALIYUN::VPC::VSwitch::VSwitchId") || !shown.includes("RegionId=cn-hangzhou")) fail("selection", `selector shown as ${shown}`);
    const dismiss = await page.$$eval(".interrupt:last-of-type button", (b) => b.map((x) => x.textContent));
    if (dismiss.includes("Dismiss")) fail("selection", `buttons ${dismiss}`);
    await shot("05b-resource-selection");
    await page.type(".interrupt input.sel-value:not([disabled])", "vsw-main1");
    await page.type(".interrupt input.sel-label:not([disabled])", "Main VSwitch");
    await page.click(".interrupt button[data-select=selected]:not([disabled])");
    await finished(n + 2);
    if ((await page.$eval("#state", (e) => e.textContent)) !== "finished") fail("selection", "the selection did not finish");
    const said = await page.$$eval("#log .msg.assistant", (x) => x.map((m) => m.textContent).join(" "));
    if (!said.includes("Using Main VSwitch.")) fail("selection", "the kernel did not get the selection");
    n = await ends();
    await send("select another one");
    await page.waitForSelector(".interrupt button[data-select=canceled]:not([disabled])", { timeout: 20000 });
    await formInView(page, "selection-cancel");
    await page.click(".interrupt button[data-select=canceled]:not([disabled])");
    await finished(n + 2);
    if ((await page.$eval("#state", (e) => e.textContent)) !== "finished") fail("selection", "the cancel did not finish");
    await shot("05c-resource-selection-canceled");
  });

  await step("Stop ends a slow run as cancelled", async () => {
    const n = await ends();
    const answers = await page.$$eval("#log .msg.assistant", (x) => x.length);
    await send("slow please");
    await page.waitForFunction(() => !document.querySelector("#stop").disabled, { timeout: 10000 });
    // Wait until this run's text streamed (its session event, with the execution id, came first).
    await page.waitForFunction((k) => {
      const a = document.querySelectorAll("#log .msg.assistant");
      return a.length > k && a[a.length - 1].textContent.length > 0;
    }, { timeout: 10000 }, answers);
    await page.click("#stop");
    await finished(n + 1);
    const state = await page.$eval("#state", (e) => e.textContent);
    if (state !== "cancelled") fail("stop", `state ${state}`);
    await shot("06-stopped");
  });

  // Regression: a Stop pressed before the run's session event did nothing, and the run ran on.
  await step("Stop pressed at once, before the run names its execution, still cancels it", async () => {
    const n = await ends();
    // Both clicks in one task: the run exists, its execution id cannot have arrived yet.
    const early = await page.evaluate(() => {
      document.querySelector("#input").value = "slow please";
      document.querySelector("#send").click();
      const stop = document.querySelector("#stop");
      const enabled = !stop.disabled;
      stop.click();
      return enabled;
    });
    if (!early) fail("stop-early", "Stop was not enabled right after Send");
    await finished(n + 1);
    const state = await page.$eval("#state", (e) => e.textContent);
    if (state !== "cancelled") fail("stop-early", `state ${state}`);
  });

  const turns = () => page.evaluate(() => ({
    users: [...document.querySelectorAll("#log .msg.user")].map((e) => e.textContent),
    answers: [...document.querySelectorAll("#log .msg.assistant")].map((e) => e.textContent),
    tools: document.querySelectorAll("#log .tool").length,
  }));

  await step("a reload after finished turns shows the thread's earlier turns again", async () => {
    const before = await turns();
    if (before.users.length < 2 || before.answers.length < 2) fail("history", `too few turns: ${JSON.stringify(before)}`);
    await page.reload({ waitUntil: "load" });
    await page.waitForFunction((n) => document.querySelectorAll("#log .msg.user").length >= n, { timeout: 10000 }, before.users.length);
    const after = await turns();
    if (JSON.stringify(after) !== JSON.stringify(before)) fail("history", `before ${JSON.stringify(before)} after ${JSON.stringify(after)}`);
    await shot("07-history-after-reload");
  });

  await step("a reload mid-run re-attaches and shows the whole answer once", async () => {
    const earlier = (await turns()).users.length;
    await send("pace 30 10");
    await page.waitForFunction(() => /\b5@/.test([...document.querySelectorAll("#log .msg.assistant")].pop()?.textContent || ""), { timeout: 10000 });
    await page.reload({ waitUntil: "load" });
    await page.waitForFunction(() => document.querySelector("#state").textContent === "finished", { timeout: 20000 });
    // The earlier turns are there again, and the live run once, after them.
    const now = await turns();
    if (now.users.length !== earlier + 1) fail("reload", `users ${JSON.stringify(now.users)}`);
    const text = now.answers[now.answers.length - 1];
    const seen = [...text.matchAll(/\b(\d+)@\d+/g)].map((m) => Number(m[1]));
    const want = Array.from({ length: 30 }, (_, i) => i);
    if (JSON.stringify(seen) !== JSON.stringify(want)) fail("reload", `deltas ${seen.join(",")}`);
    await shot("08-reloaded");
  });

  // Regression (issue 57 item 7): replaying the thread's earlier turns after a reload ended
  // with their `busy(false)`, after the re-attached run's `busy(true)`: Stop stayed disabled
  // and did nothing while the run went on.
  await step("a reload mid-run on a thread with earlier turns: Stop stops the re-attached run", async () => {
    if ((await turns()).users.length < 2) fail("stop after reload", "the thread has no earlier turn");
    const answers = await page.$$eval("#log .msg.assistant", (x) => x.length);
    await send("slow please");
    await page.waitForFunction((k) => {
      const a = document.querySelectorAll("#log .msg.assistant");
      return a.length > k && /tick 2\./.test(a[a.length - 1].textContent);
    }, { timeout: 10000 }, answers);
    await page.reload({ waitUntil: "load" });
    await page.waitForFunction(() => document.querySelector("#state").textContent === "running (re-attached)", { timeout: 10000 })
      .catch(async () => fail("stop after reload", `not re-attached: state ${await page.$eval("#state", (e) => e.textContent)}`));
    if (await page.$eval("#stop", (b) => b.disabled)) fail("stop after reload", "Stop is disabled while the re-attached run goes on");
    await page.click("#stop");
    await page.waitForFunction(() => document.querySelector("#state").textContent === "cancelled", { timeout: 10000 })
      .catch(async () => fail("stop after reload", `Stop did not stop the run: state ${await page.$eval("#state", (e) => e.textContent)}`));
    const buttons = await page.evaluate(() => ({ send: document.querySelector("#send").disabled, stop: document.querySelector("#stop").disabled }));
    if (buttons.send || !buttons.stop) fail("stop after reload", `after the stop: ${JSON.stringify(buttons)}`);
    await shot("08b-stopped-after-reload");
  });

  await step("a new tab lists the threads, opens one from the server, deletes one", async () => {
    const thread = await page.$eval("#thread", (e) => e.value);
    const tab = await browser.newPage();
    await tab.setViewport({ width: 1280, height: 860 });
    tab.on("request", (req) => { if (!req.url().startsWith(origin)) foreign.push(req.url()); });
    tab.on("pageerror", (e) => problems.push(String(e)));
    await tab.goto(base + "/console", { waitUntil: "load" });
    // This tab has no record of its own: the conversation comes from the server.
    await tab.waitForFunction(() => document.querySelectorAll("#log .msg.user").length >= 2, { timeout: 10000 });
    const users = await tab.$$eval("#log .msg.user", (e) => e.map((x) => x.textContent));
    if (users[0] !== "hello") fail("server history", JSON.stringify(users));
    await tab.waitForSelector(`#threads .thread.current[data-thread-id="${thread}"]`, { timeout: 10000 });
    await tab.screenshot({ path: join(SHOTS, "09-threads-new-tab.png"), fullPage: true });
    // A second thread, then delete it from the list.
    await tab.click("#newThread");
    await tab.$eval("#input", (e) => { e.value = "a thread to delete"; });
    await tab.click("#send");
    await tab.waitForFunction(() => document.querySelector("#state").textContent === "finished", { timeout: 20000 });
    const second = await tab.$eval("#thread", (e) => e.value);
    const row = `#threads .thread[data-thread-id="${second}"]`;
    await tab.waitForSelector(row, { timeout: 10000 });
    const rows = await tab.$$eval("#threads .thread", (r) => r.length);
    if (rows !== 2) fail("threads", `${rows} rows`);
    await clickRow(tab, row + " .delete-button");
    await tab.waitForFunction((sel) => !document.querySelector(sel), { timeout: 10000 }, row);
    const gone = await fetch(base + "/threads/" + encodeURIComponent(second) + "/messages");
    if (gone.status !== 404) fail("delete", `the deleted thread answers ${gone.status}`);
    // Opening the first thread from the list shows its conversation.
    await tab.click(`#threads .thread[data-thread-id="${thread}"] .title`);
    await tab.waitForFunction(() => document.querySelectorAll("#log .msg.user").length >= 2, { timeout: 10000 });
    await tab.screenshot({ path: join(SHOTS, "10-thread-opened.png"), fullPage: true });
    await tab.close();
  });

  await step("with a token: the page holds no server path, asks for the token, then works", async () => {
    const ws = join(work, "ws-token");
    const guarded = await server(["--demo", "--default-cwd", ws], { IAC_CODE_AGUI_ALLOWED_CWDS: work, IAC_CODE_AGUI_AUTH_TOKEN: "console-secret" });
    const html = await (await fetch(guarded + "/console")).text();
    // Regression (second red-team, fault 3): the public page embedded the first allowed root.
    if (html.includes(work)) fail("token", "the page served without auth names a server path");
    const tab = await browser.newPage();
    tab.on("pageerror", (e) => problems.push(String(e)));
    await tab.goto(guarded + "/console", { waitUntil: "load" });
    await tab.waitForSelector("#token.needed", { timeout: 10000 });
    if ((await tab.$eval("#cwd", (e) => e.value)) !== "") fail("token", "a workspace before the token");
    await tab.type("#token", "console-secret");
    await tab.$eval("#token", (e) => e.dispatchEvent(new Event("change")));
    await tab.waitForFunction((ws) => document.querySelector("#cwd").value === ws, { timeout: 10000 }, ws);
    await tab.$eval("#input", (e) => { e.value = "hello"; });
    await tab.click("#send");
    await tab.waitForFunction(() => document.querySelector("#state").textContent === "finished", { timeout: 20000 });
    // The token is this tab's only.
    const stored = await tab.evaluate(() => JSON.stringify(localStorage));
    if (stored.includes("console-secret")) fail("token", "the token reached local storage");
    // Regression (outside review of issue 36, fault 3): a workspace kept from an earlier
    // configuration of this origin hid the configured one after a reload.
    await tab.evaluate(() => localStorage.setItem("iac-agui-console:settings", JSON.stringify({ thread: "t-old", ros: "ros-console", cwd: "/stale/workspace" })));
    await tab.reload({ waitUntil: "load" });
    await tab.waitForFunction((ws) => document.querySelector("#cwd").value === ws, { timeout: 10000 }, ws)
      .catch(async () => fail("token", `after a reload the workspace is ${await tab.$eval("#cwd", (e) => e.value)}, not ${ws}`));
    await tab.screenshot({ path: join(SHOTS, "11-token.png"), fullPage: true });
    await tab.close();
  });


  // Issue 46 item 6 and issue 47: threads across tabs and devices (another browser context
  // shares nothing with this one but the server).
  const other = await browser.createBrowserContext();
  const watch = (tab, errors) => {
    tab.on("request", (req) => { if (!req.url().startsWith(origin)) foreign.push(req.url()); });
    tab.on("pageerror", (e) => problems.push(String(e)));
    tab.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    tab.on("response", (r) => { if (r.status() >= 400) errors.push(r.status() + " " + r.url()); });
  };
  const openTab = async (ctx, errors = []) => {
    const tab = await ctx.newPage();
    await tab.setViewport({ width: 1280, height: 860 });
    watch(tab, errors);
    await tab.goto(base + "/console", { waitUntil: "load" });
    await tab.waitForFunction(() => document.querySelector("#threads").children.length || /no threads/.test(document.querySelector("#threads").textContent), { timeout: 10000 });
    return tab;
  };
  const idle = (tab, want = "finished") => tab.waitForFunction((w) => document.querySelector("#state").textContent === w, { timeout: 20000 }, want);
  const say = async (tab, text) => { await tab.$eval("#input", (e, t) => { e.value = t; }, text); await tab.click("#send"); };

  await step("a fresh tab asks the server nothing that answers 404", async () => {
    const ctx = await browser.createBrowserContext();
    const errors = [];
    const tab = await openTab(ctx, errors);
    await new Promise((r) => setTimeout(r, 500));
    if (errors.length) fail("fresh tab", errors.join(" | "));
    await ctx.close();
  });

  await step("a long status neither reflows the header nor pushes Send below the fold", async () => {
    const before = await page.$eval("header", (h) => h.getBoundingClientRect().height);
    await page.$eval("#state", (s) => { s.textContent = "error: " + "A_VERY_LONG_STATUS ".repeat(60); });
    const after = await page.evaluate(() => ({ header: document.querySelector("header").getBoundingClientRect().height,
      send: document.querySelector("#send").getBoundingClientRect().bottom, stop: document.querySelector("#stop").getBoundingClientRect().bottom, h: innerHeight }));
    await shot("12-long-status");
    await page.$eval("#state", (s) => { s.textContent = "finished"; });
    if (after.header !== before) fail("long status", `header ${before} → ${after.header}`);
    if (after.send > after.h || after.stop > after.h) fail("long status", `Send/Stop at ${after.send}/${after.stop} of ${after.h}`);
  });

  await step("a turn sent from another device shows; a thread deleted elsewhere shows as gone", async () => {
    const thread = await page.$eval("#thread", (e) => e.value);
    const users = await page.$$eval("#log .msg.user", (e) => e.length);
    const tab = await openTab(other);
    await tab.click(`#threads .thread[data-thread-id="${thread}"] .title`);
    await tab.waitForFunction((n) => document.querySelectorAll("#log .msg.user").length >= n, { timeout: 10000 }, users);
    await say(tab, "hello from the other device");
    await idle(tab);
    await page.reload({ waitUntil: "load" });
    await page.waitForFunction(() => [...document.querySelectorAll("#log .msg.user")].some((e) => e.textContent === "hello from the other device"), { timeout: 10000 })
      .catch(async () => fail("server wins", `this tab shows ${JSON.stringify(await page.$$eval("#log .msg.user", (e) => e.map((x) => x.textContent)))}`));
    // A thread of this tab, deleted from the other device.
    await page.click("#newThread");
    await say(page, "a thread deleted elsewhere");
    await idle(page);
    const doomed = await page.$eval("#thread", (e) => e.value);
    const r = await tab.evaluate(async (id) => (await fetch("/threads/" + encodeURIComponent(id), { method: "DELETE" })).status, doomed);
    if (r !== 204) fail("delete elsewhere", `DELETE answered ${r}`);
    await page.reload({ waitUntil: "load" });
    await page.waitForSelector("#log .gone", { timeout: 10000 })
      .catch(async () => fail("gone", `this tab shows ${await page.$eval("#log", (e) => e.innerText)}`));
    if (await page.$$eval("#log .msg.user", (e) => e.length)) fail("gone", "the deleted thread's turns are still shown");
    await shot("13-gone");
    await tab.close();
    await page.click(`#threads .thread[data-thread-id="${thread}"] .title`);
    await page.waitForFunction((n) => document.querySelectorAll("#log .msg.user").length > n, { timeout: 10000 }, users);
  });

  await step("Raw events are cleared when another thread is opened", async () => {
    if (!(await page.$$eval("#raw pre", (p) => p.length))) {
      await say(page, "hello"); await idle(page);
    }
    await page.click("#newThread");
    await say(page, "hello");
    await idle(page);
    const mine = await page.$eval("#thread", (e) => e.value);
    const rows = await page.$$eval("#threads .thread", (r) => r.map((x) => x.dataset.threadId));
    const another = rows.find((id) => id !== mine);
    await page.click(`#threads .thread[data-thread-id="${another}"] .title`);
    await page.waitForFunction((id) => document.querySelector("#thread").value === id, { timeout: 10000 }, another);
    const left = await page.$$eval("#raw pre", (p) => p.map((x) => x.textContent));
    if (left.length) fail("raw", `${left.length} raw events of the other thread left, e.g. ${left[0].slice(0, 80)}`);
  });

  await step("threads are found by title and by status; the waiting one has a badge", async () => {
    await page.click("#newThread");
    await say(page, "create a file (permission) zebra");
    await page.waitForSelector(".interrupt button[data-decision=allow_once]", { timeout: 20000 });
    const waiting = await page.$eval("#thread", (e) => e.value);
    await page.waitForSelector(`#threads .thread[data-thread-id="${waiting}"] .badge`, { timeout: 10000 })
      .catch(() => fail("badge", "the waiting thread has no badge"));
    const badges = await page.$$eval("#threads .thread .badge", (b) => b.length);
    if (badges !== 1) fail("badge", `${badges} badges`);
    await page.type("#threadQ", "ZEBRA");
    await page.waitForFunction((id) => { const r = [...document.querySelectorAll("#threads .thread")]; return r.length === 1 && r[0].dataset.threadId === id; }, { timeout: 10000 }, waiting)
      .catch(async () => fail("search", `rows ${JSON.stringify(await page.$$eval("#threads .thread .title", (r) => r.map((x) => x.textContent)))}`));
    await page.$eval("#threadQ", (e) => { e.value = ""; e.dispatchEvent(new Event("input")); });
    await page.select("#threadStatus", "interrupted");
    await page.waitForFunction((id) => { const r = [...document.querySelectorAll("#threads .thread")]; return r.length === 1 && r[0].dataset.threadId === id; }, { timeout: 10000 }, waiting)
      .catch(async () => fail("status filter", `rows ${JSON.stringify(await page.$$eval("#threads .thread .title", (r) => r.map((x) => x.textContent)))}`));
    await page.select("#threadStatus", "idle");
    await page.waitForFunction((id) => { const r = [...document.querySelectorAll("#threads .thread")]; return r.length > 0 && r.every((x) => x.dataset.threadId !== id); }, { timeout: 10000 }, waiting)
      .catch(() => fail("status filter", "idle lists the waiting thread"));
    await page.select("#threadStatus", "");
    await page.waitForSelector(`#threads .thread[data-thread-id="${waiting}"]`, { timeout: 10000 });
    await shot("14-search-badge");
  });

  await step("a thread is renamed in place; a refused title says why", async () => {
    const thread = await page.$eval("#thread", (e) => e.value);
    const row = `#threads .thread[data-thread-id="${thread}"]`;
    // The list is drawn again from the server now and then (its copy wins): a row taken
    // just before that is gone when clicked ("Node is either not clickable or not an
    // Element"). Click until the rename field is open; once open, redraws keep it.
    for (let i = 0; !(await page.$(row + " input.rename")); i++) {
      if (i === 40) fail("rename", "the Rename button never opened a field");
      await page.click(row + " .rename-button").catch(() => {});
      await new Promise((r) => setTimeout(r, 250));
    }
    await page.$eval(row + " input.rename", (e) => { e.value = "x".repeat(201); });
    await page.focus(row + " input.rename");
    await page.keyboard.press("Enter");
    await page.waitForFunction((sel) => /INVALID_INPUT/.test(document.querySelector(sel + " .rename-error")?.textContent || ""), { timeout: 10000 }, row)
      .catch(() => fail("rename", "a title over 200 characters was not refused visibly"));
    await page.$eval(row + " input.rename", (e) => { e.value = ""; });
    await page.type(row + " input.rename", "Deploy the zebra site");
    await page.keyboard.press("Enter");
    await page.waitForFunction((sel) => document.querySelector(sel + " .title")?.textContent === "Deploy the zebra site", { timeout: 10000 }, row)
      .catch(async () => fail("rename", `the new title is not listed: ${await page.$eval(row, (e) => e.outerHTML).catch(() => "no row")}`));
    const listed = await (await fetch(base + "/threads/" + encodeURIComponent(thread))).json();
    if (listed.title !== "Deploy the zebra site") fail("rename", `the server has ${JSON.stringify(listed.title)}`);
    await shot("15-renamed");
  });

  await step("a waiting thread is answered from another device, and its run resumes", async () => {
    const thread = await page.$eval("#thread", (e) => e.value);
    const tab = await openTab(other);
    const row = `#threads .thread[data-thread-id="${thread}"]`;
    await tab.waitForSelector(row + " .badge", { timeout: 10000 });
    await clickRow(tab, row + " .title");
    await tab.waitForSelector(".interrupt button[data-decision=allow_once]", { timeout: 10000 })
      .catch(async () => fail("answer elsewhere", `no answer form: ${await tab.$eval("#log", (e) => e.innerText)}`));
    const t = await tab.$eval(".interrupt .title", (e) => e.textContent).catch(() => "");
    if (t !== "Run a local shell command") fail("answer elsewhere", `title ${JSON.stringify(t)}`);
    await tab.screenshot({ path: join(SHOTS, "16-answer-elsewhere.png"), fullPage: true });
    await tab.click(".interrupt button[data-decision=allow_once]");
    await idle(tab);
    if (!(await tab.$$eval("#log pre.result", (r) => r.length))) fail("answer elsewhere", "no tool result after the answer");
    const listed = await (await fetch(base + "/threads/" + encodeURIComponent(thread))).json();
    if (listed.status !== "idle") fail("answer elsewhere", `thread ${listed.status}`);
    // This tab's own form of the answered interrupt no longer takes an answer.
    await page.reload({ waitUntil: "load" });
    await page.waitForFunction(() => [...document.querySelectorAll(".interrupt button")].every((b) => b.disabled), { timeout: 10000 })
      .catch(() => fail("answer elsewhere", "the answered form still takes an answer in the first tab"));
    await tab.close();
    await say(page, "hello");
    await idle(page);
  });

  // The kernel's input kinds that have forms of their own, on a second server with no dialect
  // flag: the console declares AG-UI 1.0, so it gets a deployment confirmation (raised in 1.0
  // only) from a default server (issue 57).
  const base10 = await startDemo(BIN, started, { env: { IAC_CODE_AGUI_ALLOWED_CWDS: work } });
  const v1 = await browser.newPage();
  await v1.setViewport({ width: 1280, height: 860 });
  listen(v1, new URL(base10).origin);
  await v1.goto(base10 + "/console", { waitUntil: "load" });
  const shot1 = (name) => v1.screenshot({ path: join(SHOTS, name + ".png"), fullPage: true });
  // Runs ended so far: a finished run, a cancelled one, an error.
  const runEnds = () => v1.$$eval("#log .status.ok, #log .status.bad, #log .msg.error", (x) => x.length);
  /** Wait until a run after `before` ended and the console is idle in state `want`. */
  const settled = (step, before, want = "finished") => v1.waitForFunction((b, w) =>
    document.querySelector("#state").textContent === w && !document.querySelector("#send").disabled
      && document.querySelectorAll("#log .status.ok, #log .status.bad, #log .msg.error").length > b,
  { timeout: 20000 }, before, want)
    .catch(async () => fail(step, `not ${want}: state ${await v1.$eval("#state", (e) => e.textContent)}; log ${await v1.$eval("#log", (e) => e.innerText.slice(-600))}`));
  /** The live (not yet answered) interrupt form, once shown, as its parts. */
  const liveForm = async (step, ready) => {
    await v1.waitForSelector(".interrupt " + ready + ":not([disabled])", { timeout: 20000 })
      .catch(async () => fail(step, `no form with ${ready}: ${await v1.$eval("#log", (e) => e.innerText.slice(-600))}`));
    await formInView(v1, step);
    return v1.evaluate(() => {
      const b = [...document.querySelectorAll("#log .interrupt")].pop();
      return {
        prompt: b.querySelector(".prompt")?.textContent || "",
        summary: [...b.querySelectorAll(".summary")].map((x) => x.className + ": " + x.textContent),
        buttons: [...b.querySelectorAll("button")].map((x) => ({ text: x.textContent, action: x.dataset.action, id: x.dataset.selectedId, select: x.dataset.select })),
        free: !!b.querySelector("input.free"),
        live: b.querySelectorAll("button:not([disabled])").length,
      };
    });
  };
  /** What the assistant said after the last interrupt (the answered run's text). */
  const saidAfter = () => v1.evaluate(() => {
    const last = [...document.querySelectorAll("#log .interrupt")].pop();
    return [...document.querySelectorAll("#log .msg.assistant")]
      .filter((m) => !last || last.compareDocumentPosition(m) & Node.DOCUMENT_POSITION_FOLLOWING)
      .map((m) => m.textContent).join(" ");
  });
  // Regression: an answered form's buttons were disabled but looked as live as before.
  const answered = () => v1.evaluate(() => [...[...document.querySelectorAll("#log .interrupt")].pop().querySelectorAll("button, input")]
    .every((x) => x.disabled && Number(getComputedStyle(x).opacity) < 1));
  // Dismiss is not the kernel's Cancel action: it cancels the run itself, and the form takes no answer.
  const dismissed = async (tag, text, live) => {
    const n = await runEnds();
    await say(v1, text);
    await liveForm(tag, live);
    await v1.click(".interrupt button:not([disabled])::-p-text(Dismiss)");
    await settled(tag, n, "cancelled");
    if (!(await answered())) fail(tag, "the dismissed form takes, or looks as if it takes, an answer");
  };

  await step("1.0: a deployment confirmation shows the solution and its actions; Confirm finishes the run", async () => {
    const n = await runEnds();
    await say(v1, "pipeline confirm");
    const f = await liveForm("confirm", "button[data-action=confirm]");
    if (!f.prompt.startsWith("Choose the next action")) fail("confirm", `prompt ${JSON.stringify(f.prompt)}`);
    const solution = f.summary.find((s) => s.includes("deployment")) || "";
    if (!solution.includes("Two ECS instances behind an SLB.") || !solution.includes("templates/web.yaml")) fail("confirm", `solution shown as ${JSON.stringify(f.summary)}`);
    const cost = f.summary.find((s) => s.startsWith("summary cost")) || "";
    if (!cost.includes("¥420 a month") || !cost.includes("InstanceType=ecs.g7.large")) fail("confirm", `cost and parameters shown as ${JSON.stringify(f.summary)}`);
    const actions = f.buttons.filter((b) => b.action).map((b) => b.action + "=" + b.text).join(",");
    if (actions !== "confirm=Confirm deployment,reselect=Choose another solution,cancel=Cancel") fail("confirm", `actions ${actions}`);
    if (!f.free || !f.buttons.some((b) => b.text === "Answer")) fail("confirm", "no free-text answer");
    await shot1("17-confirmation");
    await v1.click(".interrupt button[data-action=confirm]:not([disabled])");
    await settled("confirm", n);
    if (!(await answered())) fail("confirm", "the answered form takes, or looks as if it takes, an answer");
    const said = await saidAfter();
    if (!said.includes("Action confirm; parameter overrides {}.")) fail("confirm", `the kernel said ${JSON.stringify(said)}`);
    await shot1("18-confirmed");
  });

  await step("1.0: a deployment confirmation answered by its Cancel action, by free text, dismissed", async () => {
    let n = await runEnds();
    await say(v1, "pipeline confirm");
    await liveForm("confirm-cancel", "button[data-action=cancel]");
    await v1.click(".interrupt button[data-action=cancel]:not([disabled])");
    await settled("confirm-cancel", n);
    let said = await saidAfter();
    if (!said.includes("Action cancel; parameter overrides {}.")) fail("confirm-cancel", `the kernel said ${JSON.stringify(said)}`);
    n = await runEnds();
    await say(v1, "pipeline confirm");
    await liveForm("confirm-free", "input.free");
    await v1.type(".interrupt input.free:not([disabled])", "wait until Monday");
    await v1.click(".interrupt button.free:not([disabled])");
    await settled("confirm-free", n);
    said = await saidAfter();
    if (!said.includes("Not a structured confirmation: wait until Monday")) fail("confirm-free", `the kernel said ${JSON.stringify(said)}`);
    await dismissed("confirm-dismiss", "pipeline confirm", "button[data-action=confirm]");
    await shot1("19-confirmation-cancel-free-dismiss");
  });

  await step("1.0: a candidate choice: a button per candidate, one picked, then one dismissed", async () => {
    const n = await runEnds();
    await say(v1, "compare candidates");
    const f = await liveForm("candidates", "button[data-selected-id]");
    if (!f.prompt.startsWith("Which design should I deploy?")) fail("candidates", `prompt ${JSON.stringify(f.prompt)}`);
    const picks = f.buttons.filter((b) => b.id !== undefined).map((b) => b.id + "=" + b.text).join(",");
    if (picks !== "0=Candidate 1: ECS behind an SLB,1=Candidate 2: Function Compute") fail("candidates", `candidates ${picks}`);
    if (!f.buttons.some((b) => b.text === "Dismiss")) fail("candidates", "no Dismiss");
    await shot1("20-candidates");
    await v1.click('.interrupt button[data-selected-id="1"]:not([disabled])');
    await settled("candidates", n);
    const said = await saidAfter();
    if (!said.includes("Deploying Candidate 2: Function Compute.")) fail("candidates", `the kernel said ${JSON.stringify(said)}`);
    await dismissed("candidates-dismiss", "compare candidates again", "button[data-selected-id]");
    await shot1("21-candidates-dismissed");
  });

  await step("1.0: a cloud resource selection in a pipeline step: selected, then one canceled", async () => {
    let n = await runEnds();
    await say(v1, "pipeline select a vswitch");
    const f = await liveForm("pipeline-select", "input.sel-value");
    const shown = f.summary.find((s) => s.includes("selector")) || "";
    if (!shown.includes("ALIYUN::VPC::VSwitch::VSwitchId") || !shown.includes("RegionId=cn-hangzhou")) fail("pipeline-select", `selector shown as ${JSON.stringify(f.summary)}`);
    const texts = f.buttons.map((b) => b.text);
    if (!texts.includes("Select") || !texts.includes("Cancel") || texts.includes("Dismiss")) fail("pipeline-select", `buttons ${texts}`);
    await v1.type(".interrupt input.sel-value:not([disabled])", "vsw-main1");
    await v1.type(".interrupt input.sel-label:not([disabled])", "Main VSwitch");
    await v1.click(".interrupt button[data-select=selected]:not([disabled])");
    await settled("pipeline-select", n);
    let said = await saidAfter();
    if (!said.includes("Using Main VSwitch.")) fail("pipeline-select", `the kernel said ${JSON.stringify(said)}`);
    n = await runEnds();
    await say(v1, "pipeline select another");
    await liveForm("pipeline-select-cancel", "button[data-select=canceled]");
    await v1.click(".interrupt button[data-select=canceled]:not([disabled])");
    await settled("pipeline-select-cancel", n);
    said = await saidAfter();
    if (!said.includes("No VSwitch chosen")) fail("pipeline-select-cancel", `the kernel said ${JSON.stringify(said)}`);
    await shot1("22-pipeline-selection");
  });

  // Regression (issue 57): every turn after the first showed a `MESSAGES_SNAPSHOT` line, the
  // safety net restating the conversation this page sends only its new message of.
  await step("1.0: the snapshot restating the page's own conversation is no line in the log", async () => {
    const sent = await v1.$$eval("#raw pre", (p) => p.filter((x) => x.textContent.includes('"type":"MESSAGES_SNAPSHOT"')).length);
    if (!sent) fail("snapshot", "no MESSAGES_SNAPSHOT reached the page: nothing was checked");
    const lines = await v1.$$eval("#log .meta", (m) => m.filter((x) => x.textContent === "MESSAGES_SNAPSHOT").length);
    if (lines) fail("snapshot", `${lines} MESSAGES_SNAPSHOT lines in the log for ${sent} snapshots`);
  });

  await step("1.0: a reload while a confirmation waits offers its form once, answered after the reload", async () => {
    await say(v1, "pipeline confirm");
    await liveForm("confirm-reload", "button[data-action=reselect]");
    await v1.reload({ waitUntil: "load" });
    const f = await liveForm("confirm-reload", "button[data-action=reselect]");
    const forms = await v1.$$eval(".interrupt", (b) => b.filter((x) => x.querySelector("button:not([disabled])")).length);
    if (forms !== 1) fail("confirm-reload", `${forms} live forms after the reload`);
    if (!f.summary.some((s) => s.includes("Two ECS instances behind an SLB."))) fail("confirm-reload", `solution shown as ${JSON.stringify(f.summary)}`);
    const n = await runEnds();
    await v1.click(".interrupt button[data-action=reselect]:not([disabled])");
    await settled("confirm-reload", n);
    const said = await saidAfter();
    if (!said.includes("Action reselect; parameter overrides {}.")) fail("confirm-reload", `the kernel said ${JSON.stringify(said)}`);
    const thread = await v1.$eval("#thread", (e) => e.value);
    await v1.waitForFunction((id) => { const r = document.querySelector(`#threads .thread[data-thread-id="${id}"]`); return r && !r.querySelector(".badge"); }, { timeout: 10000 }, thread)
      .catch(() => fail("confirm-reload", "the answered thread is still listed as waiting"));
    await shot1("23-confirmation-after-reload");
    await v1.close();
  });

  await step("no external resource, no CSP violation or script error", async () => {
    if (!scrolledForms) fail("form in view", "no form was checked in a log that scrolls");
    if (foreign.length) fail("resources", foreign.join(", "));
    if (problems.length) fail("errors", problems.join(" | "));
    const curl = await page.$eval("#curl", (e) => e.value);
    if (!curl.startsWith("curl -sN " + origin)) fail("curl", curl);
  });
  console.log(`browser-test: ${passed} passed, 0 failed (screenshots in ${SHOTS})`);
} catch (e) {
  console.error(e.stack || e);
  console.error(`browser-test: ${passed} passed, 1 failed (screenshots so far in ${SHOTS})`);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  for (const p of started) p.kill("SIGINT");
  rmSync(work, { recursive: true, force: true });
}
