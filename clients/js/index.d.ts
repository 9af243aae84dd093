import type { HttpAgent, HttpAgentConfig, RunAgentParameters, RunAgentResult, AgentSubscriber } from "@ag-ui/client";

/** The iac-code properties of a run (`forwardedProps.iacCode`); every field optional here:
 * the ones not set are not sent (the server's `--default-cwd` supplies the workspace). */
export interface IacCodeProps {
  rosInvocationId?: string;
  cwd?: string;
  model?: string;
  userId?: string;
  preferredLanguage?: string;
  runMode?: "normal" | "pipeline";
  pipelineName?: string;
  [key: string]: unknown;
}

/** The session of the running execution (the run's first `CUSTOM iac-code.session.v1`). */
export interface IacCodeSession {
  executionId: string;
  threadId?: string;
  rosInvocationId?: string;
  /** The request's W3C trace id (32 hex digits; 1.0 mode). */
  traceId?: string;
  [key: string]: unknown;
}

export interface IacCodeAgentConfig extends HttpAgentConfig {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** The workspace; omitted: the server's `--default-cwd`. */
  cwd?: string;
  /** Omitted: `agui-client-<threadId>` when other properties are sent, else the server's. */
  rosInvocationId?: string;
  /** Further iac-code properties (model, preferredLanguage, …). */
  iacCode?: IacCodeProps;
  /** Load the thread from the server before the first run (default true when `threadId` is
   * given; an agent that makes up its own thread id has nothing to load). */
  loadThread?: boolean;
}

/** `HttpAgent` for iac-agui: thread loaded before the first run, Stop through the cancel route. */
export declare class IacCodeAgent extends HttpAgent {
  constructor(config: IacCodeAgentConfig);
  cwd?: string;
  rosInvocationId?: string;
  iacCode?: IacCodeProps;
  loadThread: boolean;
  /** Whether the thread was loaded from the server (`connectAgent()` succeeded). */
  threadLoaded: boolean;
  /** The running execution's session, once its first event arrived; `null` before. */
  session: IacCodeSession | null;
  /** The `forwardedProps.iacCode` a run on `threadId` sends, or `undefined` (none sent). */
  iacCodeFor(threadId: string): (IacCodeProps & { schemaVersion: 1; rosInvocationId: string }) | undefined;
  runAgent(parameters?: RunAgentParameters, subscriber?: AgentSubscriber): Promise<RunAgentResult>;
  /** Cancels the running execution; drops the request only when the cancel could not be
   * sent. Resolves with whether the server took the cancel. */
  stop(): Promise<boolean>;
  /** `stop()`, without waiting. */
  abortRun(): void;
  clone(): IacCodeAgent;
}
