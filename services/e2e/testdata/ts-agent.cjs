// An interactive MCP agent driven by the official TypeScript SDK client, for
// the adversarial suite (adversarial_harness_test.go, tsAgent).
//
//   node ts-agent.cjs PEERS_DIR
//
// It reads one command a line on stdin and answers each with one JSON line
// on stdout, in order. Commands ({"op": ...}):
//
//   connect   {"endpoint": {"transport": "stdio"|"http"|"sse", "command": [...],
//             "env": {...}, "url": ..., "sessionId": ...}, "caps": {...},
//             "callOnToolsChanged": NAME, "timeoutMs": N}
//             -> {"initialize": {...}} | {"error": ...}
//   listTools, listPrompts, listResources      -> {"result": ...} | {"error": ...}
//   call {"name", "args"}, getPrompt {"name"}, readResource {"uri"}
//   notify {"method", "params"}                -> {"ok": true} | {"error": ...}
//   raw {"body", "id"}: writes body as it is on the connection (stdio: one
//             line; http: a POST with the session's headers; sse: a POST to
//             the endpoint); waits for a message with that id
//             -> {"message": ...|null, "http": {"status", "body"}}
//   parallel {"ops": [...]}                     -> {"results": [...]}
//   seen      -> {"messages": [every message the transport delivered to the
//             SDK, parsed], "events": [what the agent's handlers were asked],
//             "errors": [what the SDK reported]}
//   close     -> {"ok": true}
//
// Server-to-client requests (sampling, elicitation, roots) are answered with
// benign results and recorded in events; with callOnToolsChanged, a
// tools/list_changed notification makes the agent call that tool at once
// (as an agent reacting to it would), the outcome recorded in events.
"use strict";

const { createRequire } = require("node:module");
const path = require("node:path");
const readline = require("node:readline");

