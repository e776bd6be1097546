package stdio

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// hostile2Env makes the test binary a hostile stdio server (hostile2Main):
// it answers initialize and tools/list like mcptest, and each tools/call
// of its tool "read" by the framing its path asks for. It answers a batch of requests
// with a batch.
const hostile2Env = "MCPDRIFT_HOSTILE2_SERVER"

// hostile2Big is the length of the answer of the tool "big": over the
// proxy's line limit in these tests (hostile2Max).
const (
	hostile2Max = 1 << 16
	hostile2Big = 3 * hostile2Max
)

func init() {
	if os.Getenv(hostile2Env) != "1" {
		return
	}
	hostile2Main(os.Stdin, os.Stdout)
	os.Exit(0)
}

func hostile2Main(in io.Reader, stdout io.Writer) {
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriter(stdout)
	type req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Arguments struct {
				Path string `json:"path"`
			} `json:"arguments"`
		} `json:"params"`
	}
	answer := func(id json.RawMessage, result string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
	}
	text := func(t string) string { return `{"content":[{"type":"text","text":"` + t + `"}]}` }
	one := func(q req) string {
		switch q.Method {
		case "initialize":
			return answer(q.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"hostile2","version":"1"}}`)
		case "tools/list":
			return answer(q.ID, `{"tools":[`+mcptest.ToolRead+`]}`)
		case "ping":
			return answer(q.ID, `{}`)
		}
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, q.ID)
	}
	for {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return
		}
		if t := strings.TrimSpace(string(line)); strings.HasPrefix(t, "[") {
			var qs []req
			if json.Unmarshal(line, &qs) != nil {
				continue
			}
			var out []string
			for _, q := range qs {
				if q.Method != "" && q.ID != nil {
					out = append(out, one(q))
				}
			}
			if len(out) > 0 {
				fmt.Fprintf(w, "[%s]\n", strings.Join(out, ","))
			}
			_ = w.Flush()
			continue
		}
		var q req
		if json.Unmarshal(line, &q) != nil || q.ID == nil || q.Method == "" {
			continue
		}
		if q.Method != "tools/call" {
			fmt.Fprintln(w, one(q))
			_ = w.Flush()
			continue
		}
		switch q.Params.Arguments.Path {
		case "big":
			// An answer over the line limit, its id first.
			fmt.Fprintln(w, answer(q.ID, text(strings.Repeat("b", hostile2Big))))
		case "crlf":
			fmt.Fprint(w, answer(q.ID, text("crlf"))+"\r\n")
		case "blank":
			fmt.Fprint(w, "\n \t\r\n\n"+answer(q.ID, text("blank"))+"\n")
		case "two":
			// Two JSON values on one line: a reader that stops at the
			// first would take the one, a reader that reads on the other.
			fmt.Fprintln(w, answer(q.ID, text("first"))+answer(q.ID, text("second")))
		case "nul":
			fmt.Fprintln(w, answer(q.ID, text("nul"))+"\x00")
		case "bom":
			fmt.Fprintln(w, "\ufeff"+answer(q.ID, text("bom")))
		case "cr":
			// Two messages parted by a lone CR: one line to a reader
			// that splits on LF only.
			fmt.Fprintln(w, answer(q.ID, text("cr1"))+"\r"+answer(q.ID, text("cr2")))
		case "partial":
			// Half an answer, a pause the proxy reads in, the rest.
			a := answer(q.ID, text("partial"))
			fmt.Fprint(w, a[:len(a)/2])
			_ = w.Flush()
			time.Sleep(50 * time.Millisecond)
			fmt.Fprintln(w, a[len(a)/2:])
		case "collide":
			// A request of the server's with the id of the agent's call in
			// flight, another with an id like the proxy's own; then the
			// answer, once the agent has answered both.
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"method":"roots/list"}`+"\n", q.ID)
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":"mcpdrift-0123456789abcdef-1","method":"ping"}`+"\n")
			_ = w.Flush()
			got := 0
			for got < 2 {
				l, err := r.ReadBytes('\n')
				if err != nil {
					return
				}
				var m struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
				}
				if json.Unmarshal(l, &m) == nil && m.Result != nil {
					got++
				}
			}
			fmt.Fprintln(w, answer(q.ID, text("collide")))
		case "exit":
			// Half an answer, then the server is gone.
			a := answer(q.ID, text("exit"))
			fmt.Fprint(w, a[:len(a)/2])
			_ = w.Flush()
			os.Exit(0)
		default:
			fmt.Fprintln(w, answer(q.ID, text("plain")))
		}
		_ = w.Flush()
	}
}

