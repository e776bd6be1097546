package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/h1"
)

// A kept-alive connection carries request after request, whatever the
// framing of either side's body, and every body arrives intact.
func TestKeepAlive(t *testing.T) {
	large := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, far past the read buffer
	type msg struct {
		N    int    `json:"n"`
		Text string `json:"text"`
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		request func(t *testing.T, base string, i int) *http.Request
		check   func(t *testing.T, resp *http.Response, body []byte, i int)
	}{
		{
			name: "get-content-length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				b := "answer to " + r.URL.Path
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				_, _ = io.WriteString(w, b)
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				return newRequest(t, context.Background(), http.MethodGet, fmt.Sprintf("%s/%d", base, i), nil)
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if resp.ContentLength < 0 || len(resp.TransferEncoding) > 0 {
					t.Errorf("answer %d: Content-Length %d, Transfer-Encoding %q; want a Content-Length answer", i, resp.ContentLength, resp.TransferEncoding)
				}
				if want := fmt.Sprintf("answer to /%d", i); string(body) != want {
					t.Errorf("answer %d: body %q, want %q", i, body, want)
				}
			},
		},
		{
			name: "get-chunked",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "first part of "+r.URL.Path+";")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "second part")
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				return newRequest(t, context.Background(), http.MethodGet, fmt.Sprintf("%s/%d", base, i), nil)
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
					t.Errorf("answer %d: Transfer-Encoding %q, want chunked", i, resp.TransferEncoding)
				}
				if want := fmt.Sprintf("first part of /%d;second part", i); string(body) != want {
					t.Errorf("answer %d: body %q, want %q", i, body, want)
				}
			},
		},
		{
			name: "get-large",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(large)))
				_, _ = w.Write(large)
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				return newRequest(t, context.Background(), http.MethodGet, base, nil)
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if !bytes.Equal(body, large) {
					t.Errorf("answer %d: %d bytes, not the %d sent", i, len(body), len(large))
				}
			},
		},
		{
			name: "post-json-content-length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				var m msg
				if r.ContentLength <= 0 {
					http.Error(w, "want a Content-Length request", http.StatusBadRequest)
					return
				}
				if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				m.N++
				m.Text = strings.ToUpper(m.Text)
				b, _ := json.Marshal(m)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				_, _ = w.Write(b)
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				b, _ := json.Marshal(msg{N: i, Text: fmt.Sprintf("call %d", i)})
				req := newRequest(t, context.Background(), http.MethodPost, base, bytes.NewReader(b))
				req.Header.Set("Content-Type", "application/json")
				return req
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				var m msg
				if err := json.Unmarshal(body, &m); err != nil {
					t.Fatalf("answer %d: %v (status %d, body %q)", i, err, resp.StatusCode, body)
				}
				if want := (msg{N: i + 1, Text: fmt.Sprintf("CALL %d", i)}); m != want {
					t.Errorf("answer %d: %+v, want %+v", i, m, want)
				}
			},
		},
		{
			name: "post-json-chunked-both-ways",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if !slices.Equal(r.TransferEncoding, []string{"chunked"}) {
					http.Error(w, "want a chunked request", http.StatusBadRequest)
					return
				}
				var m msg
				if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.(http.Flusher).Flush()
				m.N *= 2
				_ = json.NewEncoder(w).Encode(m)
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				b, _ := json.Marshal(msg{N: i, Text: strings.Repeat("x", i)})
				// A reader of unknown length: the request goes out chunked.
				return newRequest(t, context.Background(), http.MethodPost, base, io.MultiReader(bytes.NewReader(b)))
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
					t.Errorf("answer %d: Transfer-Encoding %q, want chunked", i, resp.TransferEncoding)
				}
				var m msg
				if err := json.Unmarshal(body, &m); err != nil {
					t.Fatalf("answer %d: %v (status %d, body %q)", i, err, resp.StatusCode, body)
				}
				if want := (msg{N: 2 * i, Text: strings.Repeat("x", i)}); m != want {
					t.Errorf("answer %d: %+v, want %+v", i, m, want)
				}
			},
		},
		{
			name: "post-expect-100-continue",
			handler: func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body) // reading sends the 100 Continue first
				_, _ = w.Write(append([]byte("got "), b...))
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				req := newRequest(t, context.Background(), http.MethodPost, base, strings.NewReader(strconv.Itoa(i)))
				req.Header.Set("Expect", "100-continue")
				return req
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if want := fmt.Sprintf("got %d", i); resp.StatusCode != http.StatusOK || string(body) != want {
					t.Errorf("answer %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
				}
			},
		},
		{
			name: "head",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "12345")
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				return newRequest(t, context.Background(), http.MethodHead, base, nil)
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if resp.ContentLength != 12345 || len(body) != 0 {
					t.Errorf("answer %d: Content-Length %d and %d bytes of body, want 12345 and none", i, resp.ContentLength, len(body))
				}
			},
		},
		{
			name: "no-content",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			},
			request: func(t *testing.T, base string, i int) *http.Request {
				return newRequest(t, context.Background(), http.MethodDelete, base, nil)
			},
			check: func(t *testing.T, resp *http.Response, body []byte, i int) {
				if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
					t.Errorf("answer %d: %d with %d bytes, want 204 and none", i, resp.StatusCode, len(body))
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, tc.handler, false)
			tr := newTransport(t, h1.Config{})
			for i := range 20 {
				resp, body := fetch(t, tr, tc.request(t, srv.URL, i))
				tc.check(t, resp, []byte(body), i)
			}
			if n := srv.accepted.Load(); n != 1 {
				t.Errorf("the server accepted %d connections for 20 sequential requests, want 1", n)
			}
		})
	}
}

