package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

const busSetupUsage = `Usage: driftctl bus-setup [--nats-url URL] [--nats-creds FILE] [--replicas N] [--check] [--timeout DURATION]

Create or update every stream, key-value bucket and the object store of the
mcpdrift bus (docs/bus.md), print one line per object and exit: its name,
kind, replicas, and whether it was created, updated or unchanged. Running it
again changes nothing. It needs the NATS administrator's rights; the
services then run with their own roles and --bus-setup check.

With --check it changes nothing: it prints each object as exists or missing
and exits 1 when one is missing (a service role's rights suffice).

Exit status: 0 done (--check: everything exists), 1 --check found an object
missing, 2 error ("driftctl: <code>: <sentence>").

Flags:
`

const defaultNATSURL = "nats://127.0.0.1:4222"

// busObject is one stream, bucket or object store that bus.Setup makes.
type busObject struct {
	name, kind string
	stream     string // the JetStream stream that holds it
}

// busObjects lists what bus.Setup creates, in its order. Buckets and object
// stores are held in streams named KV_<bucket> and OBJ_<bucket>.
var busObjects = []busObject{
	{bus.StreamObservations, "stream", bus.StreamObservations},
	{bus.StreamFingerprints, "stream", bus.StreamFingerprints},
	{bus.StreamVerdicts, "stream", bus.StreamVerdicts},
	{bus.StreamAdmin, "stream", bus.StreamAdmin},
	{bus.BucketStatus, "kv", "KV_" + bus.BucketStatus},
	{bus.BucketBaselines, "kv", "KV_" + bus.BucketBaselines},
	{bus.BucketManifests, "object-store", "OBJ_" + bus.BucketManifests},
}

// runBusSetup implements "driftctl bus-setup"; args follow the subcommand name.
func runBusSetup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("driftctl bus-setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), busSetupUsage)
		fs.PrintDefaults()
	}
	// The URL may carry a password, so the variable is not a flag default:
	// --help would print it.
	natsURL := fs.String("nats-url", "", "NATS server `URLs`, comma-separated (MCPDRIFT_NATS_URL; default "+defaultNATSURL+")")
	creds := fs.String("nats-creds", getenv("MCPDRIFT_NATS_CREDS"), "NATS credentials `file` (.creds) of the administrator (MCPDRIFT_NATS_CREDS)")
	replicasText := fs.String("replicas", envOr(getenv, "MCPDRIFT_REPLICAS", "1"), "replicas of every stream and bucket: `N` = 1 on a single node, 3 in a cluster (MCPDRIFT_REPLICAS)")
	check := fs.Bool("check", false, "change nothing: check that everything exists, exit 1 naming what is missing")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this `duration`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("usage: unexpected argument %q", fs.Arg(0))
	}
	if *timeout <= 0 {
		return fmt.Errorf("usage: --timeout %s must be positive", *timeout)
	}
	replicas, err := strconv.Atoi(strings.TrimSpace(*replicasText))
	if err != nil || replicas < 1 || replicas > 5 {
		return fmt.Errorf("invalid_replicas: replicas %q must be a number from 1 to 5 (1 on a single node, 3 in a cluster)", *replicasText)
	}
	if *natsURL == "" {
		*natsURL = envOr(getenv, "MCPDRIFT_NATS_URL", defaultNATSURL)
	}
	if *creds != "" {
		if _, err := os.Stat(*creds); err != nil {
			return fmt.Errorf("creds_unreadable: %v", err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	denied := &permissionLog{stop: stop}
	nc, err := connectNATS(ctx, *natsURL, *creds, denied)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats_unreachable: %v", err)
	}
	b := busSetup{js: js, denied: denied, timeout: *timeout, server: nc.ConnectedUrlRedacted()}
	if *check {
		return b.check(ctx, stdout, stderr)
	}
	return b.setup(ctx, replicas, stdout)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// permissionLog keeps the last permissions violation the server reported
// and stops the work: a request the role may not make is answered by nobody,
// and this says why.
type permissionLog struct {
	mu   sync.Mutex
	err  error
	stop context.CancelCauseFunc
}

func (p *permissionLog) set(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	p.stop(err)
}

func (p *permissionLog) get() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// connectNATS connects once to one of the URLs, within ctx.
func connectNATS(ctx context.Context, url, creds string, denied *permissionLog) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("mcpdrift-driftctl-bus-setup"),
		nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				denied.set(err)
			}
		}),
	}
	if deadline, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(deadline)))
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(url, opts...)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			return r.nc, nil
		case errors.Is(r.err, nats.ErrAuthorization), errors.Is(r.err, nats.ErrAuthExpired), errors.Is(r.err, nats.ErrAuthRevoked):
			return nil, fmt.Errorf("permission_denied: NATS at %s refused the credentials: %v", bus.RedactURLs(url), r.err)
		case ctx.Err() != nil || isTimeout(r.err):
			return nil, noAnswer(url, r.err)
		default:
			return nil, fmt.Errorf("nats_unreachable: connecting to %s: %v", bus.RedactURLs(url), r.err)
		}
	case <-ctx.Done():
		go func() { // the attempt ends by its own timeout; close what it made
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, noAnswer(url, context.Cause(ctx))
	}
}

