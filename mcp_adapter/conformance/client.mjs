// The official TypeScript SDK client (@modelcontextprotocol/sdk, pinned in package-lock.json)
// against our MCP server, driven by mcp_adapter/tests/test_ts_client.py:
//   MCP_URL, MCP_TOKEN        the streamable-HTTP endpoint and a bearer token (pasted)
//   MCP_CALLS                 JSON [[tool, arguments], ...] to call in turn
//   MCP_TASK                  JSON [tool, arguments]: then call it as a task (a task-augmented
//                             tools/call on 2025-11-25, the SDK's experimental Tasks support),
//                             polling tasks/get until it ends and reading tasks/result
//   MCP_AFTER                 JSON [[tool, arguments], ...] to call after the task
//   MCP_SUBSCRIBE             a resource URI to subscribe to; the script waits for its update
// An argument "$<tool>.<field>" is that field of the last structuredContent of <tool> ("$task."
// for the task's result), so a start can use the quote the script got.
// One JSON line per step on stdout: tools, call (the SDK validates structuredContent against
// the tool's outputSchema and throws when it does not match), task_created, task_status (each
// poll), task_result or task_error, subscribed, updated.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  ResourceUpdatedNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

const say = (line) => process.stdout.write(JSON.stringify(line) + '\n');
const { MCP_URL, MCP_TOKEN, MCP_CALLS = '[]', MCP_TASK, MCP_AFTER = '[]', MCP_SUBSCRIBE } =
  process.env;
const client = new Client({ name: 'picnic-ts-client-check', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${MCP_TOKEN}` } }
});
await client.connect(transport);
say({
  event: 'connected',
  protocolVersion: transport.protocolVersion,
  serverInfo: client.getServerVersion(),
  capabilities: client.getServerCapabilities()
});

const { tools } = await client.listTools();
say({ event: 'tools', tools });

const last = {}; // tool (or 'task') -> its last structuredContent

const fill = (value) => {
  if (typeof value === 'string' && value.startsWith('$')) {
    const [source, field] = value.slice(1).split('.');
    return last[source]?.[field] ?? value;
  }
  if (Array.isArray(value)) return value.map(fill);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v)]));
  }
  return value;
};

async function callEach(calls) {
  for (const [name, args] of calls) {
    try {
      const result = await client.callTool({ name, arguments: fill(args) });
      if (result.structuredContent) last[name] = result.structuredContent;
      say({ event: 'call', tool: name, ...result });
    } catch (error) {
      say({ event: 'call', tool: name, thrown: String(error) });
    }
  }
}

await callEach(JSON.parse(MCP_CALLS));

if (MCP_TASK) {
  const [name, args] = JSON.parse(MCP_TASK);
  const stream = client.experimental.tasks.callToolStream(
    { name, arguments: fill(args) },
    CallToolResultSchema,
    { task: { ttl: 600000 } }
  );
  for await (const message of stream) {
    if (message.type === 'taskCreated') say({ event: 'task_created', task: message.task });
    else if (message.type === 'taskStatus') say({ event: 'task_status', task: message.task });
    else if (message.type === 'result') {
      if (message.result.structuredContent) last.task = message.result.structuredContent;
      say({ event: 'task_result', tool: name, ...message.result });
    } else say({ event: 'task_error', tool: name, error: String(message.error) });
  }
}

await callEach(JSON.parse(MCP_AFTER));

if (MCP_SUBSCRIBE) {
  const updated = new Promise((resolve) => {
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      if (n.params.uri === MCP_SUBSCRIBE) resolve(n.params.uri);
    });
  });
  await client.subscribeResource({ uri: MCP_SUBSCRIBE });
  say({ event: 'subscribed', uri: MCP_SUBSCRIBE });
  const uri = await updated;
  const read = await client.readResource({ uri });
  say({ event: 'updated', uri, contents: read.contents });
}

await transport.terminateSession();
await client.close();