const peersDir = process.argv[2];
const sdk = createRequire(path.join(path.resolve(peersDir), "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { SSEClientTransport } = sdk("@modelcontextprotocol/sdk/client/sse.js");
const types = sdk("@modelcontextprotocol/sdk/types.js");

let client = null;
let transport = null;
let ep = null;
let timeout = 4000;
const seen = [];
const events = [];
const errors = [];

function errOf(e) {
  return { code: e && e.code !== undefined ? e.code : null, message: String((e && e.message) || e) };
}

// record wraps the transport's onmessage, whoever sets it, so that every
// message the transport hands the SDK is recorded first.
function record(tr) {
  let inner = null;
  const wrapped = (m, extra) => {
    seen.push(m);
    if (inner) inner(m, extra);
  };
  Object.defineProperty(tr, "onmessage", {
    configurable: true,
    get() {
      return inner ? wrapped : undefined;
    },
    set(f) {
      inner = f;
    },
  });
}

async function connect(cmd) {
  ep = cmd.endpoint;
  timeout = cmd.timeoutMs || 4000;
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
      transport = new StreamableHTTPClientTransport(new URL(ep.url), ep.sessionId ? { sessionId: ep.sessionId } : undefined);
      break;
    case "sse":
      transport = new SSEClientTransport(new URL(ep.url));
      break;
    default:
      throw new Error(`no transport ${ep.transport}`);
  }
  record(transport);
  const caps = cmd.caps || {};
  client = new Client({ name: "mcpdrift-adv-ts", version: "1.0.0" }, { capabilities: caps });
  client.onerror = (e) => errors.push(String((e && e.message) || e));
  if (caps.roots) {
    client.setRequestHandler(types.ListRootsRequestSchema, async (req) => {
      events.push({ handled: "roots/list", params: req.params ?? null });
      return { roots: [{ uri: "file:///tmp", name: "adv" }] };
    });
  }
  if (caps.sampling) {
    client.setRequestHandler(types.CreateMessageRequestSchema, async (req) => {
      events.push({ handled: "sampling/createMessage", params: req.params ?? null });
      return { role: "assistant", content: { type: "text", text: "ok" }, model: "adv" };
    });
  }
  if (caps.elicitation) {
    client.setRequestHandler(types.ElicitRequestSchema, async (req) => {
      events.push({ handled: "elicitation/create", params: req.params ?? null });
      return { action: "decline" };
    });
  }
  client.setNotificationHandler(types.ToolListChangedNotificationSchema, async () => {
    events.push({ notified: "notifications/tools/list_changed" });
    if (cmd.callOnToolsChanged) {
      try {
        const r = await client.callTool({ name: cmd.callOnToolsChanged, arguments: {} }, undefined, { timeout });
        events.push({ calledOnChange: cmd.callOnToolsChanged, result: r });
      } catch (e) {
        events.push({ calledOnChange: cmd.callOnToolsChanged, error: errOf(e) });
      }
    }
  });
  // Connecting starts the proxy (and on stdio the server behind it): on a
  // loaded machine that takes longer than a request, so it gets the Go
  // agent's bound (10 s) or the command's, whichever is longer.
  await client.connect(transport, { timeout: Math.max(timeout, 10000) });
  return {
    initialize: {
      serverInfo: client.getServerVersion() ?? null,
      capabilities: client.getServerCapabilities() ?? null,
      instructions: client.getInstructions() ?? null,
    },
  };
}

function waitFor(id, ms) {
  return new Promise((resolve) => {
    const start = Date.now();
    const tick = () => {
      const m = seen.find((x) => x && x.id !== undefined && String(x.id) === String(id));
      if (m) return resolve(m);
      if (Date.now() - start > ms) return resolve(null);
      setTimeout(tick, 20);
    };
    tick();
  });
}

async function raw(cmd) {
  const out = { message: null };
  if (ep.transport === "stdio") {
    transport._process.stdin.write(cmd.body + "\n");
  } else {
    const url = ep.transport === "http" ? new URL(ep.url) : transport._endpoint;
    const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
    if (ep.transport === "http") {
      if (transport.sessionId) headers["mcp-session-id"] = transport.sessionId;
      if (transport.protocolVersion) headers["mcp-protocol-version"] = transport.protocolVersion;
    }
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), timeout);
    try {
      const res = await fetch(url, { method: "POST", headers, body: cmd.body, signal: ac.signal });
      let body = "";
      try {
        body = await res.text();
      } catch (e) {
        body = `(body: ${e})`;
      }
      out.http = { status: res.status, body };
    } catch (e) {
      out.http = { error: String(e) };
    } finally {
      clearTimeout(timer);
    }
  }
  if (cmd.id !== undefined && cmd.id !== null) out.message = await waitFor(cmd.id, ep.transport === "http" ? 200 : timeout);
  return out;
}

async function run(cmd) {
  const opt = { timeout };
  try {
    switch (cmd.op) {
      case "connect":
        return await connect(cmd);
      case "listTools":
        return { result: await client.listTools(undefined, opt) };
      case "listPrompts":
        return { result: await client.listPrompts(undefined, opt) };
      case "listResources":
        return { result: await client.listResources(undefined, opt) };
      case "call":
        return { result: await client.callTool({ name: cmd.name, arguments: cmd.args || {} }, undefined, opt) };
      case "getPrompt":
        return { result: await client.getPrompt({ name: cmd.name, arguments: cmd.args || {} }, opt) };
      case "readResource":
        return { result: await client.readResource({ uri: cmd.uri }, opt) };
      case "notify":
        await transport.send({ jsonrpc: "2.0", method: cmd.method, params: cmd.params });
        return { ok: true };
      case "raw":
        return await raw(cmd);
      case "parallel":
        return { results: await Promise.all(cmd.ops.map(run)) };
      case "seen":
        return { messages: seen, events, errors };
      case "close":
        if (client) await client.close();
        return { ok: true };
      default:
        return { error: { code: null, message: `unknown op ${cmd.op}` } };
    }
  } catch (e) {
    return { error: errOf(e) };
  }
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line.trim()) continue;
    const out = await run(JSON.parse(line));
    process.stdout.write(JSON.stringify(out) + "\n");
  }
  try {
    if (client) await client.close();
  } catch {}
  process.exit(0);
}

main().catch((e) => {
  console.error(`ts-agent: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