// Callers at once all get their own answers, and once they are done no
// more than MaxIdlePerHost connections stay open.
func TestConcurrentRequests(t *testing.T) {
	const callers, rounds, maxIdle = 32, 10, 4
	var arrived atomic.Int64
	together := make(chan struct{})
	srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first round waits until every caller's request is in, so
		// that each has a connection of its own.
		if arrived.Add(1) == callers {
			close(together)
		}
		select {
		case <-together:
		case <-r.Context().Done():
			return
		case <-t.Context().Done():
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		_, _ = fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}), false)
	tr := newTransport(t, h1.Config{MaxIdlePerHost: maxIdle})
	// The deadline only keeps a broken transport from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for n := range rounds {
				method, body := http.MethodGet, ""
				if n%2 == 1 {
					method, body = http.MethodPost, fmt.Sprintf(`{"caller":%d,"n":%d}`, c, n)
				}
				path := fmt.Sprintf("/%d/%d", c, n)
				req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Errorf("%s %s: %v", method, path, err)
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Errorf("%s %s: reading the answer: %v", method, path, err)
					return
				}
				if want := method + " " + path + " " + body; string(got) != want {
					t.Errorf("%s %s: answer %q, want %q", method, path, got, want)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := srv.accepted.Load(); n < callers {
		t.Errorf("the server accepted %d connections for %d callers at once, want at least as many", n, callers)
	}
	waitFor(t, fmt.Sprintf("the open connections to come down to %d", maxIdle), func() bool {
		return srv.open.Load() == maxIdle
	})
	// The ones kept are good for more.
	before := srv.accepted.Load()
	for range maxIdle {
		get(t, tr, srv.URL+"/again")
	}
	if n := srv.accepted.Load() - before; n != 0 {
		t.Errorf("%d new connections for requests the idle ones could carry", n)
	}
	if n := srv.open.Load(); n != maxIdle {
		t.Errorf("%d connections open, want %d", n, maxIdle)
	}
}

// A body read to its end gives its connection back; one closed before its
// end takes its connection with it.
func TestBodyClose(t *testing.T) {
	payload := strings.Repeat("a", 100<<10)
	for _, tc := range []struct {
		name      string
		read      func(io.Reader) error
		wantReuse bool
	}{
		{"read-to-eof", func(r io.Reader) error { _, err := io.Copy(io.Discard, r); return err }, true},
		{"read-part", func(r io.Reader) error { _, err := io.ReadFull(r, make([]byte, 10)); return err }, false},
		{"read-all-but-one-byte", func(r io.Reader) error {
			_, err := io.ReadFull(r, make([]byte, len(payload)-1))
			return err
		}, false},
		{"not-read", func(io.Reader) error { return nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
				_, _ = io.WriteString(w, payload)
			}), false)
			tr := newTransport(t, h1.Config{})
			resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodGet, srv.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.read(resp.Body); err != nil {
				t.Fatal(err)
			}
			if err := resp.Body.Close(); err != nil {
				t.Fatal(err)
			}
			if err := resp.Body.Close(); err != nil {
				t.Errorf("closing the body again: %v", err)
			}
			if n, err := resp.Body.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("Read after Close = %d, %v; want an error", n, err)
			}
			if !tc.wantReuse {
				waitFor(t, "the server to see the connection closed", func() bool { return srv.open.Load() == 0 })
			}
			if got := get(t, tr, srv.URL); got != payload {
				t.Fatalf("second answer: %d bytes, want %d", len(got), len(payload))
			}
			want := int64(2)
			if tc.wantReuse {
				want = 1
			}
			if n := srv.accepted.Load(); n != want {
				t.Errorf("the server accepted %d connections for two requests, want %d", n, want)
			}
		})
	}
}

