// A Streamable HTTP MCP server on the official TypeScript SDK that
// implements what the conformance suite's server scenarios ask for
// (@modelcontextprotocol/conformance: `conformance list --server`), for
// conformance_test.go. Written for mcpdrift from the scenarios'
// descriptions; sessions are stateful, one SDK Server per session, as the
// SDK's own examples run it.
//
//   node conformance-server.cjs PEERS_DIR PORT
//
// It listens on 127.0.0.1:PORT at /mcp with the SDK's localhost Host
// validation (createMcpExpressApp), prints "listening" on stdout once it
// accepts connections, and runs until killed.
//
// Server-to-client requests (sampling, elicitation) are sent the way the
// SDK's own examples send them, as requests of the session (not tied to
// the tool call), so they travel on the session's GET stream: a client
// whose GET stream is not open upstream loses them.
//
// Streams are resumable (SEP-1699): each session has an event store, so the
// SDK starts every SSE stream of a 2025-11-25 client with a priming event
// (an id, a retry field, empty data) and replays what a stream missed when
// the client comes back with Last-Event-ID. test_reconnection closes its
// own stream mid-call (server-sse-polling) and answers on the client's
// reconnection.
"use strict";

const { createRequire } = require("node:module");
const path = require("node:path");
const { randomUUID } = require("node:crypto");

// A 1x1 red PNG and a minimal WAV header, for the content scenarios.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

