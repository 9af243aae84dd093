// The shipped client package (`clients/js`, issue 46 item 2) in headless Chromium: a page on
// another loopback origin (`--cors-origins`) loads `iac-agui-client` with `@ag-ui/client` 1.0,
// bundled as an application would bundle them (run.sh builds `client.js` with esbuild), runs a
// turn, and a second agent on the same thread loads the history before its own first message.
// Any warning or error either client prints in the page fails the step.
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { startServer } from "./server.mjs";

const arg = (name) => process.argv[process.argv.indexOf(name) + 1];
const BIN = arg("--bin"), CHROMIUM = arg("--chromium"), BUNDLE = arg("--bundle");
const TOKEN = "client-browser-token";
const started = [], pages = [];

function fail(step, what) {
  throw new Error(`BROWSER TEST FAILED [client: ${step}]: ${what}`);
}

const server = (args, env) => startServer(BIN, started, args, env);

/** The application's page and its bundle, on a loopback port of their own. */
function appServer() {
  const bundle = readFileSync(BUNDLE);
  return new Promise((resolve) => {
    const s = createServer((req, res) => {
      if (req.url === "/client.js") {
        res.writeHead(200, { "content-type": "text/javascript" });
        return res.end(bundle);
      }
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end('<!doctype html><title>app</title><script type="module" src="/client.js"></script>');
    });
    pages.push(s);
    s.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${s.address().port}`));
  });
}

/** In the page: a turn through one agent, then a fresh agent's first turn on the thread. */
async function twoAgents(url, token) {
  const msg = (content) => ({ id: `m-${Math.random().toString(36).slice(2)}`, role: "user", content });
  const shape = (a) => a.messages.map((m) => `${m.role}:${typeof m.content === "string" ? m.content : ""}`);
  // A new conversation: the agent makes up its thread id (and asks the server for nothing).
  const first = new window.IacCodeAgent({ url, token });
  first.addMessage(msg("hello"));
  await first.runAgent();
  // Another tab opens that thread: its history first, then its own message.
  const second = new window.IacCodeAgent({ url, threadId: first.threadId, token });
  await second.connectAgent();
  const loaded = shape(second);
  second.addMessage(msg("again"));
  await second.runAgent();
  // A fresh agent that sends at once (no connectAgent): the thread is loaded before its run.
  const third = new window.IacCodeAgent({ url, threadId: first.threadId, token });
  third.addMessage(msg("third"));
  await third.runAgent();
  return { first: shape(first), loaded, second: shape(second), third: shape(third) };
}

const work = mkdtempSync(join(tmpdir(), "iac-agui-browser-client-"));
let browser;
try {
  const t0 = Date.now();
  const app = await appServer();
  const env = { IAC_CODE_AGUI_ALLOWED_CWDS: work, IAC_CODE_AGUI_AUTH_TOKEN: TOKEN };
  // No dialect flag: the package's HttpAgent declares 1.0 (issue 57).
  const base = await server(["--demo", "--cors-origins", app], env);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage();
  const printed = [];
  page.on("console", (m) => { if (m.type() === "warn" || m.type() === "error") printed.push(m.text()); });
  page.on("pageerror", (e) => printed.push(String(e)));
  await page.goto(app + "/", { waitUntil: "load" });
  await page.waitForFunction(() => typeof window.IacCodeAgent === "function", { timeout: 10000 })
    .catch(() => fail("load", `the bundle did not define IacCodeAgent: ${printed.join(" | ")}`));
  const r = await page.evaluate(twoAgents, base + "/", TOKEN);
  if (printed.length) fail("warnings", printed.join(" | "));
  if (r.first.length < 2 || r.first[0] !== "user:hello" || !r.first.at(-1).startsWith("assistant:")) fail("run", JSON.stringify(r.first));
  if (JSON.stringify(r.loaded) !== JSON.stringify(r.first)) fail("connect", `loaded ${JSON.stringify(r.loaded)}, ran ${JSON.stringify(r.first)}`);
  const n = r.first.length;
  const order = JSON.stringify(r.second.slice(0, n)) === JSON.stringify(r.first)
    && r.second[n] === "user:again" && r.second.at(-1).startsWith("assistant:") && r.second.length > n + 1;
  if (!order) fail("history first", JSON.stringify(r.second));
  const m = r.second.length;
  const fresh = JSON.stringify(r.third.slice(0, m)) === JSON.stringify(r.second)
    && r.third[m] === "user:third" && r.third.at(-1).startsWith("assistant:");
  if (!fresh) fail("a fresh agent's first send", JSON.stringify(r.third));
  console.log(`ok   client: the shipped package runs in a page, and a fresh agent shows the history before its message (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
} catch (e) {
  console.error(String(e && e.stack || e));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  for (const p of started) p.kill("SIGINT");
  for (const s of pages) s.close();
  rmSync(work, { recursive: true, force: true });
}