// An idle connection the server has closed is not used again: the next
// request, even one that may not be sent twice, goes out on a new one.
func TestServerClosesIdleConnection(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				_, _ = fmt.Fprintf(w, "%s %s", r.Method, b)
			}), false)
			tr := newTransport(t, h1.Config{})
			get(t, tr, srv.URL)
			srv.CloseClientConnections()
			waitFor(t, "the server to close its idle connection", func() bool { return srv.open.Load() == 0 })
			_, body := fetch(t, tr, newRequest(t, context.Background(), method, srv.URL, strings.NewReader("again")))
			if want := method + " again"; body != want {
				t.Errorf("answer %q, want %q", body, want)
			}
			if n := srv.accepted.Load(); n != 2 {
				t.Errorf("the server accepted %d connections, want 2", n)
			}
		})
	}
}

// A reused connection that dies once the request is written, before any
// answer: the request is sent again on a new connection only when it may
// be sent twice and its body can be had again.
func TestRetryAfterConnectionDies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		request func(t *testing.T, url string) (*http.Request, *trackedBody)
		wantErr bool
		wantLog []string
	}{
		{
			name: "get-sent-again",
			request: func(t *testing.T, url string) (*http.Request, *trackedBody) {
				return newRequest(t, context.Background(), http.MethodGet, url+"/b", nil), nil
			},
			wantLog: []string{"0 GET /a", "0 GET /b", "1 GET /b"},
		},
		{
			name: "head-sent-again",
			request: func(t *testing.T, url string) (*http.Request, *trackedBody) {
				return newRequest(t, context.Background(), http.MethodHead, url+"/b", nil), nil
			},
			wantLog: []string{"0 GET /a", "0 HEAD /b", "1 HEAD /b"},
		},
		{
			name: "post-not-sent-again",
			request: func(t *testing.T, url string) (*http.Request, *trackedBody) {
				req := newRequest(t, context.Background(), http.MethodPost, url+"/b", strings.NewReader("once"))
				tb := &trackedBody{ReadCloser: req.Body}
				req.Body = tb
				return req, tb
			},
			wantErr: true,
			wantLog: []string{"0 GET /a", "0 POST /b once", "1 GET /c"},
		},
		{
			name: "post-with-idempotency-key-sent-again",
			request: func(t *testing.T, url string) (*http.Request, *trackedBody) {
				req := newRequest(t, context.Background(), http.MethodPost, url+"/b", strings.NewReader("twice"))
				req.Header.Set("Idempotency-Key", "k1")
				return req, nil
			},
			wantLog: []string{"0 GET /a", "0 POST /b twice", "1 POST /b twice"},
		},
		{
			name: "post-with-idempotency-key-body-not-rewindable",
			request: func(t *testing.T, url string) (*http.Request, *trackedBody) {
				req := newRequest(t, context.Background(), http.MethodPost, url+"/b", strings.NewReader("once"))
				req.Header.Set("Idempotency-Key", "k1")
				req.GetBody = nil
				tb := &trackedBody{ReadCloser: req.Body}
				req.Body = tb
				return req, tb
			},
			wantErr: true,
			wantLog: []string{"0 GET /a", "0 POST /b once", "1 GET /c"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The second request on the first connection is read, then
			// the connection is closed without an answer.
			srv := startRaw(t, func(conn, n int, _ *http.Request) (string, bool) {
				if conn == 0 && n == 1 {
					return "", true
				}
				return okAnswer, false
			})
			tr := newTransport(t, h1.Config{})
			get(t, tr, srv.URL+"/a")
			req, tb := tc.request(t, srv.URL)
			resp, err := tr.RoundTrip(req)
			if tc.wantErr {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("%s went through: %d", req.Method, resp.StatusCode)
				}
				if tb != nil && !tb.closed.Load() {
					t.Error("the request's body was not closed")
				}
				// Had the request been sent again, it would come before
				// this one on the second connection.
				get(t, tr, srv.URL+"/c")
			} else {
				if err != nil {
					t.Fatalf("%s: %v", req.Method, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				want := "ok"
				if req.Method == http.MethodHead {
					want = ""
				}
				if string(b) != want {
					t.Errorf("answer %q, want %q", b, want)
				}
			}
			if got := srv.requests(); !slices.Equal(got, tc.wantLog) {
				t.Errorf("the server saw\n\t%q\nwant\n\t%q", got, tc.wantLog)
			}
		})
	}
}

