package options

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses of every command (docs/operations.md#exit-status).
const (
	ExitOK      = 0 // done, or --help
	ExitFailure = 1 // failed while running: NATS unreachable, a bus object missing, a listener refused
	ExitUsage   = 2 // a bad flag, argument or variable, or settings that do not validate
)

// ExitStatus is an error that is only an exit status, with nothing to
// print: the proxy's upstream server's status, driftctl's "found a change".
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Status is the exit status of a command's error: 0 for none or ErrHelp,
// an ExitStatus's own, 2 for ErrUsage and ErrConfig, and 1 for the rest.
func Status(err error) int {
	var es ExitStatus
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return ExitOK
	case errors.As(err, &es):
		return int(es)
	case errors.Is(err, ErrUsage), errors.Is(err, ErrConfig):
		return ExitUsage
	}
	return ExitFailure
}

// Report writes err as "name: err" on w, unless it says nothing (none,
// ErrHelp, an ExitStatus), and returns its exit status.
func Report(w io.Writer, name string, err error) int {
	code := Status(err)
	var es ExitStatus
	if err != nil && !errors.Is(err, ErrHelp) && !errors.As(err, &es) {
		fmt.Fprintf(w, "%s: %v\n", name, err)
	}
	return code
}

// Main runs a command: run gets a context that ends on SIGINT or SIGTERM
// and the command's arguments; its error is reported (Report) and is the
// exit status. A command stopped by a signal while it was starting exits 0.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	stop()
	Exit(name, err)
}

// Exit reports err (Report) on stderr and exits with its status.
func Exit(name string, err error) {
	os.Exit(Report(os.Stderr, name, err)) // the only exit
}
