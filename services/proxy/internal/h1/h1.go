// Package h1 is the proxy's HTTP/1.1 client for its upstream servers: an
// http.RoundTripper that writes each request and reads its answer on the
// calling goroutine, over kept-alive connections.
//
// net/http's Transport hands every request to a writer goroutine and every
// answer back from a reader goroutine of the connection's own. Each hand-off
// wakes a goroutine, and on a busy host that is most of what a proxy hop
// costs: measured in the same run, a bare httputil.ReverseProxy added three
// to four times the latency of a TCP relay. Here the caller writes the
// request, reads the status line and headers, and reads the body itself;
// the connection goes back to the pool when the body has been read to its
// end and closed.
//
// Requests h1 does not take on (those the environment's HTTP proxy settings
// route through a proxy, protocol upgrades, schemes other than http and
// https) go to the Fallback transport.
package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// Transport is an HTTP/1.1 RoundTripper with a pool of idle connections
// per host. Its zero value is not usable; use New.
type Transport struct {
	cfg Config

	mu     sync.Mutex
	idle   map[string][]*conn // by scheme://host:port, most recently used last
	closed bool
}

// Config tunes a Transport; zero fields take the defaults.
type Config struct {
	MaxIdlePerHost int                                   // idle connections kept per host (64)
	IdleTimeout    time.Duration                         // an idle connection older than this is not reused (90 s)
	DialTimeout    time.Duration                         // bound on connecting, TLS included (10 s)
	TLS            *tls.Config                           // for https upstreams; nil: the system's roots
	Proxy          func(*http.Request) (*url.URL, error) // requests it routes to a proxy go to Fallback (http.ProxyFromEnvironment)
	Fallback       http.RoundTripper                     // nil: http.DefaultTransport
}

// New returns a Transport.
func New(cfg Config) *Transport {
	if cfg.MaxIdlePerHost <= 0 {
		cfg.MaxIdlePerHost = 64
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Proxy == nil {
		cfg.Proxy = http.ProxyFromEnvironment
	}
	if cfg.Fallback == nil {
		cfg.Fallback = http.DefaultTransport
	}
	return &Transport{cfg: cfg, idle: map[string][]*conn{}}
}

// conn is one connection to an upstream.
type conn struct {
	nc    net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	key   string
	since time.Time // when it went idle
}

// RoundTrip sends req and returns the answer. The body of the answer reads
// from the connection itself; closing it returns the connection to the pool
// when the body was read to its end, and closes the connection otherwise.
// Ending req's context ends the request, or the reading of its body.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.takes(req) {
		return t.cfg.Fallback.RoundTrip(req)
	}
	key := req.URL.Scheme + "://" + canonicalAddr(req.URL)
	for attempt := 0; ; attempt++ {
		c, reused := t.get(key)
		if c == nil {
			var err error
			if c, err = t.dial(req.Context(), req.URL, key); err != nil {
				closeBody(req)
				return nil, err
			}
		}
		resp, err := t.exchange(req, c)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		// A kept-alive connection the server closed just as it was taken
		// fails before any answer. Send again on a new one, once, when the
		// request cannot have reached the server (it was not all written)
		// or may be sent twice (net/http's rule), and its body can be had
		// again.
		var re *retryable
		early := errors.As(err, &re)
		if reused && attempt == 0 && early && (!re.written || replayable(req)) && req.Context().Err() == nil && rewind(req) {
			continue
		}
		closeBody(req)
		if early {
			err = re.err
		}
		if cerr := req.Context().Err(); cerr != nil {
			err = cerr
		}
		return nil, err
	}
}

// takes reports whether h1 handles req itself.
func (t *Transport) takes(req *http.Request) bool {
	if req.URL == nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		return false
	}
	if u, err := t.cfg.Proxy(req); err != nil || u != nil {
		return false
	}
	return true
}

