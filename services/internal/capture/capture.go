// Package capture records what an MCP server advertises over the stdio
// transport, keeping the server's own bytes.
//
// Run starts the server, performs the initialize handshake, then lists every
// page of tools/list and, when the server advertises the matching capability,
// of prompts/list, resources/list and resources/templates/list, then reads
// what a proxy pins beside the listings (the contents of every UI resource,
// the messages of every prompt that takes no arguments; in the order the
// engine lists them, by name). It writes one JSON object:
//
//	{"initialize": <result>,
//	 "tools": {"pages": [<result>, ...]},
//	 "prompts": {"pages": [...]},
//	 "resources": {"pages": [...]},
//	 "resourceTemplates": {"pages": [...]},
//	 "uiContents": {"ui://...": <result>, ...},
//	 "promptMessages": {"<prompt>": <result>, ...}}
//
// Each <result> is the "result" member of the server's JSON-RPC response,
// copied byte for byte: nothing is decoded and re-encoded, so escapes, key
// order and whitespace are the server's. Keys for lists that were not
// queried are absent. The fingerprint engine reads this format; what counts
// as a change is decided there, not here.
package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Defaults applied by Run to zero-valued Config fields.
const (
	DefaultProtocolVersion = "2025-06-18"
	DefaultTimeout         = 30 * time.Second
	DefaultMaxPages        = 1000
	DefaultMaxLineBytes    = 64 << 20
)

// The clientInfo sent in initialize.
const (
	clientName    = "mcpdrift-capture"
	clientVersion = "0.1.0"
)

