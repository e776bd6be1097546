package stdio

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// floodEnv makes the test binary a hostile stdio server (floodMain): on the
// agent's ping it writes its answer, then floodBurst tools/list_changed
// and prompts/list_changed notifications, and reads nothing of its input
// until all of them are written: a proxy that writes to the server on the
// goroutine that reads it blocks once the server's input pipe is full,
// while the server blocks on its full output pipe.
const (
	floodEnv   = "MCPDRIFT_FLOOD_SERVER"
	floodCount = "MCPDRIFT_FLOOD_COUNT" // the file the server notes each request of the proxy's own in
	floodBurst = 10000
)

func floodMain() {
	if os.Getenv(floodEnv) != "1" {
		return
	}
	count, err := os.OpenFile(os.Getenv(floodCount), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		os.Exit(2)
	}
	r := bufio.NewReaderSize(os.Stdin, 1<<20)
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	answer := func(id json.RawMessage, result string) {
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
		_ = w.Flush()
	}
	for {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			os.Exit(0)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if strings.HasPrefix(string(m.ID), `"mcpdrift-`) {
			fmt.Fprintf(count, "%s\n", m.Method)
		}
		switch m.Method {
		case "initialize":
			answer(m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true},"prompts":{"listChanged":true}},"serverInfo":{"name":"flood","version":"1"}}`)
		case "tools/list":
			answer(m.ID, `{"tools":[`+mcptest.ToolRead+`]}`)
		case "prompts/list":
			answer(m.ID, `{"prompts":[]}`)
		case "tools/call":
			answer(m.ID, `{"content":[{"type":"text","text":"read it"}]}`)
		case "ping":
			answer(m.ID, `{}`)
			for range floodBurst {
				w.WriteString(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n")
				w.WriteString(`{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}` + "\n")
			}
			_ = w.Flush() // blocks until the proxy has read it all
		}
	}
}

// TestListChangedFloodStdio: a server floods list_changed over real pipes
// and does not read its input meanwhile. The proxy neither deadlocks nor
// re-lists once per notification: the server sees at most two re-listings
// of each kind beyond the first listing, an agent's tools/call sent during
// the flood is answered, and the approved surface is served after it.
func TestListChangedFloodStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	countFile := t.TempDir() + "/own"
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	env := append(os.Environ(), floodEnv+"=1", floodCount+"="+countFile)
	p, err := Start(Config{Command: os.Args[0], Env: env, StopWait: 2 * time.Second}, outW, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	meter := &sessiontest.Meter[session.Code]{}
	// Decisions wait for the re-listing as long as the test may take: what
	// is asserted is that it completes, not how fast.
	s := session.New(session.Config{Server: "flood", Timeout: time.Minute, Meter: meter}, gate{approved(toolRead)}, &nopObs{}, p.Pipes().ToServer)
	served := make(chan error, 1)
	go func() {
		_, err := p.Serve(ctx, Bind(s, p.Pipes()), inR, nil)
		outW.Close()
		served <- err
	}()
	lines := make(chan string, 1<<16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(msg string) {
		t.Helper()
		if _, err := inW.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	notices := map[string]int{}
	// answer reads what the proxy delivers until the answer to id, counting
	// the notifications on the way.
	answer := func(id int) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the proxy ended before answering %d", id)
				}
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("unreadable from the proxy: %.200s", l)
				}
				if m.Method != "" {
					notices[m.Method]++
					continue
				}
				if string(m.ID) == strconv.Itoa(id) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("no answer to %d before the deadline (deadlock?); drops %s", id, meter)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}`)
	answer(1)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if got := answer(2); !strings.Contains(got, `"name":"read"`) {
		t.Fatalf("listing before the flood: %s", got)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`) // the flood begins after its answer
	answer(3)
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read","arguments":{"path":"/x"}}}`)
	if got := answer(4); !strings.Contains(got, "read it") {
		t.Fatalf("tools/call during the flood: %s", got)
	}
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	if got := answer(5); !strings.Contains(got, `"name":"read"`) {
		t.Fatalf("listing after the flood: %s", got)
	}
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the proxy did not end")
	}
	for range lines {
	}
	b, err := os.ReadFile(countFile)
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]int{}
	for _, m := range strings.Fields(string(b)) {
		own[m]++
	}
	t.Logf("the server saw the proxy's own %v for %d list_changed of each kind; the agent got %v; drops %s", own, floodBurst, notices, meter)
	for _, m := range []string{"tools/list", "prompts/list"} {
		// The first listing (at initialized), then at most one in flight
		// and one owed.
		if own[m] < 2 || own[m] > 3 {
			t.Errorf("the server saw %d %s of the proxy's own, want 2 or 3 (the first, then at most two re-listings)", own[m], m)
		}
	}
	if n := notices["notifications/tools/list_changed"]; n < 1 || n > 2 {
		t.Errorf("the agent got %d tools/list_changed, want 1 or 2", n)
	}
	if meter.Drops(session.DropCoalesced) < floodBurst {
		t.Errorf("%d list_changed coalesced, want most of the %d", meter.Drops(session.DropCoalesced), 2*floodBurst)
	}
	if meter.Drops(session.DropServerBacklog) != 0 {
		t.Errorf("%d messages of the proxy's own dropped: coalesced re-listings never fill the queue", meter.Drops(session.DropServerBacklog))
	}
}

// TestOwnQueueBounded: the proxy's own messages to a server that does not
// read are queued up to the bound and refused past it
// (session.ErrServerBacklog), never waited for; once the server reads,
// they go out in order and the queue says it drained.
func TestOwnQueueBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, w := io.Pipe()
	p := newPipes(io.Discard, w)
	drained := make(chan struct{})
	p.own.drained = func() { close(drained) }
	var accepted []string
	for i := range maxOwnBacklog + 10 {
		msg := fmt.Sprintf(`{"n":%d}`, i)
		err := p.ToServer([]byte(msg))
		if err == nil {
			accepted = append(accepted, msg)
			continue
		}
		if !errors.Is(err, session.ErrServerBacklog) {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	// One taken by the writer, blocked on the pipe, and the queue full.
	if sent := len(accepted); sent < maxOwnBacklog || sent > maxOwnBacklog+1 {
		t.Fatalf("%d queued, want the bound %d (and one being written)", sent, maxOwnBacklog)
	}
	sc := bufio.NewScanner(r)
	for i, want := range accepted {
		if !sc.Scan() {
			t.Fatalf("line %d: %v", i, sc.Err())
		}
		if sc.Text() != want {
			t.Fatalf("line %d: %s, want %s", i, sc.Text(), want)
		}
	}
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatal("the queue never said it drained")
	}
}
