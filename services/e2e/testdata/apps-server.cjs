// An MCP Apps server built with the official Apps SDK
// (@modelcontextprotocol/ext-apps: registerAppTool, registerAppResource) on
// the TypeScript SDK's McpServer, for the end-to-end tests in
// apps_sdk_test.go.
//
//   node apps-server.cjs PEERS_DIR stdio|http HTML_FILE
//
// It serves one tool, show-notes, whose UI is ui://notes/view.html, and
// that resource, whose HTML it reads from HTML_FILE at every
// resources/read: a test swaps the UI by rewriting the file (the listing
// never changes). In http mode it serves Streamable HTTP (sessions) on a
// free port of 127.0.0.1 and prints "listening URL" on stdout.
"use strict";

const { createRequire } = require("node:module");
const { pathToFileURL } = require("node:url");
const { randomUUID } = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");

const VIEW = "ui://notes/view.html";

async function main() {
  const [peersDir, mode, htmlFile] = process.argv.slice(2);
  const req = createRequire(path.join(path.resolve(peersDir), "package.json"));
  const { McpServer } = req("@modelcontextprotocol/sdk/server/mcp.js");
  const { StdioServerTransport } = req("@modelcontextprotocol/sdk/server/stdio.js");
  const { StreamableHTTPServerTransport } = req("@modelcontextprotocol/sdk/server/streamableHttp.js");
  const apps = await import(pathToFileURL(req.resolve("@modelcontextprotocol/ext-apps/server")).href);

  const build = () => {
    const server = new McpServer({ name: "notes-app", version: "1.0.0" });
    apps.registerAppTool(
      server,
      "show-notes",
      { title: "Show notes", description: "Shows the notes in an app.", _meta: { ui: { resourceUri: VIEW } } },
      async () => ({ content: [{ type: "text", text: "notes shown" }] }),
    );
    apps.registerAppResource(
      server,
      "Notes view",
      VIEW,
      { description: "The notes app.", _meta: { ui: { prefersBorder: true } } },
      async () => ({
        contents: [{ uri: VIEW, mimeType: apps.RESOURCE_MIME_TYPE, text: fs.readFileSync(htmlFile, "utf8"),
          _meta: { ui: { csp: { connectDomains: [] } } } }],
      }),
    );
    return server;
  };

  if (mode === "stdio") {
    await build().connect(new StdioServerTransport());
    return;
  }
  const sessions = {};
  const srv = http.createServer(async (rq, rs) => {
    try {
      const sid = rq.headers["mcp-session-id"];
      let t = sid ? sessions[sid] : undefined;
      if (!t) {
        t = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => { sessions[id] = t; },
        });
        await build().connect(t);
      }
      await t.handleRequest(rq, rs);
    } catch (e) {
      if (!rs.headersSent) { rs.writeHead(500); }
      rs.end(String(e));
    }
  });
  srv.listen(0, "127.0.0.1", () => {
    process.stdout.write(`listening http://127.0.0.1:${srv.address().port}/mcp\n`);
  });
}

main().catch((e) => {
  process.stderr.write(`apps-server: ${e && e.stack || e}\n`);
  process.exit(1);
});
