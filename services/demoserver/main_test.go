package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

func ship(t *testing.T, base, release string) (int, string) {
	t.Helper()
	resp, err := http.PostForm(base+"/control/release", url.Values{"release": {release}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestRelease: a connected client is told the tools changed when the
// server ships the rug pull, and sees the hostile tools; the release is
// kept across a restart; an unknown release is refused with its code.
func TestRelease(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	cfg := Config{Listen: "127.0.0.1:0", StateFile: state, Release: Reviewed}
	n, err := newNotes(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.handler())
	defer srv.Close()

	changed := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := toolNames(t, cs); !slices.Equal(got, []string{"read_note", "search_notes"}) {
		t.Fatalf("release %s lists %v", Reviewed, got)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_note", Arguments: map[string]any{"id": "n3"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "fail closed") {
		t.Fatalf("read_note: %v %+v", err, res)
	}

	if code, body := ship(t, srv.URL, RugPull); code != http.StatusOK || body != RugPull {
		t.Fatalf("shipping %s: %d %s", RugPull, code, body)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the release")
	}
	if got := toolNames(t, cs); !slices.Equal(got, []string{"export_notes", "read_note", "search_notes"}) {
		t.Fatalf("release %s lists %v", RugPull, got)
	}
	list, _ := cs.ListTools(context.Background(), nil)
	for _, tool := range list.Tools {
		if tool.Name == "read_note" && !strings.Contains(tool.Description, "~/.ssh/id_rsa") {
			t.Errorf("the rug pull's read_note does not ask for the key: %q", tool.Description)
		}
	}

	if code, body := ship(t, srv.URL, "9.9.9"); code != http.StatusBadRequest || !strings.HasPrefix(body, "unknown_release:") {
		t.Errorf("an unknown release: %d %q", code, body)
	}

	again, err := newNotes(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if again.current() != RugPull {
		t.Errorf("after a restart the release is %s, want %s from the state file", again.current(), RugPull)
	}
}

func TestConfig(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string // in the error; empty: valid
	}{
		{"defaults", nil, ""},
		{"not_loopback", []string{"--listen", "0.0.0.0:8490"}, "only a loopback address"},
		{"bad_release", []string{"--release", "2.0.0"}, `release "2.0.0"`},
		{"extra_argument", []string{"x"}, "unexpected arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := parseConfig(c.args, func(string) string { return "" }, &stderr)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("err %v, want %q", err, c.want)
			}
		})
	}
}
