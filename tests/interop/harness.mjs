// What the interop's Node scripts share: every console.warn/console.error of the process is
// recorded (a stock client's warning is a failure), a named failure exits 1, and ids.

/** The warnings and errors printed so far (still shown). */
export const printed = [];
for (const level of ["warn", "error"]) {
  const original = console[level];
  console[level] = (...args) => {
    printed.push(`console.${level}: ${args.map(String).join(" ")}`);
    original.apply(console, args);
  };
}

/** A failure reporter whose lines start with `label`. */
export const failer = (label) => (flow, what) => {
  process.stdout.write(`${label} FAILED [${flow}]: ${what}\n`);
  process.exit(1);
};

export const id = (p) => `${p}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

/** `event` checked against its AG-UI schema in `schemas` (`@ag-ui/core/schemas`), strictly:
 * a key the schema does not know fails, naming `flow`. */
export function checkStrict(schemas, fail, flow, event) {
  const name = event.type.toLowerCase().split("_").map((w) => w[0].toUpperCase() + w.slice(1)).join("") + "EventSchema";
  const schema = schemas[name];
  if (!schema) fail(flow, `no 1.0 schema for ${event.type}`);
  const strict = typeof schema.strict === "function" ? schema.strict() : schema;
  const r = strict.safeParse(event);
  if (!r.success) fail(flow, `${event.type} does not parse strictly: ${r.error.message} ${JSON.stringify(event)}`);
}
