// Package stdio is the proxy's stdio transport: the agent talks to the proxy
// on its stdin and stdout, and the proxy runs the upstream MCP server as a
// child process and talks to it on the child's stdin and stdout. Messages are
// newline-delimited JSON of any length up to a bound; each passes through a
// session.Session. The child's stderr is passed through, signals are passed
// on, end of input closes the child's input, and the child is always reaped.
package stdio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/ordered"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Handler sees every message; a session bound to the pipes (Bind)
// implements it.
type Handler interface {
	FromClient(ctx context.Context, raw []byte) error
	FromServer(ctx context.Context, raw []byte) error
	// Oversized is told of a server message dropped for its size, which
	// the handler never saw and so must not trust what it may have said;
	// head is its start (at most maxHead bytes), whose id it may answer.
	Oversized(ctx context.Context, head []byte) error
}

// Bound is a session bound to a proxy's pipes: the Handler that stdio
// serves. What the session returns for the client goes to the agent, what
// it forwards to the server; the server's messages are delivered in the
// order the server sent them, the decisions that must wait made off the
// reader (package ordered), so that the server's next messages, the
// proxy's own listing among them, are read meanwhile.
type Bound struct {
	s     *session.Session
	pipes *Pipes
	q     *ordered.Queue[session.Decision]

	mu    lockorder.Mutex[lockorder.BoundMu]
	first error // the first error FromServer returned: it stops the server's pump, which drops it

	// Calls held for an admin's approval wait off the reader, each in a
	// goroutine of its own, until Wait ends them.
	held      sync.WaitGroup
	heldCtx   context.Context
	stopHeld  context.CancelFunc
	heldFirst error // the first write a held call failed at, under mu
}

// Bind binds s to pipes. The session's own messages to the server must go
// to pipes.ToServer too (session.New).
func Bind(s *session.Session, pipes *Pipes) *Bound {
	ctx, stop := context.WithCancel(context.Background())
	pipes.own.mu.Lock()
	pipes.own.drained = s.Drained
	pipes.own.mu.Unlock()
	return &Bound{s: s, pipes: pipes, q: ordered.New[session.Decision](pipes.ToClient), heldCtx: ctx, stopHeld: stop}
}

// FromClient passes one message of the agent's through the session: the
// proxy's answers go to the agent, the rest to the server; once the agent
// has opened the session, the proxy lists the server's whole surface.
func (b *Bound) FromClient(ctx context.Context, raw []byte) error {
	// The one parse of the client's message: the session and the headers'
	// checks read it, never the bytes again.
	msgs, batch, err := jsonrpc.SplitIn(new(canonjson.Doc), raw, jsonrpc.Limits{})
	if err != nil {
		// Not the proxy's to judge beyond refusing to pass on what it
		// cannot read: answered as every transport answers it.
		return b.pipes.ToClient(session.Unreadable(err))
	}
	d := b.s.Client(ctx, raw, msgs, batch)
	if d.Waits() {
		// Held for approval: the agent's next messages, and the server's,
		// are read meanwhile; the call is forwarded or answered later.
		b.held.Add(1)
		go func() {
			defer b.held.Done()
			if err := b.deliver(d.Wait(b.heldCtx)); err != nil {
				b.mu.Lock()
				if b.heldFirst == nil {
					b.heldFirst = err
				}
				b.mu.Unlock()
			}
		}()
		return nil
	}
	return b.deliver(d)
}

// deliver sends what the session decided on a message of the agent's.
func (b *Bound) deliver(d session.Decision) error {
	if d.ToClient != nil {
		if err := b.pipes.ToClient(d.ToClient); err != nil {
			return err
		}
	}
	if d.ToServer != nil {
		if err := b.pipes.forward(d.ToServer); err != nil {
			return err
		}
	}
	if d.Opened {
		return b.s.ListAll()
	}
	return nil
}

// FromServer passes one message of the server's through the session, in
// order; it returns at once when the decision must wait.
func (b *Bound) FromServer(ctx context.Context, raw []byte) error {
	return b.push(ctx, b.s.Server(ctx, raw))
}

// push queues d for the agent, in order, and keeps the first error a push
// met.
func (b *Bound) push(ctx context.Context, d session.Decision) error {
	err := b.q.Push(ctx, d, nil)
	if err != nil {
		b.mu.Lock()
		if b.first == nil {
			b.first = err
		}
		b.mu.Unlock()
	}
	return err
}

// Oversized tells the session of a server message dropped for its size;
// the error the session gives a request it answered goes to the agent in
// the message's place, in order.
func (b *Bound) Oversized(ctx context.Context, head []byte) error {
	out := b.s.Oversized(head)
	if out == nil {
		return nil
	}
	return b.push(ctx, session.Decision{ToClient: out})
}