// startHostile2 runs the proxy in front of hostile2Main, the server
// verified with its one tool approved, and opens the session.
func startHostile2(t *testing.T) (*client, chan int) {
	t.Helper()
	c, code := startProxyOf(t, approved(toolRead), hostile2Max, hostile2Env, io.Discard)
	t.Cleanup(func() {
		c.in.Close()
		select {
		case <-code:
		case <-time.After(10 * time.Second):
			t.Error("the proxy did not end after end of input")
		}
	})
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}`)
	if got := c.recv(); !strings.Contains(got, `"serverInfo"`) {
		t.Fatalf("initialize: %s", got)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c, code
}

// call sends a tools/call of the tool read, its path how to answer, with id and returns the proxy's first
// message to the agent after it.
func (c *client) call(id int, tool string) string {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read","arguments":{"path":%q}}}`, id, tool))
	return c.recv()
}

// pingAfter sends a ping with id and returns every message the proxy sent
// the agent before its answer: what the server's previous message came to.
func (c *client) pingAfter(id int) []string {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id))
	var before []string
	for {
		got := c.recv()
		if strings.Contains(got, fmt.Sprintf(`"id":%d,"result":{}`, id)) {
			return before
		}
		before = append(before, got)
	}
}

// TestStdioHostileFraming: what a hostile server writes on its stdout
// reaches the agent only as the message the proxy judged, or as a coded
// error in place of the answer; never as bytes the agent would read
// otherwise, and never leaving the agent's request unanswered.
func TestStdioHostileFraming(t *testing.T) {
	c, _ := startHostile2(t)
	id := 10
	// Framings a client reads as the one message the proxy judged.
	for _, tool := range []string{"crlf", "blank", "partial"} {
		id++
		got := c.call(id, tool)
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"%s"}]}}`, id, tool)
		if got != want {
			t.Errorf("%s: the agent got %q, want %q", tool, got, want)
		}
	}
	// Framings no strict reader reads as one message: the agent's call
	// gets a coded error, the server's bytes never.
	for _, tool := range []string{"two", "nul", "bom", "cr"} {
		id++
		got := c.call(id, tool)
		if !strings.Contains(got, fmt.Sprintf(`"id":%d,"error"`, id)) || !strings.Contains(got, `"mcpdrift/code":"`+string(session.DropUnreadable)+`"`) {
			t.Errorf("%s: the agent got %q, want an upstream_unreadable error for id %d", tool, got, id)
		}
		if before := c.pingAfter(1000 + id); len(before) > 0 {
			t.Errorf("%s: after the error the agent got %q", tool, before)
		}
	}
}

// TestStdioOversizedAnswer: an answer over the line limit is dropped
// unread; the request it answered gets a coded error in its place, read
// from the id at the line's start (as an unreadable answer's is), rather
// than no answer ever. Without it the agent waited for an answer that
// would never come.
func TestStdioOversizedAnswer(t *testing.T) {
	c, _ := startHostile2(t)
	got := c.call(7, "big")
	if !strings.Contains(got, `"id":7,"error"`) || !strings.Contains(got, `"mcpdrift/code":"`+string(session.DropFraming)+`"`) {
		t.Fatalf("the oversized answer came to %.300q, want a framing_invalid error for id 7", got)
	}
	if before := c.pingAfter(8); len(before) > 0 {
		t.Fatalf("after the error the agent got %.300q", before)
	}
}

// TestStdioServerExitsMidAnswer: a server that writes half an answer and
// exits: the agent's request gets a coded error, not half a message, and
// the proxy ends.
func TestStdioServerExitsMidAnswer(t *testing.T) {
	c, code := startHostile2(t)
	got := c.call(3, "exit")
	if !strings.Contains(got, `"id":3,"error"`) || !strings.Contains(got, `"mcpdrift/code":"`+string(session.DropUnreadable)+`"`) {
		t.Fatalf("half an answer came to %q, want an upstream_unreadable error for id 3", got)
	}
	select {
	case rc := <-code:
		code <- rc // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not end when its server exited")
	}
}

// TestStdioServerRequestIDs: the server's requests carry ids of their own
// direction: one with the id of the agent's call in flight, one with an id
// like the proxy's own, reach the agent (the server is open), the agent's
// answers reach the server, and the agent's call is answered after them,
// its id still the agent's.
func TestStdioServerRequestIDs(t *testing.T) {
	c, _ := startHostile2(t)
	c.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read","arguments":{"path":"collide"}}}`)
	if got := c.recv(); got != `{"jsonrpc":"2.0","id":5,"method":"roots/list"}` {
		t.Fatalf("the server's roots/list: %q", got)
	}
	if got := c.recv(); got != `{"jsonrpc":"2.0","id":"mcpdrift-0123456789abcdef-1","method":"ping"}` {
		t.Fatalf("the server's ping: %q", got)
	}
	c.send(`{"jsonrpc":"2.0","id":5,"result":{"roots":[]}}`)
	c.send(`{"jsonrpc":"2.0","id":"mcpdrift-0123456789abcdef-1","result":{}}`)
	want := `{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"collide"}]}}`
	if got := c.recv(); got != want {
		t.Fatalf("the agent's call: %q, want %q", got, want)
	}
	if before := c.pingAfter(6); len(before) > 0 {
		t.Fatalf("after the call the agent got %q", before)
	}
}

