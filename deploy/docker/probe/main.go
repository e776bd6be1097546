// Command probe checks an HTTP health endpoint from inside a container that
// has no shell and no curl (the mcpdrift image is distroless): it exits 0
// when GET URL answers 2xx within the timeout, and 1 otherwise, saying why
// on stderr. Compose health checks run it:
//
//	probe http://127.0.0.1:8471/readyz
//
// Kubernetes does not need it: its probes make the request themselves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "probe: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this `duration`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: probe [--timeout DURATION] URL\n\nExits 0 when GET URL answers 2xx, 1 otherwise.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("usage: one URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fs.Arg(0), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s: %s", fs.Arg(0), resp.Status, body)
	}
	return nil
}
