// Command stack runs the whole mcpdrift pipeline on one machine, for trying
// it and for development: an embedded NATS server with JetStream storing
// under a data directory, the fingerprint, drift (with its admin API) and
// audit services, a sample MCP server (demoserver) and a proxy in front of
// it. `stack demo` then plays a scripted rug pull against the running stack.
//
//	stack --data-dir .data/run --clickhouse-addr 127.0.0.1:9000
//	stack demo --data-dir .data/run
//
// The services are the real commands, run as child processes from the
// directory of this executable (`make build` puts them all in bin/). State
// lives in the data directory, so a second start resumes where the first
// one stopped. Ctrl-C stops every part in order.
package main

import (
	"context"
	"io"
	"os"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

func main() {
	options.Main("stack", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
	})
}

const usage = `stack: run the whole mcpdrift pipeline on this machine.

Usage:
  stack [flags]        start NATS, fingerprint, drift, audit, notify, a sample MCP server and a proxy
  stack demo [flags]   play a scripted rug pull against a running stack

The services are the real commands, started from the directory of this
executable (--bin-dir); their logs go to DATA-DIR/logs. Ports, from
--port-base P (default 8470): P drift admin API, P+1..P+5 the /healthz,
/readyz and /metrics of fingerprint, drift, audit, proxy and notify, P+10
the proxy, P+20 the sample server. The audit service runs when ClickHouse
is given, notify when a webhook is. Each flag can also be set by its environment
variable; a flag wins.

`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "demo" {
		cfg, err := parseDemoConfig(args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		return demo(ctx, cfg, stdout)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	return up(ctx, cfg, stdout, stderr)
}