func noAnswer(url string, err error) error {
	return fmt.Errorf("nats_unreachable: no NATS server at %s answered in time (--timeout): %v", bus.RedactURLs(url), err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

type busSetup struct {
	js      jetstream.JetStream
	denied  *permissionLog
	timeout time.Duration
	server  string
}

// streamConfigs returns the configuration of each object's stream, nil for
// one that does not exist.
func (b busSetup) streamConfigs(ctx context.Context) ([]*jetstream.StreamConfig, error) {
	out := make([]*jetstream.StreamConfig, len(busObjects))
	for i, o := range busObjects {
		s, err := b.js.Stream(ctx, o.stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, b.classify(ctx, fmt.Sprintf("reading %s %s", o.kind, o.name), err)
		}
		cfg := s.CachedInfo().Config
		out[i] = &cfg
	}
	return out, nil
}

func (b busSetup) setup(ctx context.Context, replicas int, stdout io.Writer) error {
	before, err := b.streamConfigs(ctx)
	if err != nil {
		return err
	}
	if _, err := bus.Setup(ctx, b.js, bus.Config{Replicas: replicas}); err != nil {
		return b.classify(ctx, "setting up the streams and buckets", err)
	}
	after, err := b.streamConfigs(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for i, o := range busObjects {
		if after[i] == nil { // bus.Setup succeeded, so someone deleted it since
			return fmt.Errorf("setup_failed: %s %s is missing right after the setup", o.kind, o.name)
		}
		state := "unchanged"
		switch {
		case before[i] == nil:
			state = "created"
		case !reflect.DeepEqual(*before[i], *after[i]):
			state = "updated"
		}
		fmt.Fprintf(tw, "%s\t%s\treplicas %d\t%s\n", o.name, o.kind, after[i].Replicas, state)
	}
	return tw.Flush()
}

func (b busSetup) check(ctx context.Context, stdout, stderr io.Writer) error {
	// bus.CheckStreams checks the streams as the services do; the
	// per-object lookup below names every missing one and the replicas.
	var names []string
	for _, o := range busObjects {
		names = append(names, o.stream)
	}
	checkErr := bus.CheckStreams(ctx, b.js, names...)
	if checkErr != nil && !errors.Is(checkErr, jetstream.ErrStreamNotFound) {
		return b.classify(ctx, "checking the streams and buckets", checkErr)
	}
	cfgs, err := b.streamConfigs(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	var missing []string
	for i, o := range busObjects {
		if cfgs[i] == nil {
			missing = append(missing, o.kind+" "+o.name)
			fmt.Fprintf(tw, "%s\t%s\treplicas -\tmissing\n", o.name, o.kind)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\treplicas %d\texists\n", o.name, o.kind, cfgs[i].Replicas)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "driftctl: bus_incomplete: missing %s (run driftctl bus-setup with the NATS administrator's rights)\n",
			strings.Join(missing, ", "))
		return exitError{1}
	}
	return nil
}

// JetStream API error codes of nats-server that nats.go does not name.
const (
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074 // replicas > 1 on a server that is not clustered
	errCodeInsufficientResources jetstream.ErrorCode = 10023 // e.g. more replicas than nodes
)

// classify turns an error of a JetStream request into "code: sentence".
func (b busSetup) classify(ctx context.Context, doing string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case b.denied.get() != nil:
		return fmt.Errorf("permission_denied: %s: the server refused a request (%v); bus-setup needs the NATS administrator's rights", doing, b.denied.get())
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("jetstream_unavailable: %s: JetStream is not enabled on %s for this account", doing, b.server)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported:
		return fmt.Errorf("replicas_unavailable: %s: the server supports no more than 1 replica (it is not clustered): %v; use --replicas 1 on a single node", doing, err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientResources:
		return fmt.Errorf("replicas_unavailable: %s: the cluster cannot place the replicas: %v; --replicas must not exceed the number of nodes", doing, err)
	case errors.As(err, &apiErr):
		return fmt.Errorf("setup_refused: %s: %v", doing, err)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("timeout: %s: no answer from %s within %s (--timeout); is JetStream available and does this user have the administrator's rights?", doing, b.server, b.timeout)
	}
	return fmt.Errorf("nats_error: %s: %v", doing, err)
}