// retryable is an error met before any byte of the answer was read;
// written says whether the whole request had been written.
type retryable struct {
	err     error
	written bool
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// exchange writes req on c and reads the answer's head.
func (t *Transport) exchange(req *http.Request, c *conn) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Ending the context interrupts whatever the connection is doing.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	if err := req.Write(c.bw); err != nil {
		stop()
		return nil, &retryable{err: err}
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, &retryable{err: err}
	}
	if _, err := c.br.Peek(1); err != nil {
		stop()
		return nil, &retryable{err: err, written: true}
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		stop()
		return nil, err
	}
	for resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		// 1xx answers (100 Continue, 103 Early Hints) precede the real one.
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			stop()
			return nil, err
		}
	}
	resp.Body = &body{rc: resp.Body, t: t, c: c, stop: stop, keep: !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	return resp, nil
}

// body is an answer's body: it gives the connection back to the pool once
// read to its end and closed.
type body struct {
	rc   io.ReadCloser
	t    *Transport
	c    *conn
	stop func() bool
	keep bool // the connection may be kept after this answer

	mu   sync.Mutex
	eof  bool
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errors.New("h1: read on a closed body")
	}
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *body) Close() error {
	// Close may come from another goroutine while Read blocks: wake the
	// reader first, then settle the connection.
	if !b.tryLock() {
		_ = b.c.nc.SetDeadline(time.Unix(1, 0))
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	interrupted := !b.stop() // the context ended: the deadline is set
	if b.eof && b.keep && !interrupted {
		_ = b.rc.Close()
		b.t.put(b.c)
		return nil
	}
	return b.c.nc.Close()
}

// Buffered reports how many bytes of the answer have arrived and not been
// read yet (an event stream's relay uses it to tell whether its next event
// is already here). Not to be called while a Read is under way.
func (b *body) Buffered() int { return b.c.br.Buffered() }

func (b *body) tryLock() bool { return b.mu.TryLock() }

// get takes an idle connection to key, the most recently used first.
func (t *Transport) get(key string) (*conn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[key]
	for len(list) > 0 {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		if time.Since(c.since) < t.cfg.IdleTimeout && c.br.Buffered() == 0 && alive(c.nc) {
			t.idle[key] = list
			return c, true
		}
		c.nc.Close()
	}
	t.idle[key] = list
	return nil, false
}

// put keeps c for reuse, closing the oldest idle connection past the limit.
func (t *Transport) put(c *conn) {
	_ = c.nc.SetDeadline(time.Time{})
	c.since = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || c.br.Buffered() > 0 {
		c.nc.Close()
		return
	}
	list := append(t.idle[c.key], c)
	if len(list) > t.cfg.MaxIdlePerHost {
		list[0].nc.Close()
		list = append(list[:0], list[1:]...)
	}
	t.idle[c.key] = list
}

// CloseIdleConnections closes the idle connections; those in use close
// when their answers are done with.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, list := range t.idle {
		for _, c := range list {
			c.nc.Close()
		}
		delete(t.idle, k)
	}
}

// Close closes every idle connection and keeps no more.
func (t *Transport) Close() {
	t.CloseIdleConnections()
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

func (t *Transport) dial(ctx context.Context, u *url.URL, key string) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	addr := canonicalAddr(u)
	var (
		nc  net.Conn
		err error
	)
	if u.Scheme == "https" {
		cfg := t.cfg.TLS.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		nc, err = (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	} else {
		nc, err = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 32<<10), bw: bufio.NewWriterSize(nc, 16<<10), key: key}, nil
}

// replayable reports a request that may be sent twice: net/http's rule.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewind makes req's body readable again for a second attempt.
func rewind(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	if req.GetBody == nil {
		return false
	}
	b, err := req.GetBody()
	if err != nil {
		return false
	}
	req.Body = b
	return true
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// canonicalAddr is u's host:port, the port filled in from the scheme.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// alive reports whether an idle connection is still open: the server has
// neither closed it nor sent anything unasked. One non-blocking peek at the
// socket, the check net/http's Transport gets from its reader goroutine.
func alive(nc net.Conn) bool {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
		return true
	}); err != nil {
		return false
	}
	return open
}