// An event stream's events can be read one by one as they come, before
// the answer ends, and Buffered tells whether more of it is already here.
func TestStreaming(t *testing.T) {
	events := []string{"data: one\n\n", "id: 2\ndata: two\n\n", "data: three\n\n"}
	t.Run("event-by-event", func(t *testing.T) {
		next := make(chan struct{}, len(events))
		srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/events" {
				_, _ = io.WriteString(w, "plain")
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range events {
				_, _ = io.WriteString(w, ev)
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-r.Context().Done():
					return
				case <-t.Context().Done():
					return
				}
			}
		}), false)
		tr := newTransport(t, h1.Config{})
		// The deadline only keeps a broken stream from hanging the test.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, srv.URL+"/events", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		buffered := resp.Body.(interface{ Buffered() int })
		for i, want := range events {
			got := make([]byte, len(want))
			if _, err := io.ReadFull(resp.Body, got); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if string(got) != want {
				t.Fatalf("event %d: %q, want %q", i, got, want)
			}
			if n := buffered.Buffered(); n != 0 {
				t.Errorf("after event %d, whose sender waits: Buffered() = %d, want 0", i, n)
			}
			next <- struct{}{}
		}
		if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
			t.Fatalf("after the last event: %q, %v; want the end", rest, err)
		}
		resp.Body.Close()
		if got := get(t, tr, srv.URL); got != "plain" {
			t.Errorf("next answer %q", got)
		}
		if n := srv.accepted.Load(); n != 1 {
			t.Errorf("the server accepted %d connections, want 1: a stream read to its end keeps its connection", n)
		}
	})
	t.Run("two-events-in-one-flush", func(t *testing.T) {
		end := make(chan struct{})
		srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, events[0]+events[1])
			w.(http.Flusher).Flush()
			select {
			case <-end:
			case <-r.Context().Done():
			case <-t.Context().Done():
			}
		}), false)
		tr := newTransport(t, h1.Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, srv.URL, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buffered := resp.Body.(interface{ Buffered() int })
		first := make([]byte, len(events[0]))
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != events[0] {
			t.Fatalf("first event %q, %v", first, err)
		}
		if n := buffered.Buffered(); n < len(events[1]) {
			t.Errorf("with the second event sent along with the first: Buffered() = %d, want at least %d", n, len(events[1]))
		}
		second := make([]byte, len(events[1]))
		if _, err := io.ReadFull(resp.Body, second); err != nil || string(second) != events[1] {
			t.Fatalf("second event %q, %v", second, err)
		}
		if n := buffered.Buffered(); n != 0 {
			t.Errorf("with both events read: Buffered() = %d, want 0", n)
		}
		close(end)
		if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
			t.Fatalf("after the last event: %q, %v; want the end", rest, err)
		}
	})
}

// Ending a request's context ends the wait for its answer, or the reading
// of its body, and its connection is not used again.
func TestContextCancel(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run makes a request to url with ctx, calling cancel at the
		// moment under test.
		run func(t *testing.T, ctx context.Context, cancel context.CancelFunc, tr http.RoundTripper, url string, arrived <-chan struct{})
	}{
		{
			name: "waiting-for-the-answer-head",
			run: func(t *testing.T, ctx context.Context, cancel context.CancelFunc, tr http.RoundTripper, url string, arrived <-chan struct{}) {
				type result struct {
					resp *http.Response
					err  error
				}
				done := make(chan result, 1)
				body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("x"))}
				req := newRequest(t, ctx, http.MethodPost, url+"/silent", body)
				go func() {
					resp, err := tr.RoundTrip(req)
					done <- result{resp, err}
				}()
				await(t, "the request to reach the server", arrived)
				cancel()
				r := await(t, "RoundTrip to return after the cancel", done)
				if r.err == nil {
					r.resp.Body.Close()
					t.Fatalf("RoundTrip = %d, want an error", r.resp.StatusCode)
				}
				if !errors.Is(r.err, context.Canceled) {
					t.Errorf("RoundTrip error %v, want context.Canceled", r.err)
				}
				if !body.closed.Load() {
					t.Error("the request's body was not closed")
				}
			},
		},
		{
			name: "reading-the-body",
			run: func(t *testing.T, ctx context.Context, cancel context.CancelFunc, tr http.RoundTripper, url string, arrived <-chan struct{}) {
				resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, url+"/stream", nil))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				first := make([]byte, len("data: 1\n\n"))
				if _, err := io.ReadFull(resp.Body, first); err != nil {
					t.Fatal(err)
				}
				read := make(chan error, 1)
				go func() {
					_, err := resp.Body.Read(make([]byte, 64))
					read <- err
				}()
				cancel()
				if err := await(t, "Read to return after the cancel", read); err == nil {
					t.Error("Read after the cancel returned no error")
				}
				if n, err := resp.Body.Read(make([]byte, 64)); err == nil {
					t.Errorf("a further Read = %d, nil; want an error", n)
				}
				if err := resp.Body.Close(); err != nil {
					t.Logf("Close: %v", err)
				}
			},
		},
		{
			// The context's end may set its deadline on the connection
			// at any moment from then on: it must not go back to the pool.
			name: "after-the-body-was-read",
			run: func(t *testing.T, ctx context.Context, cancel context.CancelFunc, tr http.RoundTripper, url string, arrived <-chan struct{}) {
				resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, url, nil))
				if err != nil {
					t.Fatal(err)
				}
				if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "hello" {
					t.Fatalf("body %q, %v", b, err)
				}
				cancel()
				resp.Body.Close()
			},
		},
		{
			name: "cancelled-before",
			run: func(t *testing.T, ctx context.Context, cancel context.CancelFunc, tr http.RoundTripper, url string, arrived <-chan struct{}) {
				cancel()
				body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("x"))}
				resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodPost, url+"/silent", body))
				if err == nil {
					resp.Body.Close()
					t.Fatalf("RoundTrip = %d, want an error", resp.StatusCode)
				}
				if !errors.Is(err, context.Canceled) {
					t.Errorf("RoundTrip error %v, want context.Canceled", err)
				}
				if !body.closed.Load() {
					t.Error("the request's body was not closed")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/silent":
					_, _ = io.Copy(io.Discard, r.Body) // so that the server notices the client going away
					arrived <- struct{}{}
					hold(t, r)
				case "/stream":
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: 1\n\n")
					w.(http.Flusher).Flush()
					hold(t, r)
				default:
					_, _ = io.WriteString(w, "hello")
				}
			}), false)
			tr := newTransport(t, h1.Config{})
			get(t, tr, srv.URL) // the request under test gets a kept-alive connection
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc.run(t, ctx, cancel, tr, srv.URL, arrived)
			waitFor(t, "the server to see the connection closed", func() bool { return srv.open.Load() == 0 })
			if got := get(t, tr, srv.URL); got != "hello" {
				t.Errorf("next answer %q", got)
			}
			if n := srv.accepted.Load(); n != 2 {
				t.Errorf("the server accepted %d connections, want 2: the cancelled request's is not reused", n)
			}
		})
	}
}

