// The package's types (index.d.ts) as a TypeScript user meets them: checked by
// clients/js/test/run.sh with tsc --strict against @ag-ui/client 1.0's own types.
import { IacCodeAgent, type IacCodeAgentConfig } from "iac-agui-client";

const config: IacCodeAgentConfig = {
  url: "http://127.0.0.1:8000/",
  threadId: "t",
  token: "secret",
  cwd: "/srv/workspaces/a",
  iacCode: { model: "m", preferredLanguage: "en" },
  loadThread: true,
};
const agent = new IacCodeAgent(config);
agent.addMessage({ id: "m1", role: "user", content: "hello" });

export async function turn(): Promise<boolean> {
  await agent.connectAgent();
  const result = await agent.runAgent({ runId: "r1" });
  const count: number = result.newMessages.length;
  const execution: string | undefined = agent.session?.executionId;
  void count;
  void execution;
  const props = agent.iacCodeFor("t");
  const schema: 1 | undefined = props?.schemaVersion;
  void schema;
  const copy: IacCodeAgent = agent.clone();
  void copy;
  agent.abortRun();
  return agent.stop();
}
