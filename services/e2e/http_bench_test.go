package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// BenchmarkHTTPProxyCommandOverhead: tools/call latency and throughput of
// an MCP server over Streamable HTTP, directly, through a plain TCP relay
// process (the least any process in the path adds), through a minimal
// net/http proxy process (the floor: the least a proxy that reads HTTP
// requests and answers with net/http adds, floorMain), and through the
// proxy command in HTTP mode (its own process, as deployed: a verified
// server, every call published to the real pipeline's NATS), in the same
// run. The
// client is the Go SDK's (sessions, 2025-11-25, SSE answers). Two servers,
// each its own process: demoserver (Go SDK) and the reference
// server-everything (node). Latency: sequential calls, each step calling
// the four paths in rotating order. Throughput: 32 callers sharing one
// session, the paths' rounds interleaved.
func BenchmarkHTTPProxyCommandOverhead(b *testing.B) {
	servers := []struct {
		name  string
		start func(b *testing.B) string // the MCP endpoint
		tool  string
		args  map[string]any
	}{
		{"server=demoserver", startDemoserver, "search_notes", map[string]any{"query": "release"}},
		{"server=everything", func(b *testing.B) string { return startEverythingHTTP(b, requirePeers(b)) },
			"echo", map[string]any{"message": "hello"}},
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			benchHTTPCommand(b, s.start(b), s.tool, s.args)
		})
	}
}

// profileEnv names a file that BenchmarkHTTPProxyCommandOverhead has the
// proxy command write a CPU profile of its run to (--cpu-profile).
const profileEnv = "MCPDRIFT_BENCH_PROXY_PROFILE"

// traceEnv names a file that BenchmarkHTTPProxyCommandOverhead has the
// proxy command write an execution trace of its run to (--trace).
const traceEnv = "MCPDRIFT_BENCH_PROXY_TRACE"

// allocsEnv names a file that BenchmarkHTTPProxyCommandOverhead has the
// proxy command write its allocation profile to (--alloc-profile).
const allocsEnv = "MCPDRIFT_BENCH_PROXY_ALLOCS"

// relayEnv names the environment variable that makes the test binary a
// TCP relay to the address it holds (relayMain).
const relayEnv = "MCPDRIFT_E2E_RELAY_TO"

// relayMain, when relayEnv is set, runs the test binary as a plain TCP
// relay: it listens on a loopback port, prints the address, and copies
// bytes both ways between each connection and a new one to the target,
// until its standard input ends. It is the least any proxy process in the
// path can add: BenchmarkHTTPProxyCommandOverhead measures it in the same
// run as the proxy.
func relayMain() {
	target := os.Getenv(relayEnv)
	if target == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startRelay runs the test binary as a TCP relay to the endpoint's host and
// returns the endpoint as reached through it, and the relay's process id.
func startRelay(b *testing.B, endpoint string) (string, int) {
	u, err := url.Parse(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	return startHelper(b, u, relayEnv+"="+u.Host, "the relay")
}

// startHelper runs the test binary with env (a relay or the floor), reads
// the address it prints and returns u at that address, and its process id;
// it ends when the benchmark does (its standard input closed).
func startHelper(b *testing.B, u *url.URL, env, name string) (string, int) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("%s did not start: %v", name, err)
	}
	at := *u
	at.Host = strings.TrimSpace(addr)
	return at.String(), cmd.Process.Pid
}

// floorEnv names the environment variable that makes the test binary a
// minimal net/http proxy to the origin it holds (floorMain).
const floorEnv = "MCPDRIFT_E2E_FLOOR_TO"

// floorProfileEnv and floorTraceEnv name files that the floor writes a
// CPU profile and an execution trace of its run to, to compare with the
// proxy's (profileEnv, traceEnv).
const (
	floorProfileEnv = "MCPDRIFT_BENCH_FLOOR_PROFILE"
	floorTraceEnv   = "MCPDRIFT_BENCH_FLOOR_TRACE"
)

// floorMain, when floorEnv is set, runs the test binary as the least a
// proxy built on net/http can be: an http.Server on a loopback port (its
// address printed) whose handler sends each request on to the origin
// floorEnv names with http.Transport.RoundTrip (the transport the proxy
// command uses, HTTP/1.1 only, the same pool sizes), and copies the answer
// back, headers and status as they came, the body through a pooled
// 32 KiB buffer (sync.Pool, io.CopyBuffer), flushed after every read of an
// event stream. It judges nothing, publishes nothing and keeps no session:
// BenchmarkHTTPProxyCommandOverhead measures it in the same run as the
// proxy, as the floor the proxy's own work sits on. It runs until its
// standard input ends.
func floorMain() {
	origin := os.Getenv(floorEnv)
	if origin == "" {
		return
	}
	floorRun(origin)
	os.Exit(0)
}

