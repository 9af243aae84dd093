// What every browser test starts: iac-agui on a loopback port of its own.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

/** Start `bin` with `args`; resolves with its base URL once it listens. The process is added
 * to `started`, which the caller stops at the end. */
export function startServer(bin, started, args, env) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ["--port", "0", ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
    started.push(p);
    const rl = createInterface({ input: p.stderr });
    rl.on("line", (l) => {
      const m = l.match(/^iac-agui \S+ listening on (http:\/\/\S+)$/);
      if (m) resolve(m[1]);
    });
    p.on("exit", (code) => reject(new Error(`iac-agui exited ${code} before listening`)));
  });
}

/** `iac-agui --demo`, with `--agui-protocol protocol` when one is given (the dialect of requests
 * that declare none), then `extra` flags: a script needing a second server starts it here
 * rather than spelling the demo's flags again. */
export function startDemo(bin, started, { protocol, extra = [], env } = {}) {
  const dialect = protocol ? ["--agui-protocol", protocol] : [];
  return startServer(bin, started, ["--demo", ...dialect, ...extra], env);
}
