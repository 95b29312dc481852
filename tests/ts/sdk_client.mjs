// The official TypeScript MCP SDK as a client of chatroom, run by
// tests/ts_sdk.rs: node sdk_client.mjs URL TOKEN. Prints one JSON object.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "chatroom-ts-test", version: "1.0.0" });
await client.connect(transport);

const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  return { isError: r.isError === true, body: JSON.parse(r.content[0].text), structured: r.structuredContent };
};

const tools = await client.listTools();
const posted = await call("post_message", { body: "hello from typescript" });
const messages = await call("read_messages", {});
const created = await call("create_task", { title: "typed task" });
const claimed = await call("claim_task", { task_id: created.body.created.id });
const again = await call("claim_task", { task_id: created.body.created.id });
const refused = await call("post_message", { body: 42 });

console.log(JSON.stringify({
  server: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  posted,
  messages,
  created,
  claimed,
  again,
  refused,
}));
await client.close();