// Wait waits for the decisions made off the reader and returns the first
// error the server's messages met (a write to the agent or to the server
// that failed, on the reader or off it), nil when none did; call it once
// Serve has returned.
func (b *Bound) Wait() error {
	b.stopHeld() // the agent is gone: calls still held are not forwarded
	b.held.Wait()
	err := b.q.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.first != nil {
		return b.first
	}
	if err == nil {
		err = b.heldFirst
	}
	return err
}

// Config says what to run.
type Config struct {
	Command  string
	Args     []string
	Env      []string      // nil: the proxy's environment
	MaxLine  int           // longest message accepted, in bytes (default 64 MiB)
	StopWait time.Duration // after end of input, how long the child gets before SIGTERM, then SIGKILL (default 5s)
}

// Pipes are the two writers a Handler writes to: ToClient and ToServer each
// write one message as one line.
type Pipes struct {
	client *lineWriter
	server *lineWriter
	own    *ownQueue
}

// ToClient writes one message to the agent.
func (p *Pipes) ToClient(b []byte) error { return p.client.write(b) }

// ToServer sends one message of the proxy's own to the upstream server (the
// session's toServer): it is queued and written by a goroutine of its own,
// never on the caller's, which may be the one reading the server, so that
// a server that does not read its input until its output is read cannot
// hold both pipes full. What the queue cannot take (maxOwnBacklog) is
// refused with session.ErrServerBacklog; a write that failed is returned
// by every later call.
func (p *Pipes) ToServer(b []byte) error { return p.own.send(b) }

// forward writes one message of the agent's to the upstream server, on the
// agent's reader: a server that does not read holds the agent back, never
// the reading of the server.
func (p *Pipes) forward(b []byte) error { return p.server.write(b) }

// maxOwnBacklog bounds the proxy's own messages queued for the server: a
// re-listing takes at most one place per kind of listing (the session
// coalesces them), the rest is answers to the server's requests in the
// agent's stead.
const maxOwnBacklog = 64

// ownQueue writes the proxy's own messages to the server, in order, off
// the caller's goroutine.
type ownQueue struct {
	write   func([]byte) error
	drained func() // told when the queue drained after it refused a message (session.Session.Drained)

	mu      lockorder.Mutex[lockorder.OwnQueueMu]
	queue   [][]byte
	running bool  // a writer goroutine runs
	refused bool  // a message was refused since the queue last drained
	err     error // the first write that failed: nothing more is written
}

// send queues b; it never waits.
func (q *ownQueue) send(b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.err != nil:
		return q.err
	case len(q.queue) >= maxOwnBacklog:
		q.refused = true
		return session.ErrServerBacklog
	}
	q.queue = append(q.queue, bytes.Clone(b))
	if !q.running {
		q.running = true
		go q.drain()
	}
	return nil
}

// drain writes what is queued until the queue is empty, then ends.
func (q *ownQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.queue) == 0 || q.err != nil {
			q.running = false
			refused, drained := q.refused && q.err == nil, q.drained
			q.refused = false
			q.mu.Unlock()
			if refused && drained != nil {
				drained()
			}
			return
		}
		b := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		q.mu.Unlock()
		if err := q.write(b); err != nil {
			q.mu.Lock()
			q.err, q.queue = err, nil
			q.mu.Unlock()
		}
	}
}

// lineWriter writes each message as one line, in one write.
type lineWriter struct {
	mu  lockorder.Mutex[lockorder.LineWriterMu]
	w   io.Writer
	buf []byte
}

func newLineWriter(w io.Writer) *lineWriter { return &lineWriter{w: w} }

func (l *lineWriter) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = l.buf[:0]
	if bytes.IndexByte(b, '\n') >= 0 {
		// A raw newline inside a JSON text is only ever whitespace: drop
		// it so the line stays one message.
		for _, c := range b {
			if c != '\n' {
				l.buf = append(l.buf, c)
			}
		}
	} else {
		l.buf = append(l.buf, b...)
	}
	l.buf = append(l.buf, '\n')
	_, err := l.w.Write(l.buf)
	if f, ok := l.w.(interface{ Flush() error }); ok && err == nil {
		err = f.Flush()
	}
	if cap(l.buf) > 1<<20 {
		l.buf = nil // a rare long message: let its buffer go
	}
	return err
}

func newPipes(client, server io.Writer) *Pipes {
	p := &Pipes{client: newLineWriter(client), server: newLineWriter(server)}
	p.own = &ownQueue{write: p.server.write}
	return p
}

// Proxy is a running upstream child with its pipes: Start launches it,
// Serve runs the message pumps.
type Proxy struct {
	cfg    Config
	stderr io.Writer
	cmd    *exec.Cmd
	pipes  *Pipes
	stdout io.ReadCloser
	stdin  io.WriteCloser
	exited chan struct{} // closed once the child has exited and was reaped
}

