// iac-agui-client: `HttpAgent` from @ag-ui/client 1.0 for an iac-agui server.
//   - the iac-code properties (`forwardedProps.iacCode`) are sent only when given, and only
//     the fields given (never `undefined` or `null`): without them the server's
//     `--default-cwd` supplies the workspace;
//   - the thread is loaded from the server (`connectAgent()`) before the first run, so a new
//     message follows the conversation instead of preceding it;
//   - Stop (`stop()`, and `abortRun()`) cancels the execution through the cancel route, so the
//     thread is free at once even on a server with `--disconnect-grace`.
// No dependency besides @ag-ui/client: the observables are its own (`runHttpRequest`).
import { EventType, HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const SESSION_EVENT = "iac-code.session.v1";
const PAGE = 200;

/** Records the run's session (executionId, rosInvocationId) on the agent that runs. */
const tracker = {
  onRunStartedEvent({ agent }) {
    agent.session = null;
  },
  onCustomEvent({ event, agent }) {
    if (event.name === SESSION_EVENT && event.value && typeof event.value.executionId === "string") {
      agent.session = event.value;
    }
  },
};

/** `value` without its `undefined` and `null` entries (an optional field is omitted). */
function defined(value) {
  return Object.fromEntries(Object.entries(value ?? {}).filter(([, v]) => v !== undefined && v !== null));
}

/** One SSE frame per event, LF only. */
function sse(events) {
  return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("");
}

/** An `HttpAgent` for iac-agui: `new IacCodeAgent({ url, threadId, token, cwd })`. */
export class IacCodeAgent extends HttpAgent {
  /** @param {import("./index.d.ts").IacCodeAgentConfig} config */
  constructor(config = {}) {
    const { token, cwd, rosInvocationId, iacCode, loadThread = true, ...rest } = config;
    const headers = { ...rest.headers };
    if (token) headers.Authorization = `Bearer ${token}`;
    super({ ...rest, headers });
    this.cwd = cwd;
    this.rosInvocationId = rosInvocationId;
    this.iacCode = iacCode;
    // An agent that made up its own thread id has nothing on the server to load (and asking
    // would print a red 404 in a browser's console).
    this.loadThread = loadThread && rest.threadId != null;
    this.threadLoaded = false;
    this.session = null;
    this.subscribe(tracker);
  }

  clone() {
    const agent = super.clone();
    for (const k of ["cwd", "rosInvocationId", "iacCode", "loadThread", "threadLoaded", "session"]) agent[k] = this[k];
    return agent;
  }

  /** The `forwardedProps.iacCode` of a run on `threadId`, or `undefined` when nothing is set
   * (the server's `--default-cwd` then supplies all of it). */
  iacCodeFor(threadId) {
    const given = { ...defined(this.iacCode), ...defined({ cwd: this.cwd, rosInvocationId: this.rosInvocationId }) };
    if (Object.keys(given).length === 0) return undefined;
    return { schemaVersion: 1, rosInvocationId: `agui-client-${threadId}`, ...given };
  }

  /** The agent's own properties only: an `iacCode` in the run's `forwardedProps` (a browser's,
   * through CopilotKit) is dropped, so the workspace is never the caller's choice. */
  run(input) {
    const { iacCode: _dropped, iac_code: _droppedSnake, ...others } = input.forwardedProps ?? {};
    const iacCode = this.iacCodeFor(input.threadId);
    const forwardedProps = iacCode ? { ...others, iacCode } : others;
    return super.run({ ...input, forwardedProps });
  }

  /** Loads the thread first (once per agent) unless `loadThread: false`: the messages added
   * before the first run follow the server's conversation. */
  async runAgent(parameters, subscriber) {
    if (this.loadThread && !this.threadLoaded) {
      const unsent = this.messages;
      await this.connectAgent();
      const known = new Set(this.messages.map((m) => m.id));
      this.setMessages([...this.messages, ...unsent.filter((m) => !known.has(m.id))]);
    }
    return super.runAgent(parameters, subscriber);
  }

  /** `connectAgent()`: the conversation the server keeps (`GET /threads/{threadId}/messages`,
   * every page) as one `MESSAGES_SNAPSHOT`; a thread the server does not know is empty. */
  connect(input) {
    const events = runHttpRequest(async () => {
      const messages = [];
      for (let before = null; ; ) {
        const page = new URL(`threads/${encodeURIComponent(input.threadId)}/messages`, this.url);
        page.searchParams.set("limit", String(PAGE));
        if (before) page.searchParams.set("before", before);
        const r = await this.fetch(String(page), { headers: { ...this.headers, Accept: "application/json" } });
        if (r.status === 404) break;
        if (!r.ok) return r;
        const body = await r.json();
        messages.unshift(...(body.messages ?? []));
        if (!body.nextCursor) break;
        before = body.nextCursor;
      }
      this.threadLoaded = true;
      const started = { type: EventType.RUN_STARTED, threadId: input.threadId, runId: input.runId };
      const finished = { type: EventType.RUN_FINISHED, threadId: input.threadId, runId: input.runId };
      const snapshot = { type: EventType.MESSAGES_SNAPSHOT, messages };
      return new Response(sse([started, snapshot, finished]), {
        status: 200,
        headers: { "Content-Type": "text/event-stream" },
      });
    });
    return transformHttpEventStream(events, this.debugLogger);
  }

  /** Stop: cancels the running execution (the run then ends `cancelled` and the thread is
   * free at once); drops the request only when the cancel could not be sent. Resolves with
   * whether the server took the cancel. */
  async stop() {
    const s = this.session;
    let answered = false;
    if (s) {
      const route = new URL(`extensions/iac-code/v1/executions/${encodeURIComponent(s.executionId)}/cancel`, this.url);
      answered = await this.fetch(String(route), {
        method: "POST",
        headers: { ...this.headers, "Content-Type": "application/json" },
        body: JSON.stringify(defined({ threadId: s.threadId ?? this.threadId, rosInvocationId: s.rosInvocationId })),
      }).then(
        (r) => r.ok,
        () => false,
      );
    }
    if (!answered) super.abortRun();
    return answered;
  }

  /** What a UI's Stop (and CopilotKit) calls: `stop()`, without waiting. */
  abortRun() {
    void this.stop();
  }
}