// Close from another goroutine wakes a Read blocked on the connection.
func TestCloseUnblocksRead(t *testing.T) {
	srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			_, _ = io.WriteString(w, "hello")
			return
		}
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		hold(t, r)
	}), false)
	tr := newTransport(t, h1.Config{})
	resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodGet, srv.URL+"/stream", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, len("data: 1\n\n"))); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 64))
		read <- err
	}()
	waitFor(t, "the Read to block on the connection", blockedInBodyRead)
	closed := make(chan error, 1)
	go func() { closed <- resp.Body.Close() }()
	if err := await(t, "Read to return after Close", read); err == nil {
		t.Error("the Read cut short by Close returned no error")
	}
	await(t, "Close to return", closed)
	waitFor(t, "the server to see the connection closed", func() bool { return srv.open.Load() == 0 })
	if got := get(t, tr, srv.URL); got != "hello" {
		t.Errorf("next answer %q", got)
	}
}

// 1xx answers ahead of the real one are skipped and leave the connection
// good for the next request.
func TestInformationalAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		interim string
	}{
		{"100-continue", "HTTP/1.1 100 Continue\r\n\r\n"},
		{"103-early-hints", "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"},
		{"several", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRaw(t, func(conn, n int, _ *http.Request) (string, bool) {
				if n == 0 {
					return tc.interim + okAnswer, false
				}
				return okAnswer, false
			})
			tr := newTransport(t, h1.Config{})
			resp, body := fetch(t, tr, newRequest(t, context.Background(), http.MethodPost, srv.URL+"/1", strings.NewReader("x")))
			if resp.StatusCode != http.StatusOK || body != "ok" {
				t.Errorf("answer %d %q, want 200 \"ok\"", resp.StatusCode, body)
			}
			if link := resp.Header.Get("Link"); link != "" {
				t.Errorf("a 1xx answer's header reached the final answer: Link %q", link)
			}
			get(t, tr, srv.URL+"/2")
			if got, want := srv.requests(), []string{"0 POST /1 x", "0 GET /2"}; !slices.Equal(got, want) {
				t.Errorf("the server saw %q, want %q", got, want)
			}
		})
	}
}

