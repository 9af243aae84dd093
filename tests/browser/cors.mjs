// `--cors-origins` in headless Chromium (issue 46 item 1): a page served from another loopback
// port calls iac-agui with `fetch` (POST / with JSON and `Authorization`, the SSE stream read to
// its end); it works from the listed origin and is a CORS error from any other, or without the
// option.
import { createServer } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { startServer } from "./server.mjs";

const arg = (name) => process.argv[process.argv.indexOf(name) + 1];
const BIN = arg("--bin"), CHROMIUM = arg("--chromium");
const TOKEN = "cors-browser-token";
const started = [], pages = [];

function fail(step, what) {
  throw new Error(`BROWSER TEST FAILED [cors: ${step}]: ${what}`);
}

const server = (args, env) => startServer(BIN, started, args, env);

/** A static page on its own loopback port: another origin than the server's. */
function pageServer() {
  return new Promise((resolve) => {
    const s = createServer((_, res) => {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end("<!doctype html><title>another origin</title><p>cors test page</p>");
    });
    pages.push(s);
    s.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${s.address().port}`));
  });
}

/** In the page: one run through fetch, its SSE stream read to the end. */
async function runFromPage(url, token) {
  try {
    const r = await fetch(url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Accept: "text/event-stream",
        Authorization: `Bearer ${token}`,
        "X-Iac-Code-Thread-Id": "cors-thread",
      },
      body: JSON.stringify({
        threadId: "cors-thread", runId: `run-${Date.now()}`, state: {}, tools: [], context: [],
        messages: [{ id: `m-${Date.now()}`, role: "user", content: "hello" }], forwardedProps: {},
      }),
    });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let text = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    const types = [...text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]).type);
    return { ok: true, status: r.status, types, echoed: r.headers.get("x-iac-code-thread-id") };
  } catch (e) {
    return { ok: false, error: `${e.name}: ${e.message}` };
  }
}

const work = mkdtempSync(join(tmpdir(), "iac-agui-browser-cors-"));
let browser;
try {
  const t0 = Date.now();
  const listed = await pageServer(), other = await pageServer();
  const env = { IAC_CODE_AGUI_ALLOWED_CWDS: work, IAC_CODE_AGUI_AUTH_TOKEN: TOKEN };
  const [open, closed] = await Promise.all([
    server(["--demo", "--cors-origins", listed], env),
    server(["--demo"], env),
  ]);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage();
  const from = async (origin, base) => {
    await page.goto(origin + "/", { waitUntil: "load" });
    return page.evaluate(runFromPage, base + "/", TOKEN);
  };

  const ok = await from(listed, open);
  if (!ok.ok || ok.status !== 200) fail("listed", JSON.stringify(ok));
  if (ok.types[0] !== "RUN_STARTED" || ok.types.at(-1) !== "RUN_FINISHED") fail("listed", ok.types.join(","));
  if (ok.echoed !== "cors-thread") fail("listed", `exposed header not readable: ${ok.echoed}`);

  const refused = await from(other, open);
  if (refused.ok || !/TypeError/.test(refused.error)) fail("not listed", JSON.stringify(refused));

  const off = await from(listed, closed);
  if (off.ok || !/TypeError/.test(off.error)) fail("no option", JSON.stringify(off));

  console.log(`ok   cors: a page on another origin runs when listed, fails when not or without the option (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
} catch (e) {
  console.error(String(e && e.stack || e));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  for (const p of started) p.kill("SIGINT");
  for (const s of pages) s.close();
  rmSync(work, { recursive: true, force: true });
}