async function main() {
  const [peersDir, port] = process.argv.slice(2);
  const sdk = createRequire(path.join(path.resolve(peersDir), "package.json"));
  const { Server } = sdk("@modelcontextprotocol/sdk/server/index.js");
  const { StreamableHTTPServerTransport } = sdk("@modelcontextprotocol/sdk/server/streamableHttp.js");
  const { createMcpExpressApp } = sdk("@modelcontextprotocol/sdk/server/express.js");
  const t = sdk("@modelcontextprotocol/sdk/types.js");

  const tools = [
    tool("test_simple_text", "Returns simple text."),
    tool("test_image_content", "Returns an image."),
    tool("test_audio_content", "Returns audio."),
    tool("test_embedded_resource", "Returns an embedded resource."),
    tool("test_multiple_content_types", "Returns text, an image and a resource."),
    tool("test_tool_with_logging", "Logs three messages while it runs."),
    tool("test_tool_with_progress", "Reports progress while it runs."),
    tool("test_error_handling", "Always fails."),
    tool("test_reconnection", "Closes its SSE stream mid-call and answers after the client reconnects."),
    tool("test_sampling", "Asks the client's model.", { prompt: { type: "string" } }, ["prompt"]),
    tool("test_elicitation", "Asks the user.", { message: { type: "string" } }, ["message"]),
    tool("test_elicitation_sep1034_defaults", "Asks the user, with defaults."),
    tool("test_elicitation_sep1330_enums", "Asks the user to pick from enums."),
    {
      name: "json_schema_2020_12_tool",
      description: "Tool with JSON Schema 2020-12 features",
      inputSchema: {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        $defs: { address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } } },
        properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
        additionalProperties: false,
      },
    },
  ];
  const resources = [
    { uri: "test://static-text", name: "static-text", description: "A static text resource.", mimeType: "text/plain" },
    { uri: "test://static-binary", name: "static-binary", description: "A static PNG.", mimeType: "image/png" },
    { uri: "test://watched-resource", name: "watched-resource", description: "A resource to subscribe to.", mimeType: "text/plain" },
  ];
  const prompts = [
    { name: "test_simple_prompt", description: "A simple prompt." },
    {
      name: "test_prompt_with_arguments",
      description: "A prompt with arguments.",
      arguments: [
        { name: "arg1", description: "First test argument", required: true },
        { name: "arg2", description: "Second test argument", required: true },
      ],
    },
    {
      name: "test_prompt_with_embedded_resource",
      description: "A prompt with an embedded resource.",
      arguments: [{ name: "resourceUri", description: "URI of the resource to embed", required: true }],
    },
    { name: "test_prompt_with_image", description: "A prompt with an image." },
  ];

  function newServer() {
    const s = new Server(
      { name: "mcpdrift-conformance-server", version: "1.0.0" },
      {
        capabilities: {
          tools: {},
          resources: { subscribe: true },
          prompts: {},
          logging: {},
          completions: {},
        },
      },
    );
    const subscribed = new Set();
    s.setRequestHandler(t.ListToolsRequestSchema, async () => ({ tools }));
    s.setRequestHandler(t.CallToolRequestSchema, async (req, extra) => call(s, req, extra));
    s.setRequestHandler(t.ListResourcesRequestSchema, async () => ({ resources }));
    s.setRequestHandler(t.ListResourceTemplatesRequestSchema, async () => ({
      resourceTemplates: [
        { uriTemplate: "test://template/{id}/data", name: "template", description: "Data by id.", mimeType: "application/json" },
      ],
    }));
    s.setRequestHandler(t.ReadResourceRequestSchema, async (req) => read(req.params.uri));
    s.setRequestHandler(t.SubscribeRequestSchema, async (req) => {
      subscribed.add(req.params.uri);
      return {};
    });
    s.setRequestHandler(t.UnsubscribeRequestSchema, async (req) => {
      subscribed.delete(req.params.uri);
      return {};
    });
    s.setRequestHandler(t.ListPromptsRequestSchema, async () => ({ prompts }));
    s.setRequestHandler(t.GetPromptRequestSchema, async (req) => prompt(req.params.name, req.params.arguments || {}));
    s.setRequestHandler(t.CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
    s.setRequestHandler(t.SetLevelRequestSchema, async () => ({}));
    return s;
  }

  async function call(s, req, extra) {
    const text = (x) => ({ content: [{ type: "text", text: x }] });
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    switch (req.params.name) {
      case "test_simple_text":
        return text("This is a simple text response for testing.");
      case "test_image_content":
        return { content: [{ type: "image", data: PNG, mimeType: "image/png" }] };
      case "test_audio_content":
        return { content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] };
      case "test_embedded_resource":
        return {
          content: [
            {
              type: "resource",
              resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." },
            },
          ],
        };
      case "test_multiple_content_types":
        return {
          content: [
            { type: "text", text: "Multiple content types test:" },
            { type: "image", data: PNG, mimeType: "image/png" },
            {
              type: "resource",
              resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: '{"test":"data","value":123}' },
            },
          ],
        };
      case "test_tool_with_logging":
        for (const [i, data] of ["Tool execution started", "Tool processing data", "Tool execution completed"].entries()) {
          if (i > 0) await sleep(50);
          await extra.sendNotification({ method: "notifications/message", params: { level: "info", data } });
        }
        return text("Tool with logging executed successfully");
      case "test_tool_with_progress": {
        const token = req.params._meta && req.params._meta.progressToken;
        for (const [i, progress] of [0, 50, 100].entries()) {
          if (i > 0) await sleep(50);
          if (token !== undefined) {
            await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress, total: 100 } });
          }
        }
        return text("Tool with progress executed successfully");
      }
      case "test_error_handling":
        return { isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] };
      case "test_reconnection":
        // The SDK offers closeSSEStream only where the stream is resumable
        // (an event store, a 2025-11-25 client); elsewhere the answer goes
        // on the open stream.
        if (extra.closeSSEStream) extra.closeSSEStream();
        await sleep(100);
        return text("Reconnection test completed successfully.");
      case "test_sampling": {
        const r = await s.createMessage({
          messages: [{ role: "user", content: { type: "text", text: String(req.params.arguments.prompt) } }],
          maxTokens: 100,
        });
        return text("LLM response: " + (r.content && r.content.text));
      }
      case "test_elicitation": {
        const r = await s.elicitInput({
          message: String(req.params.arguments.message),
          requestedSchema: {
            type: "object",
            properties: {
              username: { type: "string", description: "User's response" },
              email: { type: "string", description: "User's email address" },
            },
            required: ["username", "email"],
          },
        });
        return text(`User response: action=${r.action}, content=${JSON.stringify(r.content || {})}`);
      }
      case "test_elicitation_sep1034_defaults": {
        const r = await s.elicitInput({
          message: "Please review the defaults",
          requestedSchema: {
            type: "object",
            properties: {
              name: { type: "string", default: "John Doe" },
              age: { type: "integer", default: 30 },
              score: { type: "number", default: 95.5 },
              status: { type: "string", enum: ["active", "inactive", "pending"], default: "active" },
              verified: { type: "boolean", default: true },
            },
          },
        });
        return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content || {})}`);
      }
      case "test_elicitation_sep1330_enums": {
        const r = await s.elicitInput({
          message: "Please pick",
          requestedSchema: {
            type: "object",
            properties: {
              untitledSingle: { type: "string", enum: ["option1", "option2", "option3"] },
              titledSingle: {
                type: "string",
                oneOf: [
                  { const: "value1", title: "First Option" },
                  { const: "value2", title: "Second Option" },
                  { const: "value3", title: "Third Option" },
                ],
              },
              legacyEnum: { type: "string", enum: ["opt1", "opt2", "opt3"], enumNames: ["Option One", "Option Two", "Option Three"] },
              untitledMulti: { type: "array", items: { type: "string", enum: ["option1", "option2", "option3"] } },
              titledMulti: {
                type: "array",
                items: {
                  anyOf: [
                    { const: "value1", title: "First Choice" },
                    { const: "value2", title: "Second Choice" },
                    { const: "value3", title: "Third Choice" },
                  ],
                },
              },
            },
          },
        });
        return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content || {})}`);
      }
      case "json_schema_2020_12_tool":
        return text("ok");
    }
    throw new t.McpError(t.ErrorCode.InvalidParams, "unknown tool " + req.params.name);
  }

  function read(uri) {
    switch (uri) {
      case "test://static-text":
        return { contents: [{ uri, mimeType: "text/plain", text: "This is the content of the static text resource." }] };
      case "test://static-binary":
        return { contents: [{ uri, mimeType: "image/png", blob: PNG }] };
      case "test://watched-resource":
        return { contents: [{ uri, mimeType: "text/plain", text: "Watched." }] };
    }
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) {
      return {
        contents: [{ uri, mimeType: "application/json", text: JSON.stringify({ id: m[1], templateTest: true, data: `Data for ID: ${m[1]}` }) }],
      };
    }
    throw new t.McpError(-32002, "resource not found: " + uri);
  }

  function prompt(name, args) {
    const user = (content) => ({ role: "user", content });
    switch (name) {
      case "test_simple_prompt":
        return { messages: [user({ type: "text", text: "This is a simple prompt for testing." })] };
      case "test_prompt_with_arguments":
        return { messages: [user({ type: "text", text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })] };
      case "test_prompt_with_embedded_resource":
        return {
          messages: [
            user({ type: "resource", resource: { uri: args.resourceUri, mimeType: "text/plain", text: "Embedded resource content for testing." } }),
            user({ type: "text", text: "Please process the embedded resource above." }),
          ],
        };
      case "test_prompt_with_image":
        return {
          messages: [user({ type: "image", data: PNG, mimeType: "image/png" }), user({ type: "text", text: "Please analyze the image above." })],
        };
    }
    throw new t.McpError(t.ErrorCode.InvalidParams, "unknown prompt " + name);
  }

  const sessions = new Map();
  const app = createMcpExpressApp({ host: "127.0.0.1" });
  app.all("/mcp", async (req, res) => {
    const sid = req.headers["mcp-session-id"];
    let transport = sid && sessions.get(sid);
    if (!transport) {
      if (sid || req.method !== "POST" || !t.isInitializeRequest(req.body)) {
        res.status(sid ? 404 : 400).json({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "no such session" } });
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: eventStore(),
        retryInterval: 200,
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, req.body);
  });
  app.listen(Number(port), "127.0.0.1", () => console.log("listening"));
}

// eventStore keeps one session's SSE events in memory, in order, for the
// SDK's resumption: replayEventsAfter sends what followed an event on its
// stream, priming events (empty messages) left out.
function eventStore() {
  const events = [];
  let n = 0;
  return {
    async storeEvent(streamId, message) {
      const eventId = `${streamId}::${++n}`;
      events.push({ eventId, streamId, message });
      return eventId;
    },
    async getStreamIdForEventId(eventId) {
      const e = events.find((e) => e.eventId === eventId);
      return e && e.streamId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const i = events.findIndex((e) => e.eventId === lastEventId);
      if (i < 0) throw new Error("unknown event id " + lastEventId);
      const { streamId } = events[i];
      for (const e of events.slice(i + 1)) {
        if (e.streamId === streamId && Object.keys(e.message).length > 0) await send(e.eventId, e.message);
      }
      return streamId;
    },
  };
}

function tool(name, description, properties = {}, required = []) {
  return { name, description, inputSchema: { type: "object", properties, required } };
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