// Config says which server to start and how to talk to it. Zero values
// select the defaults above.
type Config struct {
	// Command is the server executable, resolved like exec.Command does.
	Command string
	// Args are the arguments after Command.
	Args []string
	// Env is the server's whole environment; nil inherits this process's.
	Env []string
	// Dir is the server's working directory; empty means this process's.
	Dir string
	// Timeout bounds the capture, from start to the last page. Stopping
	// the server afterwards may take up to four seconds more (see Run).
	Timeout time.Duration
	// ProtocolVersion is sent in initialize.
	ProtocolVersion string
	// ClientCapabilities is sent in initialize; it must be a JSON object.
	// Default {}.
	ClientCapabilities json.RawMessage
	// MaxPages bounds the pages read for each list method.
	MaxPages int
	// MaxLineBytes bounds one line (one JSON-RPC message) on the server's
	// stdout, excluding the newline.
	MaxLineBytes int
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Command == "" {
		errs = append(errs, errors.New("capture: command is required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("capture: timeout %s is negative", c.Timeout))
	}
	if c.MaxPages < 0 {
		errs = append(errs, fmt.Errorf("capture: max pages %d is negative", c.MaxPages))
	}
	if c.MaxLineBytes < 0 {
		errs = append(errs, fmt.Errorf("capture: max line bytes %d is negative", c.MaxLineBytes))
	}
	if len(c.ClientCapabilities) > 0 && !isJSONObject(c.ClientCapabilities) {
		errs = append(errs, errors.New("capture: client capabilities must be a JSON object"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ProtocolVersion == "" {
		c.ProtocolVersion = DefaultProtocolVersion
	}
	if len(c.ClientCapabilities) == 0 {
		c.ClientCapabilities = json.RawMessage(`{}`)
	}
	if c.MaxPages == 0 {
		c.MaxPages = DefaultMaxPages
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = DefaultMaxLineBytes
	}
	return c
}

// RPCError is a JSON-RPC error object sent by the server in answer to one of
// the capture client's requests.
type RPCError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("server error %d: %s", e.Code, e.Message)
}

// timeoutError is the cause of the context that bounds a capture.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("capture timed out after %s", e.d) }
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// Run starts the server described by cfg, captures what it advertises and
// writes the capture to w, only once the capture is complete and the server
// has been stopped. The server's stderr is copied to stderr; nil discards it.
//
// The server is stopped by closing its stdin; one that has not exited two
// seconds later gets SIGTERM, and SIGKILL two seconds after that. The same
// happens at once when ctx is done or cfg.Timeout passes. The server's exit
// status does not affect a capture that completed.
func Run(ctx context.Context, cfg Config, w io.Writer, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, &timeoutError{cfg.Timeout})
	defer cancel()

	s, err := start(ctx, cfg, stderr)
	if err != nil {
		return fmt.Errorf("starting server %q: %w", cfg.Command, err)
	}
	c, err := s.capture(ctx, cfg)
	s.stop() // the exit status of a server that answered everything is not a capture error
	if err != nil {
		return err
	}
	if _, err := w.Write(c.encode()); err != nil {
		return fmt.Errorf("writing capture: %w", err)
	}
	return nil
}

// captured holds the raw results; a nil list was not queried.
type captured struct {
	initialize json.RawMessage
	tools      []json.RawMessage
	prompts    []json.RawMessage
	resources  []json.RawMessage
	templates  []json.RawMessage
	ui         []named // the UI resources' read results (uiContents)
	messages   []named // the argument-less prompts' get results (promptMessages)
}

// named is a result by the name it was asked for.
type named struct {
	name   string
	result json.RawMessage
}

// encode writes the capture format by hand so every result keeps its bytes.
func (c *captured) encode() []byte {
	var b bytes.Buffer
	b.WriteString(`{"initialize":`)
	b.Write(c.initialize)
	for _, l := range []struct {
		key   string
		pages []json.RawMessage
	}{
		{"tools", c.tools},
		{"prompts", c.prompts},
		{"resources", c.resources},
		{"resourceTemplates", c.templates},
	} {
		if l.pages == nil {
			continue
		}
		b.WriteString(`,"` + l.key + `":{"pages":[`)
		for i, p := range l.pages {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(p)
		}
		b.WriteString(`]}`)
	}
	for _, m := range []struct {
		key     string
		results []named
	}{
		{"uiContents", c.ui},
		{"promptMessages", c.messages},
	} {
		if len(m.results) == 0 {
			continue
		}
		b.WriteString(`,"` + m.key + `":{`)
		for i, r := range m.results {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(r.name)
			b.Write(name)
			b.WriteByte(':')
			b.Write(r.result)
		}
		b.WriteByte('}')
	}
	b.WriteString("}\n")
	return b.Bytes()
}

func (s *session) capture(ctx context.Context, cfg Config) (*captured, error) {
	initResult, err := s.call(ctx, "initialize", initializeParams{
		ProtocolVersion: cfg.ProtocolVersion,
		Capabilities:    cfg.ClientCapabilities,
		ClientInfo:      implementation{Name: clientName, Version: clientVersion},
	})
	if err != nil {
		return nil, fmt.Errorf("reading initialize result: %w", err)
	}
	caps, err := advertised(initResult)
	if err != nil {
		return nil, fmt.Errorf("reading initialize result: %w", err)
	}
	if err := s.send(notification{JSONRPC: "2.0", Method: "notifications/initialized"}); err != nil {
		return nil, fmt.Errorf("sending notifications/initialized: %w", err)
	}

	c := &captured{initialize: initResult}
	if c.tools, err = s.list(ctx, "tools/list", cfg.MaxPages); err != nil {
		return nil, err
	}
	if caps.prompts {
		if c.prompts, err = s.list(ctx, "prompts/list", cfg.MaxPages); err != nil {
			return nil, err
		}
	}
	if caps.resources {
		if c.resources, err = s.list(ctx, "resources/list", cfg.MaxPages); err != nil {
			return nil, err
		}
		if c.templates, err = s.list(ctx, "resources/templates/list", cfg.MaxPages); err != nil {
			return nil, err
		}
	}
	if err := s.contents(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

// contents gets what a proxy pins beside the listings, as the proxy gets
// it itself before it publishes a surface (docs/adr/0016 and 0017): the
// contents of every listed UI resource (a ui:// uri, or one a tool's UI
// link names) and the messages of every listed prompt that declares no
// arguments, so that a capture hashes as the proxy's surface does. A
// listing the engine cannot read has none: the capture is written as it
// is, and fingerprinting it says why.
func (s *session) contents(ctx context.Context, c *captured) error {
	sf, err := surface.Parse(c.encode(), surface.Options{Form: surface.FormV2})
	if err != nil {
		return nil
	}
	linked := map[string]bool{}
	for _, t := range sf.Of(surface.KindTool) {
		for _, u := range surface.UILinks(t) {
			linked[u] = true
		}
	}
	for _, r := range sf.Of(surface.KindResource) {
		if !surface.IsUIResource(r.Name) && !linked[r.Name] {
			continue
		}
		res, err := s.call(ctx, "resources/read", map[string]string{"uri": r.Name})
		if err != nil {
			return fmt.Errorf("reading the UI resource %s: %w", quoteShort([]byte(r.Name)), err)
		}
		c.ui = append(c.ui, named{r.Name, res})
	}
	for _, p := range sf.Of(surface.KindPrompt) {
		if !surface.PromptTakesNoArguments(p.Canonical) {
			continue
		}
		res, err := s.call(ctx, "prompts/get", map[string]string{"name": p.Name})
		if err != nil {
			return fmt.Errorf("getting the prompt %s: %w", quoteShort([]byte(p.Name)), err)
		}
		c.messages = append(c.messages, named{p.Name, res})
	}
	return nil
}

// list reads every page of a paginated list method.
func (s *session) list(ctx context.Context, method string, maxPages int) ([]json.RawMessage, error) {
	var (
		pages  []json.RawMessage
		params any                    // nil on the first page: no cursor
		seen   = make(map[string]int) // cursor -> page that returned it
	)
	for page := 1; ; page++ {
		if page > maxPages {
			return nil, fmt.Errorf("reading %s page %d: server has more than the limit of %d pages", method, page, maxPages)
		}
		result, err := s.call(ctx, method, params)
		if err != nil {
			return nil, fmt.Errorf("reading %s page %d: %w", method, page, err)
		}
		next, more, err := nextCursor(result)
		if err != nil {
			return nil, fmt.Errorf("reading %s page %d: %w", method, page, err)
		}
		pages = append(pages, result)
		if !more {
			return pages, nil
		}
		if first, ok := seen[next]; ok {
			return nil, fmt.Errorf("reading %s page %d: server repeated cursor %s first returned on page %d",
				method, page, quoteShort([]byte(next)), first)
		}
		seen[next] = page
		params = listParams{Cursor: next}
	}
}

type capabilities struct{ prompts, resources bool }

// advertised reports which optional lists the initialize result's
// capabilities advertise. A capability that is null counts as absent.
func advertised(initResult json.RawMessage) (capabilities, error) {
	members, err := objectMembers(initResult)
	if err != nil {
		return capabilities{}, fmt.Errorf("result: %w", err)
	}
	raw, err := unique(members, "capabilities")
	if err != nil || raw == nil || isNull(raw) {
		return capabilities{}, err
	}
	cm, err := objectMembers(raw)
	if err != nil {
		return capabilities{}, fmt.Errorf("capabilities: %w", err)
	}
	var c capabilities
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"prompts", &c.prompts}, {"resources", &c.resources}} {
		v, err := unique(cm, f.name)
		if err != nil {
			return capabilities{}, fmt.Errorf("capabilities: %w", err)
		}
		*f.dst = v != nil && !isNull(v)
	}
	return c, nil
}

// nextCursor returns the result's nextCursor; more is false when it is
// absent, null or empty (as the reference SDK client reads it, and as the
// fingerprint engine does).
func nextCursor(result json.RawMessage) (cursor string, more bool, err error) {
	members, err := objectMembers(result)
	if err != nil {
		return "", false, fmt.Errorf("result: %w", err)
	}
	raw, err := unique(members, "nextCursor")
	if err != nil {
		return "", false, fmt.Errorf("result: %w", err)
	}
	if raw == nil || isNull(raw) {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &cursor); err != nil {
		return "", false, fmt.Errorf("result: nextCursor %s is not a string", quoteShort(raw))
	}
	return cursor, cursor != "", nil
}

// Wire types for what the capture client sends. encoding/json compacts
// ClientCapabilities, which keeps every message on one line.
type (
	request struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}
	notification struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
	}
	initializeParams struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ClientInfo      implementation  `json:"clientInfo"`
	}
	implementation struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	listParams struct {
		Cursor string `json:"cursor"`
	}
)