// Answers after which the connection may not carry another request: the
// next one goes out on a new connection, and the old one is closed.
func TestNotPooled(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     string
		hangUp     bool // the server closes the connection after answering
		closeReq   bool
		wantStatus int
		wantBody   string
	}{
		{name: "answer-connection-close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", wantStatus: 200, wantBody: "ok"},
		{name: "request-close", answer: okAnswer, closeReq: true, wantStatus: 200, wantBody: "ok"},
		{name: "http-1.0-answer", answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", wantStatus: 200, wantBody: "ok"},
		{name: "body-until-close", answer: "HTTP/1.1 200 OK\r\n\r\nuntil the end", hangUp: true, wantStatus: 200, wantBody: "until the end"},
		{name: "bytes-after-the-answer", answer: okAnswer + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra", wantStatus: 200, wantBody: "ok"},
		{name: "switching-protocols", answer: "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\n", wantStatus: 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRaw(t, func(conn, n int, _ *http.Request) (string, bool) {
				if conn == 0 && n == 0 {
					return tc.answer, tc.hangUp
				}
				return okAnswer, false
			})
			tr := newTransport(t, h1.Config{})
			// Bounds the wait on an answer the transport might misread.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := newRequest(t, ctx, http.MethodGet, srv.URL+"/1", nil)
			req.Close = tc.closeReq
			resp, body := fetch(t, tr, req)
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
				t.Errorf("answer %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if !tc.hangUp {
				waitFor(t, "the first connection to be closed", func() bool { return srv.clientClosed(0) })
			}
			get(t, tr, srv.URL+"/2")
			if got, want := srv.requests(), []string{"0 GET /1", "1 GET /2"}; !slices.Equal(got, want) {
				t.Errorf("the server saw %q, want %q", got, want)
			}
		})
	}
}

// What the server sends back is not an answer, or not all of one.
func TestBrokenAnswer(t *testing.T) {
	t.Run("garbage", func(t *testing.T) {
		srv := startRaw(t, func(int, int, *http.Request) (string, bool) { return "SSH-2.0-OpenSSH_9.6\r\n\r\n", false })
		tr := newTransport(t, h1.Config{})
		body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("x"))}
		resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodPost, srv.URL, body))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("RoundTrip = %d, want an error", resp.StatusCode)
		}
		if !body.closed.Load() {
			t.Error("the request's body was not closed")
		}
		waitFor(t, "the connection to be closed", func() bool { return srv.clientClosed(0) })
	})
	t.Run("truncated-body", func(t *testing.T) {
		srv := startRaw(t, func(conn, n int, _ *http.Request) (string, bool) {
			if conn == 0 {
				return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true
			}
			return okAnswer, false
		})
		tr := newTransport(t, h1.Config{})
		resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodGet, srv.URL+"/1", nil))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "abc" || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("body %q, %v; want \"abc\", %v", b, err, io.ErrUnexpectedEOF)
		}
		get(t, tr, srv.URL+"/2")
		if got, want := srv.requests(), []string{"0 GET /1", "1 GET /2"}; !slices.Equal(got, want) {
			t.Errorf("the server saw %q, want %q", got, want)
		}
	})
	t.Run("no-answer-on-a-new-connection", func(t *testing.T) {
		// Only a kept-alive connection's failure is taken for a race with
		// the server closing it; a new one's is the answer.
		srv := startRaw(t, func(int, int, *http.Request) (string, bool) { return "", true })
		tr := newTransport(t, h1.Config{})
		resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodGet, srv.URL+"/1", nil))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("RoundTrip = %d, want an error", resp.StatusCode)
		}
		if got, want := srv.requests(), []string{"0 GET /1"}; !slices.Equal(got, want) {
			t.Errorf("the server saw %q, want %q", got, want)
		}
	})
}

// The requests h1 does not take on go to the Fallback, untouched.
func TestFallback(t *testing.T) {
	proxyURL, _ := url.Parse("http://proxy.invalid:3128")
	for _, tc := range []struct {
		name         string
		url          string // "" for the test server's
		header       http.Header
		proxy        func(*http.Request) (*url.URL, error)
		wantFallback bool
	}{
		{name: "plain-http", wantFallback: false},
		{name: "upgrade", header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, wantFallback: true},
		{name: "proxied", proxy: func(*http.Request) (*url.URL, error) { return proxyURL, nil }, wantFallback: true},
		{name: "proxy-setting-error", proxy: func(*http.Request) (*url.URL, error) { return nil, errors.New("bad proxy setting") }, wantFallback: true},
		{name: "ws-scheme", url: "ws://127.0.0.1:1/socket", wantFallback: true},
		{name: "ftp-scheme", url: "ftp://127.0.0.1:1/file", wantFallback: true},
		{name: "no-host", url: "http:///path", wantFallback: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "from the server")
			}), false)
			fb := &recordingTransport{}
			tr := newTransport(t, h1.Config{Fallback: fb, Proxy: tc.proxy})
			u := tc.url
			if u == "" {
				u = srv.URL + "/path"
			}
			req := newRequest(t, context.Background(), http.MethodGet, u, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, body := fetch(t, tr, req)
			got := fb.taken()
			if !tc.wantFallback {
				if len(got) != 0 || resp.StatusCode != http.StatusOK || body != "from the server" {
					t.Errorf("answer %d %q with %d requests to the fallback, want the server's", resp.StatusCode, body, len(got))
				}
				return
			}
			if len(got) != 1 || got[0] != req {
				t.Fatalf("the fallback had %d requests, want this one", len(got))
			}
			if resp.StatusCode != http.StatusTeapot {
				t.Errorf("answer %d, want the fallback's %d", resp.StatusCode, http.StatusTeapot)
			}
			if n := srv.accepted.Load(); n != 0 {
				t.Errorf("the server accepted %d connections, want none", n)
			}
		})
	}
}

