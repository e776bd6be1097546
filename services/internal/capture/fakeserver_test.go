package capture

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeServerEnv names the variable that turns the test binary into a fake
// MCP server; its value selects the behaviour (a fakeMode key).
const fakeServerEnv = "MCPDRIFT_CAPTURE_FAKE_SERVER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeServerEnv); mode != "" {
		os.Exit(runFakeServer(mode))
	}
	os.Exit(m.Run())
}

// Results the fake server sends, with irregular spacing, escapes and HTML
// characters that a re-encoding would change.
const (
	fakeInit = `{"protocolVersion":"2025-06-18", "capabilities" : {"tools":{"listChanged":true},"prompts":{},"resources":{"subscribe":false}},` +
		`"serverInfo":{"name":"fake","version":"1.0.0"}}`
	fakeInitToolsOnly = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"prompts":null},"serverInfo":{"name":"fake","version":"1.0.0"}}`

	fakeTools1 = `{ "tools" : [ {"name":"echo","description":"<b>&amp; \u003cnot a tag\u003e \"quoted\" é","inputSchema":{"type":"object","properties":{"z":{},"a":{}}}} ],  "nextCursor":"p2" }`
	fakeTools2 = `{"tools":[{"name":"add","inputSchema":{"type":"object"}}],"nextCursor":"p3","_meta":{"n":1.50}}`
	fakeTools3 = `{"tools":[],"nextCursor":null}`

	fakePrompts    = `{"prompts":[{"name":"greet","description":"Say <hi> & go"}]}`
	fakeResources1 = `{"resources":[{"uri":"file:///a","name":"a"}],"nextCursor":"r2"}`
	fakeResources2 = `{"resources":[{"uri":"file:///b","name":"b"}]}`
	fakeTemplates  = `{"resourceTemplates":[{"uriTemplate":"file:///{path}","name":"files"}]}`
	fakeGreet      = `{"messages":[{"role":"user","content":{"type":"text","text":"Hi <there> \u0026 welcome"}}]}`

	// The apps mode: a ui:// resource, one a tool's UI link names in
	// another scheme, and one that is no UI; prompts without arguments,
	// with an empty list of them, and with one.
	fakeAppsTools     = `{"tools":[{"name":"show","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"https://apps.example/widget.html"}}}]}`
	fakeAppsResources = `{"resources":[{"uri":"ui://notes/view.html","name":"view","mimeType":"text/html;profile=mcp-app"},` +
		`{"uri":"https://apps.example/widget.html","name":"widget"},{"uri":"file:///data","name":"data"}]}`
	fakeAppsPrompts = `{"prompts":[{"name":"plain"},{"name":"emptyArgs","arguments":[]},{"name":"withArgs","arguments":[{"name":"x"}]}]}`
)

type fakeRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Cursor *string `json:"cursor"`
		Name   string  `json:"name"`
		URI    string  `json:"uri"`
	} `json:"params"`
}

// fakeServer is the state of one fake server process.
type fakeServer struct {
	in   *bufio.Reader
	page int // pages served by an endless or cycling mode
}

func (f *fakeServer) out(line string) { io.WriteString(os.Stdout, line+"\n") }