// floorRun serves as floorMain says until standard input ends, profiling
// or tracing itself when asked to.
func floorRun(origin string) {
	target, err := url.Parse(origin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var http1 http.Protocols
	http1.SetHTTP1(true)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, Protocols: &http1}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	go func() { _ = http.Serve(ln, floorHandler(tr, target)) }()
	for _, o := range []struct {
		env   string
		start func(io.Writer) error
		stop  func()
	}{{floorProfileEnv, pprof.StartCPUProfile, pprof.StopCPUProfile}, {floorTraceEnv, trace.Start, trace.Stop}} {
		if f := os.Getenv(o.env); f != "" {
			pf, err := os.Create(f)
			if err == nil {
				err = o.start(pf)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer o.stop()
		}
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// floorBufs are floorMain's copy buffers, 32 KiB each.
var floorBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// floorHop are the headers of one connection, never sent on by the floor.
var floorHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// floorHandler is floorMain's handler: each request sent on to target
// with tr, its answer copied back.
func floorHandler(tr *http.Transport, target *url.URL) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = target.Scheme, target.Host, "", ""
		if r.ContentLength == 0 {
			out.Body = nil
		}
		for _, k := range floorHop {
			out.Header.Del(k)
		}
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		h := w.Header()
		for k, vs := range resp.Header {
			h[k] = vs
		}
		for _, k := range floorHop {
			h.Del(k)
		}
		w.WriteHeader(resp.StatusCode)
		var dst io.Writer = struct{ io.Writer }{w} // not w's ReadFrom: the pooled buffer copies
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			dst = flushWriter{w, http.NewResponseController(w)}
		}
		buf := floorBufs.Get().(*[]byte)
		defer floorBufs.Put(buf)
		_, _ = io.CopyBuffer(dst, resp.Body, *buf)
	})
}

// flushWriter flushes each write to the client at once (an event stream).
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

// startFloor runs the test binary as the minimal net/http proxy to the
// endpoint's origin (floorMain) and returns the endpoint as reached
// through it, and the floor's process id.
func startFloor(b *testing.B, endpoint string) (string, int) {
	u, err := url.Parse(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	return startHelper(b, u, floorEnv+"="+u.Scheme+"://"+u.Host, "the floor")
}

// startDemoserver runs demoserver on a free loopback port and returns its
// MCP endpoint once it answers.
func startDemoserver(b *testing.B) string {
	addr := "127.0.0.1:" + freePort(b)
	cmd := exec.Command(filepath.Join(build(b), "demoserver"), "--listen", addr, "--state-file", filepath.Join(b.TempDir(), "release"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stopOnCleanup(b, cmd, "demoserver")
	poll.Eventually(b, 30*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/control/release")
		if err != nil {
			return fmt.Errorf("demoserver has not started: %w", err)
		}
		resp.Body.Close()
		return nil
	})
	return "http://" + addr + "/mcp"
}

func benchHTTPCommand(b *testing.B, upstream, tool string, args map[string]any) {
	const (
		workers = 32
		rounds  = 4
	)
	n := max(b.N, 2000)      // sequential calls per path
	total := max(b.N, 10000) // concurrent calls per path, over all rounds
	pl := startPipeline(b)
	pargs := []string{"--nats-url", pl.nc.ConnectedUrl(), "--proxy-id", "bench", "--upstream", "up=" + upstream}
	if f := os.Getenv(profileEnv); f != "" {
		pargs = append(pargs, "--cpu-profile", f) // written when the proxy stops
	}
	if f := os.Getenv(traceEnv); f != "" {
		pargs = append(pargs, "--trace", f)
	}
	if f := os.Getenv(allocsEnv); f != "" {
		pargs = append(pargs, "--alloc-profile", f)
	}
	base, proxyPID := runHTTPProxyProc(b, "bench", pargs...)
	// dials counts the connections each path's client opens: a call whose
	// caller ends its context before the answer's stream has ended (the Go
	// SDK's CallTool returns on the answer, before the end of its stream)
	// loses its connection, and the next one dials.
	var dials [numPaths]atomic.Int64
	connect := func(endpoint string, k int) *mcp.ClientSession {
		d := &net.Dialer{}
		tr := &http.Transport{MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: 2 * workers, IdleConnTimeout: time.Minute,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials[k].Add(1)
				return d.DialContext(ctx, network, addr)
			}}
		b.Cleanup(tr.CloseIdleConnections)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: tr}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			b.Fatalf("connecting to %s: %v", endpoint, err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		switch {
		case err != nil:
			return err
		case res.IsError:
			return fmt.Errorf("%s was refused or failed: %+v", tool, res.Content)
		}
		return nil
	}
	relayURL, relayPID := startRelay(b, upstream)
	floorURL, floorPID := startFloor(b, upstream)
	direct, relay, floor, via := connect(upstream, pathDirect), connect(relayURL, pathRelay), connect(floorURL, pathFloor), connect(base+"/up/mcp", pathProxy)
	// The first listing becomes the baseline; go on once the proxy serves.
	poll.Eventually(b, 30*time.Second, func() error { return call(via) })
	concurrent := func(cs *mcp.ClientSession, calls int) time.Duration {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
			once sync.Once
		)
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(calls) {
					if err := call(cs); err != nil {
						once.Do(func() { b.Error(err) })
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	paths := [numPaths]*mcp.ClientSession{pathDirect: direct, pathRelay: relay, pathFloor: floor, pathProxy: via}
	for _, cs := range paths {
		concurrent(cs, 1000) // warm up
	}
	for k := range dials {
		dials[k].Store(0)
	}
	b.ResetTimer()
	measureFloorPaths(b, n, rounds, total/rounds, [numPaths]int{pathRelay: relayPID, pathFloor: floorPID, pathProxy: proxyPID},
		func(k, _ int) error { return call(paths[k]) },
		func(k, calls int) time.Duration { return concurrent(paths[k], calls) })
	calls := float64(n + total)
	b.ReportMetric(1000*float64(dials[pathDirect].Load())/calls, "direct-dials/kcall")
	b.ReportMetric(1000*float64(dials[pathFloor].Load())/calls, "floor-dials/kcall")
	b.ReportMetric(1000*float64(dials[pathProxy].Load())/calls, "proxy-dials/kcall")
}