// https upstreams: verified against Config.TLS's roots, and kept alive.
func TestTLS(t *testing.T) {
	t.Run("trusted", func(t *testing.T) {
		srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil {
				http.Error(w, "not over TLS", http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(r.Body)
			_, _ = fmt.Fprintf(w, "%s %s %s %s", r.Proto, r.Method, r.URL.Path, b)
		}), true)
		tr := newTransport(t, h1.Config{TLS: &tls.Config{RootCAs: srv.roots()}})
		for i := range 10 {
			method, body := http.MethodGet, ""
			if i%2 == 1 {
				method, body = http.MethodPost, fmt.Sprintf(`{"i":%d}`, i)
			}
			resp, got := fetch(t, tr, newRequest(t, context.Background(), method, fmt.Sprintf("%s/%d", srv.URL, i), strings.NewReader(body)))
			if want := fmt.Sprintf("HTTP/1.1 %s /%d %s", method, i, body); resp.StatusCode != http.StatusOK || got != want {
				t.Errorf("answer %d: %d %q, want 200 %q", i, resp.StatusCode, got, want)
			}
		}
		if n := srv.accepted.Load(); n != 1 {
			t.Errorf("the server accepted %d connections for 10 sequential requests, want 1", n)
		}
	})
	t.Run("unknown-authority", func(t *testing.T) {
		var called atomic.Bool
		srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called.Store(true) }), true, func(s *http.Server) {
			s.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake
		})
		tr := newTransport(t, h1.Config{}) // the system's roots, which do not have the test server's
		body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("x"))}
		resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodPost, srv.URL, body))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("RoundTrip = %d, want a certificate error", resp.StatusCode)
		}
		var cve *tls.CertificateVerificationError
		if !errors.As(err, &cve) {
			t.Errorf("RoundTrip error %v, want a certificate verification error", err)
		}
		if called.Load() {
			t.Error("the request reached the handler")
		}
		if !body.closed.Load() {
			t.Error("the request's body was not closed")
		}
	})
}

// A request to a port nobody listens on fails, and its body is closed.
func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			tr := newTransport(t, h1.Config{})
			body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("x"))}
			resp, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodPost, scheme+"://"+addr+"/", body))
			if err == nil {
				resp.Body.Close()
				t.Fatalf("RoundTrip = %d, want an error", resp.StatusCode)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "dial" {
				t.Errorf("RoundTrip error %v, want a dial error", err)
			}
			if !body.closed.Load() {
				t.Error("the request's body was not closed")
			}
		})
	}
}

// An idle connection older than IdleTimeout is closed, not used.
func TestIdleTimeout(t *testing.T) {
	srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}), false)
	tr := newTransport(t, h1.Config{IdleTimeout: time.Nanosecond})
	for range 3 {
		get(t, tr, srv.URL)
	}
	if n := srv.accepted.Load(); n != 3 {
		t.Errorf("the server accepted %d connections, want 3: none was young enough to reuse", n)
	}
	waitFor(t, "the stale connections to be closed", func() bool { return srv.open.Load() == 1 })
}

// CloseIdleConnections and Close close the pooled connections; after Close
// none is kept, not even one whose answer was under way.
func TestCloseIdle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(*h1.Transport)
		keeps bool // connections are pooled afterwards
	}{
		{"close-idle-connections", (*h1.Transport).CloseIdleConnections, true},
		{"close", (*h1.Transport).Close, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const conns = 3
			var arrived atomic.Int64
			together := make(chan struct{})
			srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/together" {
					if arrived.Add(1) == conns {
						close(together)
					}
					select {
					case <-together:
					case <-r.Context().Done():
						return
					case <-t.Context().Done():
						return
					}
				}
				_, _ = io.WriteString(w, "hello")
			}), false)
			tr := newTransport(t, h1.Config{})
			// The deadline only keeps a broken transport from hanging the test.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for range conns {
				req := newRequest(t, ctx, http.MethodGet, srv.URL+"/together", nil)
				wg.Go(func() {
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			// One answer is under way while the pool is closed.
			inFlight, err := tr.RoundTrip(newRequest(t, context.Background(), http.MethodGet, srv.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			if n := srv.open.Load(); n != conns {
				t.Fatalf("%d connections open before closing, want %d", n, conns)
			}
			tc.close(tr)
			waitFor(t, "the server to see the idle connections closed", func() bool { return srv.open.Load() == 1 })
			if b, err := io.ReadAll(inFlight.Body); err != nil || string(b) != "hello" {
				t.Fatalf("the answer under way: %q, %v", b, err)
			}
			inFlight.Body.Close()
			if !tc.keeps {
				waitFor(t, "the server to see the last connection closed", func() bool { return srv.open.Load() == 0 })
			}
			accepted := srv.accepted.Load()
			get(t, tr, srv.URL)
			get(t, tr, srv.URL)
			n := srv.accepted.Load() - accepted
			switch {
			case tc.keeps && n != 0:
				t.Errorf("%d new connections after CloseIdleConnections, want the kept one used", n)
			case !tc.keeps && n != 2:
				t.Errorf("%d new connections for two requests after Close, want 2", n)
			}
			if !tc.keeps {
				waitFor(t, "the server to see every connection closed", func() bool { return srv.open.Load() == 0 })
			}
		})
	}
}

