// An MCP client on the official TypeScript SDK (its Streamable HTTP
// transport and its OAuth client) for the conformance suite's client
// scenarios (@modelcontextprotocol/conformance: `conformance client
// --command ...`), for conformance_test.go. Written for mcpdrift.
//
//   node conformance-client.cjs PEERS_DIR SERVER_URL
//
// The suite appends SERVER_URL and names the scenario in
// MCP_CONFORMANCE_SCENARIO (with its context, e.g. pre-registered
// credentials, in MCP_CONFORMANCE_CONTEXT). The client connects (running
// the OAuth authorization code flow when the server asks for it: the
// suite's authorization server grants without a user), lists the tools and
// calls each one, answering sampling and elicitation requests, and exits.
//
// Through the proxy: when MCPDRIFT_CONFORMANCE_PROXY is set (JSON
// {"bin": PATH, "args": [...]}) the client first starts that proxy command
// with --upstream ID=SERVER_URL (ID from the scenario's name), waits for it
// to serve, and speaks to the proxy instead; the proxy is stopped with
// SIGINT at the end.
"use strict";

const { createRequire } = require("node:module");
const path = require("node:path");
const { spawn } = require("node:child_process");
const readline = require("node:readline");

async function main() {
  const [peersDir, serverURL] = process.argv.slice(2);
  const sdk = createRequire(path.join(path.resolve(peersDir), "package.json"));
  const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const { UnauthorizedError } = sdk("@modelcontextprotocol/sdk/client/auth.js");
  const t = sdk("@modelcontextprotocol/sdk/types.js");

  const scenario = process.env.MCP_CONFORMANCE_SCENARIO || "";
  const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");

  let url = serverURL;
  let proxy;
  if (process.env.MCPDRIFT_CONFORMANCE_PROXY) {
    ({ url, proxy } = await startProxy(JSON.parse(process.env.MCPDRIFT_CONFORMANCE_PROXY), scenario, serverURL));
  }
  try {
    await session(url);
  } finally {
    if (proxy) await stopProxy(proxy);
  }

  async function session(url) {
    const provider = new Provider(context);
    let last; // the transport of the last attempt: it knows the metadata URL its 401 named
    const connect = async () => {
      const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
      last = transport;
      const client = new Client(
        { name: "mcpdrift-conformance-client", version: "1.0.0" },
        { capabilities: { sampling: {}, elicitation: { form: { applyDefaults: true } }, roots: { listChanged: true } } },
      );
      client.setRequestHandler(t.CreateMessageRequestSchema, async () => ({
        role: "assistant",
        content: { type: "text", text: "a sampled answer" },
        model: "mcpdrift-test-model",
        stopReason: "endTurn",
      }));
      client.setRequestHandler(t.ElicitRequestSchema, async () => ({ action: "accept", content: {} }));
      client.setRequestHandler(t.ListRootsRequestSchema, async () => ({ roots: [] }));
      await client.connect(transport);
      return { client, transport };
    };
    // The authorization code flow: on 401 the SDK discovers, registers and
    // "redirects" (Provider fetches the authorization URL and keeps the
    // code); finishAuth trades the code for a token and the step is tried
    // again, as an application does after its redirect comes back.
    const authorized = async (step, transport) => {
      for (let i = 0; ; i++) {
        try {
          return await step();
        } catch (e) {
          if (!(e instanceof UnauthorizedError) || provider.code === undefined || i >= 3) throw e;
          const code = provider.code;
          provider.code = undefined;
          await (transport ? transport() : last).finishAuth(code);
        }
      }
    };
    const { client, transport } = await authorized(connect);
    const { tools } = await authorized(() => client.listTools(), () => transport);
    for (const tool of tools) {
      const args = tool.name === "add_numbers" ? { a: 5, b: 3 } : {};
      await authorized(() => client.callTool({ name: tool.name, arguments: args }), () => transport);
    }
    await client.close();
  }
}

// Provider is an in-memory OAuth client of the SDK's OAuthClientProvider
// shape; its "browser" fetches the authorization URL and keeps the code of
// the redirect.
class Provider {
  constructor(context) {
    this.code = undefined;
    this._tokens = undefined;
    this._verifier = undefined;
    this._info = context.client_id ? { client_id: context.client_id, client_secret: context.client_secret } : undefined;
  }
  get redirectUrl() {
    return "http://localhost:3000/callback";
  }
  get clientMetadata() {
    return {
      client_name: "mcpdrift-conformance-client",
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
    };
  }
  get clientMetadataUrl() {
    return "https://conformance-test.local/client-metadata.json";
  }
  clientInformation() {
    return this._info;
  }
  saveClientInformation(info) {
    // Kept unbound to an issuer: the SDK stamps it with the issuer it
    // discovered, and the discovery of a later step may name it otherwise
    // (auth/metadata-var3 directly); one client, one registration.
    const { issuer, ...unbound } = info;
    this._info = unbound;
  }
  tokens() {
    return this._tokens;
  }
  saveTokens(tokens) {
    this._tokens = tokens;
  }
  async redirectToAuthorization(authorizationURL) {
    // With a URL-based client id (CIMD) the SDK registers nothing: the id
    // it authorizes with is the one to exchange the code with.
    const clientID = new URL(authorizationURL).searchParams.get("client_id");
    if (!this._info && clientID) this._info = { client_id: clientID };
    const res = await fetch(authorizationURL, { redirect: "manual" });
    const location = res.headers.get("location");
    if (!location) throw new Error(`the authorization endpoint answered ${res.status} without a redirect`);
    this.code = new URL(location).searchParams.get("code") || undefined;
  }
  saveCodeVerifier(v) {
    this._verifier = v;
  }
  codeVerifier() {
    return this._verifier;
  }
}

// startProxy runs the proxy in front of serverURL and returns the URL the
// client speaks to.
function startProxy(cfg, scenario, serverURL) {
  const id = "c-" + (scenario.replace(/[^A-Za-z0-9_-]+/g, "-") || "default");
  const proxy = spawn(cfg.bin, [...cfg.args, "--upstream", `${id}=${serverURL}`], { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: proxy.stderr });
    const tail = [];
    lines.on("line", (line) => {
      tail.push(line);
      const m = /^proxy: serving .* on (http:\/\/[^/]+)\//.exec(line);
      if (m) resolve({ url: `${m[1]}/${id}/mcp`, proxy });
    });
    proxy.on("exit", (code) => reject(new Error(`the proxy exited (${code}) before serving:\n${tail.join("\n")}`)));
  });
}

function stopProxy(proxy) {
  return new Promise((resolve) => {
    if (proxy.exitCode !== null) return resolve();
    proxy.on("exit", () => resolve());
    proxy.kill("SIGINT");
  });
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
