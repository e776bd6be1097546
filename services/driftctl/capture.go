package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/mcpdrift/mcpdrift/services/internal/capture"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

const captureUsage = `Usage: driftctl capture [flags] -- COMMAND [ARGS...]

Start the MCP server COMMAND over stdio, list everything it advertises and
write one JSON object to stdout:

  {"initialize": <result>,
   "tools": {"pages": [<result>, ...]},
   "prompts": {"pages": [...]},
   "resources": {"pages": [...]},
   "resourceTemplates": {"pages": [...]},
   "uiContents": {"ui://...": <result>, ...},
   "promptMessages": {"<prompt>": <result>, ...}}

Each <result> is the server's JSON-RPC result, byte for byte. prompts,
resources and resourceTemplates appear only when the server advertises the
capability. uiContents holds a resources/read of every listed UI resource
(a ui:// uri, or one a tool's UI link names), promptMessages a prompts/get
of every listed prompt that takes no arguments: what a proxy pins beside
the listings, read as it reads them, so that the capture hashes as the
proxy's surface does (docs/adr/0016, 0017). The server inherits this environment and working directory; its
stderr is copied to stderr. Nothing is written to stdout unless the capture
completes.

Example:
  driftctl capture --timeout 1m -- npx -y @modelcontextprotocol/server-memory > memory.json

`

// runCapture implements "driftctl capture"; args follow the subcommand name.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	timeout, protocolVersion, clientCaps, maxPages := capture.DefaultTimeout, capture.DefaultProtocolVersion, "{}", capture.DefaultMaxPages
	c := options.Command{Name: "driftctl capture", Header: captureUsage, Args: options.Positional, Options: []options.Option{
		options.Opt("timeout", "", "DURATION", "give up if the capture is not complete after this duration", options.Duration(&timeout)),
		options.Opt("protocol-version", "", "VERSION", "MCP protocol version to request in initialize", options.String(&protocolVersion)),
		options.Opt("client-capabilities", "", "OBJECT", "client capabilities to send in initialize, a JSON object", options.String(&clientCaps)),
		options.Opt("max-pages", "", "N", "fail if a list has more than this many pages", options.Int(&maxPages)),
	}}
	pos, err := options.Parse(c, args, noEnv, stderr)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageOf(c, stderr, "capture needs the server command after --")
	}
	if timeout <= 0 {
		return options.Usagef("--timeout %s must be positive", timeout)
	}
	if maxPages <= 0 {
		return options.Usagef("--max-pages %d must be positive", maxPages)
	}
	cfg := capture.Config{
		Command:            pos[0],
		Args:               pos[1:],
		Timeout:            timeout,
		ProtocolVersion:    protocolVersion,
		ClientCapabilities: json.RawMessage(clientCaps),
		MaxPages:           maxPages,
	}
	if err := cfg.Validate(); err != nil {
		return options.Usagef("%v", err)
	}
	if err := capture.Run(ctx, cfg, stdout, stderr); err != nil {
		return coded.Errorf("capture_failed", "%w", err)
	}
	return nil
}