// okAnswer is a raw server's ordinary answer.
const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// server is an httptest server that counts the connections it accepts and
// those still open.
type server struct {
	*httptest.Server
	accepted atomic.Int64
	open     atomic.Int64
}

func startServer(t *testing.T, h http.Handler, useTLS bool, configure ...func(*http.Server)) *server {
	t.Helper()
	s := &server{Server: httptest.NewUnstartedServer(h)}
	for _, f := range configure {
		f(s.Config)
	}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// roots are the certificates that verify a TLS server's.
func (s *server) roots() *x509.CertPool {
	return s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
}

// rawServer speaks HTTP/1.1 by hand, to misbehave on purpose: answer says
// what to write back to request n on connection conn (nothing, for none)
// and whether to close the connection then. It records each request as
// "conn METHOD path body".
type rawServer struct {
	URL    string
	answer func(conn, n int, req *http.Request) (string, bool)

	mu     sync.Mutex
	log    []string
	gone   map[int]bool // connections the client closed
	conns  []net.Conn
	closed bool
}

func startRaw(t *testing.T, answer func(conn, n int, req *http.Request) (reply string, hangUp bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{URL: "http://" + ln.Addr().String(), answer: answer, gone: map[int]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return
			}
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			wg.Go(func() { s.serve(i, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		s.closed = true
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *rawServer) serve(conn int, c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			s.mu.Lock()
			s.gone[conn] = true
			s.mu.Unlock()
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.log = append(s.log, strings.TrimSpace(fmt.Sprintf("%d %s %s %s", conn, req.Method, req.URL.Path, body)))
		s.mu.Unlock()
		reply, hangUp := s.answer(conn, n, req)
		if reply != "" {
			if _, err := io.WriteString(c, reply); err != nil {
				return
			}
		}
		if hangUp {
			return
		}
	}
}

// requests are the requests the server has read, in order.
func (s *rawServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// clientClosed reports whether the client has closed connection conn.
func (s *rawServer) clientClosed(conn int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone[conn]
}

// recordingTransport stands in for the Fallback: it records the requests
// it gets and answers each with 418.
type recordingTransport struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return &http.Response{StatusCode: http.StatusTeapot, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func (r *recordingTransport) taken() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// noFallback fails the test when h1 hands on a request it should take.
type noFallback struct{ t *testing.T }

func (f noFallback) RoundTrip(req *http.Request) (*http.Response, error) {
	f.t.Errorf("%s %s went to the fallback", req.Method, req.URL)
	return nil, errors.New("unexpected fallback")
}

// trackedBody is a request body that tells whether it was closed.
type trackedBody struct {
	io.ReadCloser
	closed atomic.Bool
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

// newTransport returns a Transport that ignores the environment's proxy
// settings and fails the test on any use of the fallback, unless cfg says
// otherwise; it is closed when the test ends.
func newTransport(t *testing.T, cfg h1.Config) *h1.Transport {
	t.Helper()
	if cfg.Proxy == nil {
		cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	}
	if cfg.Fallback == nil {
		cfg.Fallback = noFallback{t}
	}
	tr := h1.New(cfg)
	t.Cleanup(tr.Close)
	return tr
}

func newRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// fetch makes req and returns the answer and its body, read to its end and
// closed.
func fetch(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL, err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("%s %s: closing the answer: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// get GETs url and returns the answer's body.
func get(t *testing.T, tr http.RoundTripper, url string) string {
	t.Helper()
	_, b := fetch(t, tr, newRequest(t, context.Background(), http.MethodGet, url, nil))
	return b
}

// hold keeps a handler until its client goes away or the test ends.
func hold(t *testing.T, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-t.Context().Done():
	}
}

// waitFor polls cond until it holds, failing the test if it never does.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// await returns what ch delivers. Its limit only keeps a broken transport
// from hanging the test; it is no assertion about speed.
func await[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
		var zero T
		return zero
	}
}

// blockedInBodyRead reports whether a goroutine is parked on the network
// inside an answer body's Read.
func blockedInBodyRead() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "h1.(*body).Read(") {
			return true
		}
	}
	return false
}
