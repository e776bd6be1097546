package session

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestOffReaderWorkIsJoined: on a serial transport a page of the client's
// listing whose verdict is due is judged off the reader, on a goroutine
// the transport's ordered.Queue owns: Wait returns only once it has ended, and returns the
// error it met (here the client's end of the pipe broke while it waited),
// which the reader's next message returns too (issue 15: the goroutine
// was joined, but what it failed at went nowhere).
func TestOffReaderWorkIsJoined(t *testing.T) {
	before := runtime.NumGoroutine()
	g := &blockingGate{waiting: make(chan struct{}, 1), release: make(chan struct{})}
	broken := errors.New("the client's pipe is broken")
	var clientGone atomic.Bool
	toServer := func([]byte) error { return nil }
	p := &stream{s: New(Config{Server: "fs"}, g, &fakeObs{}, toServer), toServer: toServer,
		toClient: func([]byte) error {
			if clientGone.Load() {
				return broken
			}
			return nil
		}}
	p.serial()
	ctx := context.Background()
	for _, m := range []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}`,
	} {
		if err := p.fromClient(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}`)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`, // the proxy lists tools: a verdict is due
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
	} {
		if err := p.fromClient(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[`+readTool+`]}}`)); err != nil {
		t.Fatalf("a page judged off the reader: %v", err)
	}
	// fromServer returned while the gate still holds the page's verdict:
	// the page awaits it off the reader. (A count of goroutines proved
	// nothing more, and moved with what earlier tests left winding down.)
	<-g.waiting
	clientGone.Store(true)
	waited := make(chan error, 1)
	go func() { waited <- p.q.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v while a decision was still under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.release)
	select {
	case err := <-waited:
		if !errors.Is(err, broken) {
			t.Fatalf("Wait = %v, want the failed write to the client", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return once the decision was made")
	}
	if err := p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)); !errors.Is(err, broken) {
		t.Fatalf("the reader's next message: %v, want the failed write", err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines after Wait, %d before", n, before)
		}
		return nil
	})
}

// TestOffReaderDecisionErrorIsReported: a server request decided off the
// reader (its verdict was due) that the proxy must answer in the client's
// stead, on a server pipe that broke meanwhile: the error reaches Wait and,
// once, the reader; the client's side is not marked broken by it.
func TestOffReaderDecisionErrorIsReported(t *testing.T) {
	g := &blockingGate{waiting: make(chan struct{}, 1), release: make(chan struct{})}
	broken := errors.New("the server's pipe is broken")
	var serverGone atomic.Bool
	var delivered atomic.Int64
	toServer := func([]byte) error {
		if serverGone.Load() {
			return broken
		}
		return nil
	}
	p := &stream{s: New(Config{Server: "fs"}, g, &fakeObs{}, toServer), toServer: toServer,
		toClient: func([]byte) error { delivered.Add(1); return nil }}
	p.serial()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}`)))
	must(p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}`)))
	must(p.fromClient(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)))
	// The server asks the client for its roots before any verdict: it is
	// decided off the reader.
	must(p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","id":"r1","method":"roots/list"}`)))
	<-g.waiting
	serverGone.Store(true)
	close(g.release) // no verdict: the request is refused in the client's stead
	err := p.q.Wait()
	if !errors.Is(err, broken) || !strings.Contains(err.Error(), "roots/list") {
		t.Fatalf("Wait = %v, want the failed answer to roots/list", err)
	}
	g.mu.Lock()
	g.v, g.ok = baseline(readTool), true // open: its notifications reach the client
	g.mu.Unlock()
	if err := p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)); !errors.Is(err, broken) {
		t.Fatalf("the reader's next message: %v, want the decision's error", err)
	}
	n := delivered.Load()
	if err := p.fromServer(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"y"}}`)); err != nil {
		t.Fatalf("the reader's message after that: %v, want nil (the error is returned once)", err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		if delivered.Load() != n+1 {
			return errors.New("the client's side stopped after an error on the server's")
		}
		return nil
	})
}
