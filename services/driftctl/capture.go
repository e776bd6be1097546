package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/mcpdrift/mcpdrift/services/internal/capture"
)

const captureUsage = `Usage: driftctl capture [flags] -- COMMAND [ARGS...]

Start the MCP server COMMAND over stdio, list everything it advertises and
write one JSON object to stdout:

  {"initialize": <result>,
   "tools": {"pages": [<result>, ...]},
   "prompts": {"pages": [...]},
   "resources": {"pages": [...]},
   "resourceTemplates": {"pages": [...]}}

Each <result> is the server's JSON-RPC result, byte for byte. prompts,
resources and resourceTemplates appear only when the server advertises the
capability. The server inherits this environment and working directory; its
stderr is copied to stderr. Nothing is written to stdout unless the capture
completes.

Example:
  driftctl capture --timeout 1m -- npx -y @modelcontextprotocol/server-memory > memory.json

Flags:
`

// runCapture implements "driftctl capture"; args follow the subcommand name.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("driftctl capture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), captureUsage)
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", capture.DefaultTimeout,
		"give up if the capture is not complete after this `duration`")
	protocolVersion := fs.String("protocol-version", capture.DefaultProtocolVersion,
		"MCP protocol `version` to request in initialize")
	clientCaps := fs.String("client-capabilities", "{}",
		"client capabilities to send in initialize, a JSON `object`")
	maxPages := fs.Int("max-pages", capture.DefaultMaxPages,
		"fail if a list has more than this many `pages`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("usage: capture needs the server command after --")
	}
	if *timeout <= 0 {
		return fmt.Errorf("usage: --timeout %s must be positive", *timeout)
	}
	if *maxPages <= 0 {
		return fmt.Errorf("usage: --max-pages %d must be positive", *maxPages)
	}
	cfg := capture.Config{
		Command:            fs.Arg(0),
		Args:               fs.Args()[1:],
		Timeout:            *timeout,
		ProtocolVersion:    *protocolVersion,
		ClientCapabilities: json.RawMessage(*clientCaps),
		MaxPages:           *maxPages,
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	if err := capture.Run(ctx, cfg, stdout, stderr); err != nil {
		return fmt.Errorf("capture_failed: %w", err)
	}
	return nil
}
