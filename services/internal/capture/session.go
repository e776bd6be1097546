package capture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// shutdownGrace is how long a server gets to exit after its stdin is closed
// before SIGTERM, and again after SIGTERM before SIGKILL.
const shutdownGrace = 2 * time.Second

// session is one running server and the JSON-RPC conversation with it.
// Only the goroutine that calls call, send and stop uses it, apart from
// readLoop, which owns stdout until it closes lines.
type session struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stopProc context.CancelFunc // SIGTERM now, SIGKILL after WaitDelay
	maxLine  int

	lines    chan []byte   // stdout lines; closed when stdout ends
	readErr  error         // why lines was closed; read only after that
	quit     chan struct{} // closed by stop to release readLoop
	readDone chan struct{}

	nextID       int64
	skipped      int    // stdout lines that were not JSON-RPC messages
	firstSkipped []byte // the first of them, for the error message

	stopOnce sync.Once
	waitErr  error
}

func start(ctx context.Context, cfg Config, stderr io.Writer) (*session, error) {
	procCtx, stopProc := context.WithCancel(ctx)
	cmd := exec.CommandContext(procCtx, cfg.Command, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.Cancel = func() error { return terminate(cmd.Process) }
	cmd.WaitDelay = shutdownGrace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		stopProc()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stopProc()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		stopProc()
		return nil, err
	}
	s := &session{
		cmd:      cmd,
		stdin:    stdin,
		stopProc: stopProc,
		maxLine:  cfg.MaxLineBytes,
		lines:    make(chan []byte),
		quit:     make(chan struct{}),
		readDone: make(chan struct{}),
	}
	go s.readLoop(stdout)
	return s, nil
}

// terminate asks the process to stop, or kills it where signals other than
// kill are not supported.
func terminate(p *os.Process) error {
	err := p.Signal(syscall.SIGTERM)
	if err == nil || errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return p.Kill()
}

func (s *session) readLoop(stdout io.Reader) {
	defer close(s.readDone)
	defer close(s.lines)
	r := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := readLine(r, s.maxLine)
		if err != nil {
			s.readErr = err
			return
		}
		select {
		case s.lines <- line:
		case <-s.quit:
			return
		}
	}
}

// stop closes the server's stdin and waits for it to exit, terminating it
// if it does not, then waits for readLoop. It returns the exit status and
// is safe to call more than once.
func (s *session) stop() error {
	s.stopOnce.Do(func() {
		s.stdin.Close()
		exited := make(chan error, 1)
		go func() { exited <- s.cmd.Wait() }()
		grace := time.NewTimer(shutdownGrace)
		select {
		case s.waitErr = <-exited:
		case <-grace.C:
			s.stopProc()
			s.waitErr = <-exited
		}
		grace.Stop()
		s.stopProc()
		close(s.quit)
		<-s.readDone // Wait has closed stdout, so readLoop ends
	})
	return s.waitErr
}

// call sends a request and returns the raw result of the matching
// response, answering server requests and skipping notifications meanwhile.
func (s *session) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	s.nextID++
	id := s.nextID
	if err := s.send(request{JSONRPC: "2.0", ID: id, Method: method, Params: params}); err != nil {
		return nil, err
	}
	for {
		m, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case m.isRequest():
			if err := s.answer(m); err != nil {
				return nil, err
			}
		case !m.isResponse():
			// A notification: logging, progress, list_changed. Ignored.
		case m.hasID(id):
			switch {
			case m.result != nil && m.err == nil:
				return m.result, nil
			case m.err != nil && m.result == nil:
				return nil, rpcError(m.err)
			default:
				return nil, errors.New("response has both or neither of result and error")
			}
		case isNull(m.id) && m.err != nil:
			// The server could not read a request well enough to know its
			// id (JSON-RPC parse or invalid request error); ours is lost.
			return nil, fmt.Errorf("server answered with null id: %w", rpcError(m.err))
		default:
			// A response to an id that is not pending. Ignored.
		}
	}
}

// next returns the next JSON-RPC message on the server's stdout, skipping
// lines that are not one.
func (s *session) next(ctx context.Context) (message, error) {
	for {
		select {
		case <-ctx.Done():
			err := context.Cause(ctx)
			if s.skipped > 0 {
				err = fmt.Errorf("%w; %d stdout line(s) were not JSON-RPC messages, the first: %s",
					err, s.skipped, quoteShort(s.firstSkipped))
			}
			return message{}, err
		case line, ok := <-s.lines:
			if !ok {
				return message{}, s.stdoutEnded()
			}
			m, err := parseMessage(line)
			if err != nil {
				if len(bytes.TrimSpace(line)) > 0 {
					if s.skipped == 0 {
						s.firstSkipped = line
					}
					s.skipped++
				}
				continue
			}
			return m, nil
		}
	}
}

// stdoutEnded explains why the server's stdout ended.
func (s *session) stdoutEnded() error {
	switch {
	case errors.Is(s.readErr, errLineTooLong):
		return fmt.Errorf("server sent a stdout line longer than %d bytes", s.maxLine)
	case errors.Is(s.readErr, io.EOF):
		return fmt.Errorf("server closed stdout before answering (%s)", exitStatus(s.stop()))
	default:
		return fmt.Errorf("reading server stdout: %w", s.readErr)
	}
}

func exitStatus(waitErr error) string {
	if waitErr == nil {
		return "exit status 0"
	}
	return waitErr.Error()
}

// answer replies to a server-to-client request. The capture client offers
// no client features (sampling, roots, elicitation), so every method but
// ping is refused; ping must be answered for the server to keep talking.
func (s *session) answer(m message) error {
	var method string
	_ = json.Unmarshal(m.method, &method) // parseMessage checked it is a string
	reply := []byte(`{"jsonrpc":"2.0","id":`)
	reply = append(reply, m.id...)
	if method == "ping" {
		reply = append(reply, `,"result":{}}`...)
	} else {
		reply = append(reply, `,"error":{"code":-32601,"message":"method not supported by capture client"}}`...)
	}
	if err := s.write(append(reply, '\n')); err != nil {
		return fmt.Errorf("answering server request %q: %w", method, err)
	}
	return nil
}

// send writes one message as a line.
func (s *session) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding request: %w", err)
	}
	if err := s.write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing request: %w", err)
	}
	return nil
}

// write writes to the server's stdin. A write that fails because the server
// is gone reports its exit status too.
func (s *session) write(b []byte) error {
	if _, err := s.stdin.Write(b); err != nil {
		return fmt.Errorf("%w (server %s)", err, exitStatus(s.stop()))
	}
	return nil
}