func (f *fakeServer) respond(id json.RawMessage, result string) {
	f.out(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`)
}

// readRequest returns the next request or notification; io.EOF when the
// client closed stdin.
func (f *fakeServer) readRequest() (fakeRequest, string, error) {
	line, err := f.in.ReadString('\n')
	if err != nil {
		return fakeRequest{}, "", err
	}
	var r fakeRequest
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return fakeRequest{}, "", fmt.Errorf("fake server: bad line %q: %w", line, err)
	}
	return r, strings.TrimSuffix(line, "\n"), nil
}

func cursorOf(r fakeRequest) string {
	if r.Params.Cursor == nil {
		return ""
	}
	return *r.Params.Cursor
}

// fakeModes maps a mode to its request handler. A handler returns false to
// stop serving; the server then exits with status 0 unless it already did.
var fakeModes = map[string]func(f *fakeServer, r fakeRequest, line string) bool{
	// full serves every list over several pages, interleaving noise, a
	// notification and server-to-client requests with the responses.
	"full": func(f *fakeServer, r fakeRequest, line string) bool {
		switch r.Method {
		case "initialize":
			fmt.Fprintf(os.Stderr, "fake: initialize %s\n", line)
			f.out("fake server starting (not JSON)")
			f.out("")
			f.out(`["not","an","object"]`)
			f.respond(r.ID, fakeInit)
		case "notifications/initialized":
			fmt.Fprintln(os.Stderr, "fake: initialized")
		case "tools/list":
			switch cursorOf(r) {
			case "":
				f.respond(r.ID, fakeTools1)
			case "p2":
				f.out(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"listing"}}`)
				f.out(`{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}`)
				f.out(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
				for range 2 {
					_, reply, err := f.readRequest()
					if err != nil {
						fmt.Fprintln(os.Stderr, "fake: reading reply:", err)
						return false
					}
					fmt.Fprintf(os.Stderr, "fake: reply %s\n", reply)
				}
				f.out(`{"jsonrpc":"2.0","id":999,"result":{"stale":true}}`)
				f.respond(r.ID, fakeTools2)
			case "p3":
				f.respond(r.ID, fakeTools3)
			}
		case "prompts/list":
			f.respond(r.ID, fakePrompts)
		case "prompts/get":
			f.respond(r.ID, fakeGreet)
		case "resources/list":
			if cursorOf(r) == "r2" {
				f.respond(r.ID, fakeResources2)
			} else {
				f.respond(r.ID, fakeResources1)
			}
		case "resources/templates/list":
			f.respond(r.ID, fakeTemplates)
		}
		return true
	},
	// apps serves UI resources and prompts (fakeApps*), reporting each
	// read and get on stderr.
	"apps": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInit)
		case "tools/list":
			f.respond(r.ID, fakeAppsTools)
		case "prompts/list":
			f.respond(r.ID, fakeAppsPrompts)
		case "resources/list":
			f.respond(r.ID, fakeAppsResources)
		case "resources/templates/list":
			f.respond(r.ID, `{"resourceTemplates":[]}`)
		case "resources/read":
			fmt.Fprintf(os.Stderr, "fake: read %s\n", r.Params.URI)
			f.respond(r.ID, fakeAppsRead(r.Params.URI))
		case "prompts/get":
			fmt.Fprintf(os.Stderr, "fake: get %s\n", r.Params.Name)
			f.respond(r.ID, `{"messages":[{"role":"user","content":{"type":"text","text":"prompt `+r.Params.Name+`"}}]}`)
		}
		return true
	},
	// toolsOnly advertises no prompts or resources (prompts as null).
	"toolsOnly": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			f.respond(r.ID, fakeTools3)
		}
		return true
	},
	// repeatCursor cycles a, b, a.
	"repeatCursor": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			next := map[string]string{"": "a", "a": "b", "b": "a"}[cursorOf(r)]
			f.respond(r.ID, `{"tools":[],"nextCursor":"`+next+`"}`)
		}
		return true
	},
	// endless always has another page.
	"endless": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			f.page++
			f.respond(r.ID, fmt.Sprintf(`{"tools":[],"nextCursor":"c%d"}`, f.page))
		}
		return true
	},
	// rpcError refuses tools/list.
	"rpcError": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			f.out(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"error":{"code":-32603,"message":"tool registry on fire"}}`)
		}
		return true
	},
	// nullIDError answers tools/list as if it could not parse it.
	"nullIDError": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			f.out(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`)
		}
		return true
	},
	// longLine sends a tools/list result of about 4 KiB.
	"longLine": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			f.respond(r.ID, `{"tools":[{"name":"big","description":"`+strings.Repeat("x", 4096)+`"}]}`)
		}
		return true
	},
	// exitEarly dies on initialize.
	"exitEarly": func(f *fakeServer, r fakeRequest, _ string) bool {
		fmt.Fprintln(os.Stderr, "fake: giving up")
		os.Exit(3)
		return false
	},
	// stall never answers.
	"stall": func(f *fakeServer, r fakeRequest, _ string) bool {
		if r.Method == "initialize" {
			f.out("Server running on stdio")
		}
		return true
	},
	// stallStubborn never answers and ignores SIGTERM and stdin EOF, so only
	// SIGKILL stops it.
	"stallStubborn": func(f *fakeServer, r fakeRequest, _ string) bool {
		signal.Ignore(syscall.SIGTERM)
		for {
			time.Sleep(time.Hour)
		}
	},
	// linger answers everything but does not exit when stdin closes.
	"linger": func(f *fakeServer, r fakeRequest, _ string) bool {
		switch r.Method {
		case "initialize":
			f.respond(r.ID, fakeInitToolsOnly)
		case "tools/list":
			f.respond(r.ID, fakeTools3)
		}
		return true
	},
}

func runFakeServer(mode string) int {
	handle, ok := fakeModes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "fake: unknown mode %q\n", mode)
		return 2
	}
	f := &fakeServer{in: bufio.NewReader(os.Stdin)}
	for {
		r, line, err := f.readRequest()
		if err == io.EOF {
			if mode == "linger" {
				time.Sleep(time.Hour)
			}
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !handle(f, r, line) {
			return 0
		}
	}
}

// fakeAppsRead is the apps mode's read result for uri.
func fakeAppsRead(uri string) string {
	return `{"contents":[{"uri":"` + uri + `","mimeType":"text/html;profile=mcp-app","text":"<html><body>` + uri + `</body></html>"}]}`
}