// Start launches the upstream command. Its stderr goes to stderr.
func Start(cfg Config, client io.Writer, stderr io.Writer) (*Proxy, error) {
	if cfg.Command == "" {
		return nil, errors.New("stdio: no upstream command")
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 64 << 20
	}
	if cfg.StopWait <= 0 {
		cfg.StopWait = 5 * time.Second
	}
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // signals reach the server's own children
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting upstream %q: %w", cfg.Command, err)
	}
	return &Proxy{cfg: cfg, cmd: cmd, stdout: out, stdin: in, stderr: stderr,
		pipes: newPipes(client, in), exited: make(chan struct{})}, nil
}

// Running reports whether the upstream child has not exited yet.
func (p *Proxy) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Pipes returns the writers for the handler.
func (p *Proxy) Pipes() *Pipes { return p.pipes }

// Serve pumps messages until the client's input ends or the child exits,
// then stops the child and returns its exit code. Signals received on sig
// are passed on to the child.
func (p *Proxy) Serve(ctx context.Context, h Handler, client io.Reader, sig <-chan os.Signal) (int, error) {
	serverDone := make(chan error, 1)
	go func() {
		serverDone <- p.pump(ctx, p.stdout, h.FromServer, func(head []byte) error {
			// The server sent a message too long to pass: it is dropped, and
			// the client's request it answered, when its start names it, gets
			// an error rather than half the answer.
			fmt.Fprintf(p.stderrOrDiscard(), "mcpdrift proxy: dropped a message from the server longer than %d bytes\n", p.cfg.MaxLine)
			return h.Oversized(ctx, head)
		})
	}()
	clientDone := make(chan error, 1)
	go func() {
		clientDone <- p.pump(ctx, client, h.FromClient, func([]byte) error {
			_ = p.pipes.ToClient(session.TooLarge(p.cfg.MaxLine))
			return nil
		})
	}()
	exited := p.exited
	var waitErr error
	go func() {
		<-serverDone // the child closed its stdout: it is exiting
		waitErr = p.cmd.Wait()
		close(exited)
	}()
	var pumpErr error
	for {
		select {
		case s := <-sig:
			_ = syscall.Kill(-p.cmd.Process.Pid, s.(syscall.Signal))
			continue
		case err := <-clientDone:
			// End of input: close the child's input and give it time to go.
			pumpErr = err
			_ = p.stdin.Close()
			p.stop(exited, sig)
		case <-exited:
		case <-ctx.Done():
			_ = p.stdin.Close()
			p.stop(exited, sig)
		}
		break
	}
	<-exited
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(waitErr, &ee):
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	case waitErr != nil:
		return 1, waitErr
	}
	return code, pumpErr
}

func (p *Proxy) stderrOrDiscard() io.Writer {
	if p.stderr == nil {
		return io.Discard
	}
	return p.stderr
}

// stop waits for the child to exit after its input closed, then terminates
// it. Signals keep being passed on meanwhile: an MCP client closes the
// server's input, waits a little and then sends SIGTERM, and that SIGTERM
// must reach the server before the client's SIGKILL ends the proxy and
// leaves the server behind.
func (p *Proxy) stop(exited <-chan struct{}, sig <-chan os.Signal) {
	grace := time.NewTimer(p.cfg.StopWait)
	defer grace.Stop()
	terminated := false
	for {
		select {
		case <-exited:
			return
		case s := <-sig:
			_ = syscall.Kill(-p.cmd.Process.Pid, s.(syscall.Signal))
		case <-grace.C:
			if terminated {
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				return
			}
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
			terminated = true
			grace.Reset(p.cfg.StopWait)
		}
	}
}

// maxHead bounds the start of a line over MaxLine that oversize is told.
const maxHead = 64 << 10

// pump reads lines from r and hands each to fn. A line longer than MaxLine
// is dropped with its remainder, oversize is told its start, and the pump
// goes on (unless oversize fails, as fn may).
func (p *Proxy) pump(ctx context.Context, r io.Reader, fn func(context.Context, []byte) error, oversize func(head []byte) error) error {
	tooLong := func(line, chunk []byte) error {
		head := line
		if len(head) == 0 {
			head = chunk
		}
		return oversize(bytes.Clone(head[:min(len(head), maxHead)]))
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line)+len(chunk) <= p.cfg.MaxLine {
				line = append(line, chunk...)
			} else {
				oerr := tooLong(line, chunk)
				line = line[:0]
				if oerr != nil {
					return oerr
				}
				if skipErr := skipLine(br); skipErr != nil {
					return nil
				}
			}
			continue
		case err != nil && len(chunk) == 0 && len(line) == 0:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(line)+len(chunk) > p.cfg.MaxLine {
			oerr := tooLong(line, chunk)
			line = line[:0]
			if oerr != nil {
				return oerr
			}
			if err != nil {
				return nil
			}
			continue
		}
		line = append(line, chunk...)
		msg := bytes.TrimSpace(line)
		if len(msg) > 0 {
			if herr := fn(ctx, bytes.Clone(msg)); herr != nil {
				return herr
			}
		}
		line = line[:0]
		if err != nil {
			return nil // the last line had no newline: end of input
		}
	}
}

func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return err
	}
}
