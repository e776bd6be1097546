// An MCP agent session driven by the official TypeScript SDK client, for the
// end-to-end tests in peers_test.go (tsClient).
//
//   node ts-client.cjs PEERS_DIR SESSION_JSON
//
// PEERS_DIR is where scripts/deps.d/npm-peers.sh installed the SDK;
// SESSION_JSON is a file holding {"endpoint": {...}, "roots": [...],
// "steps": [{"method": ..., "params": ...}]}; the endpoint is
// {"transport": "stdio", "command": [...], "env": {...}} or
// {"transport": "http", "url": ..., "headers": {...}} (Streamable HTTP; headers,
// such as the proxy's agent token, go with every request). The client connects to the
// endpoint, runs the steps in order through the SDK's own methods (as an
// agent would) and prints one JSON document on stdout:
//
//   {"initialize": {...}, "steps": [{"method": ..., "result"|"error": ...}]}
//
// A step that fails records its error and the session goes on; a failure to
// connect exits 1 with the reason on stderr.
"use strict";

const { createRequire } = require("node:module");
const fs = require("node:fs");
const path = require("node:path");

async function main() {
  const [peersDir, sessionFile] = process.argv.slice(2);
  const sdk = createRequire(path.join(path.resolve(peersDir), "package.json"));
  const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
  const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
  const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const { ListRootsRequestSchema } = sdk("@modelcontextprotocol/sdk/types.js");

  const session = JSON.parse(fs.readFileSync(sessionFile, "utf8"));
  const ep = session.endpoint;
  let transport;
  switch (ep.transport) {
    case "stdio":
      transport = new StdioClientTransport({
        command: ep.command[0],
        args: ep.command.slice(1),
        env: ep.env || {},
        stderr: "inherit",
      });
      break;
    case "http":
      transport = new StreamableHTTPClientTransport(new URL(ep.url), {
        requestInit: { headers: ep.headers || {} },
      });
      break;
    default:
      throw new Error(`transport ${ep.transport} is not supported by this client`);
  }

  const client = new Client(
    { name: "mcpdrift-e2e-ts", version: "1.0.0" },
    { capabilities: { roots: { listChanged: true } } },
  );
  // Roots: a server-to-client request, answered the same way on every route.
  client.setRequestHandler(ListRootsRequestSchema, async () => ({
    roots: (session.roots || []).map((uri) => ({ uri, name: "e2e" })),
  }));
  await client.connect(transport);

  const out = {
    initialize: {
      serverInfo: client.getServerVersion(),
      capabilities: client.getServerCapabilities(),
      instructions: client.getInstructions() ?? null,
    },
    steps: [],
  };
  const calls = {
    ping: () => client.ping(),
    "tools/list": (p) => client.listTools(p),
    "tools/call": (p) => client.callTool(p),
    "prompts/list": (p) => client.listPrompts(p),
    "prompts/get": (p) => client.getPrompt(p),
    "resources/list": (p) => client.listResources(p),
    "resources/templates/list": (p) => client.listResourceTemplates(p),
    "resources/read": (p) => client.readResource(p),
    "completion/complete": (p) => client.complete(p),
  };
  for (const step of session.steps) {
    const call = calls[step.method];
    const rec = { method: step.method };
    try {
      if (!call) throw new Error(`no SDK method for ${step.method}`);
      rec.result = await call(step.params);
    } catch (e) {
      rec.error = { code: e.code ?? null, message: String(e.message ?? e) };
    }
    out.steps.push(rec);
  }
  if (ep.transport === "http") {
    // End the session on the server as well (HTTP DELETE), as a client
    // that is done with a server does.
    await transport.terminateSession();
  }
  await client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  console.error(`ts-client: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
