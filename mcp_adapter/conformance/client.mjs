// The official TypeScript SDK client (@modelcontextprotocol/sdk, pinned in package-lock.json)
// against our MCP server, driven by mcp_adapter/tests/test_ts_client.py:
//   MCP_URL, MCP_TOKEN        the streamable-HTTP endpoint and a bearer token (pasted)
//   MCP_CALLS                 JSON [[tool, arguments], ...] to call in turn
//   MCP_SUBSCRIBE             a resource URI to subscribe to; the script waits for its update
// One JSON line per step on stdout: tools, call (the SDK validates structuredContent against
// the tool's outputSchema and throws when it does not match), subscribed, updated.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const say = (line) => process.stdout.write(JSON.stringify(line) + '\n');
const { MCP_URL, MCP_TOKEN, MCP_CALLS = '[]', MCP_SUBSCRIBE } = process.env;

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

for (const [name, args] of JSON.parse(MCP_CALLS)) {
  try {
    const result = await client.callTool({ name, arguments: args });
    say({ event: 'call', tool: name, ...result });
  } catch (error) {
    say({ event: 'call', tool: name, thrown: String(error) });
  }
}

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