// TestStdioClientBatches: an agent's batches over stdio: an empty one is
// refused (invalid_message), a batch of one is answered as a batch, a
// batch naming one id twice has the second refused (request_ambiguous)
// while the first is answered, and a batch of a request, a notification
// and a response passes whole, answered once.
func TestStdioClientBatches(t *testing.T) {
	c, _ := startHostile2(t)
	c.send(`[]`)
	if got := c.recv(); !strings.Contains(got, `"mcpdrift/code":"`+string(session.InvalidMessage)+`"`) {
		t.Fatalf("an empty batch: %q", got)
	}
	c.send(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	if got := c.recv(); got != `[{"jsonrpc":"2.0","id":1,"result":{}}]` {
		t.Fatalf("a batch of one: %q", got)
	}
	c.send(`[{"jsonrpc":"2.0","id":2,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	refusal, answer := c.recv(), c.recv()
	if !strings.HasPrefix(refusal, `[{"jsonrpc":"2.0","id":2,"error"`) || !strings.Contains(refusal, `"mcpdrift/code":"`+string(session.RefuseAmbiguous)+`"`) {
		t.Fatalf("the second use of id 2 in one batch: %q", refusal)
	}
	if !strings.HasPrefix(answer, `[{"jsonrpc":"2.0","id":2,"result":{"tools":[`) || !strings.Contains(answer, `"name":"read"`) {
		t.Fatalf("the batch's listing: %q", answer)
	}
	c.send(`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}},{"jsonrpc":"2.0","id":99,"result":{}}]`)
	if got := c.recv(); got != `[{"jsonrpc":"2.0","id":3,"result":{}}]` {
		t.Fatalf("a mixed batch: %q", got)
	}
	if before := c.pingAfter(4); len(before) > 0 {
		t.Fatalf("after the batches the agent got %q", before)
	}
}
