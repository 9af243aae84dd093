// The official AG-UI TypeScript client pipeline (@ag-ui/client: HTTP request → SSE parse →
// schema validation → event-order verification) over one iac-agui run. Usage:
//   node ts_client.mjs URL BODY_JSON
// Prints one line per event type seen and exits non-zero if the client rejects the stream.
import { runHttpRequest, transformHttpEventStream, verifyEvents } from "@ag-ui/client";

const [url, body] = process.argv.slice(2);
const types = [];
const events$ = transformHttpEventStream(
  runHttpRequest(() =>
    fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body,
    }),
  ),
).pipe(verifyEvents(false));
events$.subscribe({
  next: (e) => types.push(e.type),
  error: (err) => {
    console.error(`TS CLIENT REJECTED the stream after ${types.length} events: ${err?.message ?? err}`);
    process.exit(1);
  },
  complete: () => {
    console.log(`ts-client ok: ${types.length} events: ${types.join(" ")}`);
    process.exit(0);
  },
});
