package main

import (
	"context"
	"errors"
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
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

const busSetupUsage = `driftctl bus-setup: set up the streams and buckets of the mcpdrift bus

Usage: driftctl bus-setup [--nats-url URL] [--nats-creds FILE] [--replicas N] [--partitions N] [--check] [--timeout DURATION]
       driftctl bus-setup --site --tenant T [--hub-domain D] [--nats-url URL] [--replicas N] [--check]

Create or update every stream, key-value bucket and the object store of the
mcpdrift bus (docs/bus.md), print one line per object and exit: its name,
kind, replicas, and whether it was created, updated or unchanged. Running it
again changes nothing. --partitions splits the observation and fingerprint
streams by (tenant, server) (docs/deployment.md, Partitions); without it
their partitions stay as they are. It needs the NATS administrator's rights; the
services then run with their own roles and --bus-setup check.

With --check it changes nothing: it prints each object as exists or missing
and exits 1 when one is missing (a service role's rights suffice).

With --site it sets up a site's NATS leaf node instead (deploy/nats/leaf,
connected to the leaf as the site's admin): the key-value buckets a proxy
reads (status, policy, approvals), each a mirror of the hub's bucket of the
same name filtered to the tenant's keys, fetched through the hub's
JetStream domain. NATS keeps them current over the leaf connection and
catches up after a cut. A bucket that exists with another mirror is an
error (site_mirror_mismatch): delete it and run again.

Exit status: 0 done (--check: everything exists), 1 --check found an object
missing, 2 error ("driftctl: <code>: <sentence>").

Each flag with a variable can also be set by it; a flag wins.

`

// runBusSetup implements "driftctl bus-setup"; args follow the subcommand name.
func runBusSetup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var natsURL, creds string
	replicasText, check, timeout := "1", false, 30*time.Second
	var site bool
	tenant, hubDomain := "", bus.HubDomain
	var partitions int
	_, err := options.Parse(options.Command{Name: "driftctl bus-setup", Header: busSetupUsage, Options: []options.Option{
		options.NATSURL(&natsURL),
		options.NATSCreds(&creds, "of the administrator"),
		// Text: a bad value is invalid_replicas, as are 0 and 9.
		options.Opt("replicas", "MCPDRIFT_REPLICAS", "N", "replicas of every stream and bucket: 1 on a single node, 3 in a cluster (1 to 5)", options.String(&replicasText)),
		options.Partitions(&partitions),
		options.Opt("check", "", "", "change nothing: check that everything exists, exit 1 naming what is missing", options.Bool(&check)),
		options.Opt("timeout", "", "DURATION", "give up after this duration, connecting included", options.Duration(&timeout)),
		options.Opt("site", "", "", "set up a site's leaf node: mirrors of the hub's status, baseline versions, policy and approvals for --tenant", options.Bool(&site)),
		options.Opt("tenant", "", "ID", "with --site: the tenant whose keys the site mirrors", options.String(&tenant)),
		options.Opt("hub-domain", "", "DOMAIN", "with --site: the hub's JetStream domain, as its nodes name it (deploy/nats/cluster)", options.String(&hubDomain)),
	}}, args, getenv, stderr)
	if err != nil {
		return err
	}
	if partitions < 0 || partitions > bus.MaxPartitions {
		return options.Usagef("--partitions %d: want 1 to %d, or 0 for as the streams are", partitions, bus.MaxPartitions)
	}
	if timeout <= 0 {
		return options.Usagef("--timeout %s must be positive", timeout)
	}
	replicas, err := strconv.Atoi(strings.TrimSpace(replicasText))
	if err != nil || replicas < 1 || replicas > 5 {
		return coded.Errorf("invalid_replicas", "replicas %q must be a number from 1 to 5 (1 on a single node, 3 in a cluster)", replicasText)
	}
	var siteCfg bus.SiteConfig
	if site {
		siteCfg = bus.SiteConfig{Tenant: tenant, HubDomain: hubDomain, Replicas: replicas}
		if err := siteCfg.Validate(); err != nil {
			return options.Usagef("--site: %v", err)
		}
	} else if tenant != "" || hubDomain != bus.HubDomain {
		return options.Usagef("--tenant and --hub-domain set up a site: add --site")
	}
	if creds != "" {
		if _, err := os.Stat(creds); err != nil {
			return coded.Errorf("creds_unreadable", "%v", err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	denied := &permissionLog{stop: stop}
	nc, err := bus.Connect(ctx, bus.Conn{URL: natsURL, Creds: creds, Name: "mcpdrift-driftctl-bus-setup", Once: true,
		OnAsyncError: func(err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				denied.set(err)
			}
		}}, options.Logger(stderr, zerolog.InfoLevel, "driftctl"))
	switch {
	case errors.Is(err, bus.ErrNATSAuth):
		return coded.Errorf("permission_denied", "%v", err)
	case err != nil && (ctx.Err() != nil || isTimeout(err)):
		return coded.Errorf("nats_unreachable", "no NATS server answered in time (--timeout): %v", err)
	case err != nil:
		return coded.Errorf("nats_unreachable", "%v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return coded.Errorf("nats_unreachable", "%v", err)
	}
	b := busSetup{js: js, denied: denied, timeout: timeout, server: nc.ConnectedUrlRedacted()}
	if site {
		return b.site(ctx, siteCfg, check, stdout, stderr)
	}
	if check {
		return b.check(ctx, stdout, stderr)
	}
	return b.setup(ctx, replicas, partitions, stdout)
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

// survey returns the configuration of each object's stream, nil for one
// that does not exist.
func (b busSetup) survey(ctx context.Context) ([]*jetstream.StreamConfig, error) {
	cfgs, err := bus.Survey(ctx, b.js, bus.Objects())
	if err != nil {
		return nil, b.classify(ctx, "reading the streams and buckets", err)
	}
	return cfgs, nil
}

func (b busSetup) setup(ctx context.Context, replicas, partitions int, stdout io.Writer) error {
	before, err := b.survey(ctx)
	if err != nil {
		return err
	}
	if _, err := bus.Setup(ctx, b.js, bus.Config{Replicas: replicas, Partitions: partitions}); err != nil {
		return b.classify(ctx, "setting up the streams and buckets", err)
	}
	after, err := b.survey(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for i, o := range bus.Objects() {
		if after[i] == nil { // bus.Setup succeeded, so someone deleted it since
			return coded.Errorf("setup_failed", "%s %s is missing right after the setup", o.Kind, o.Name)
		}
		state := "unchanged"
		switch {
		case before[i] == nil:
			state = "created"
		case !reflect.DeepEqual(*before[i], *after[i]):
			state = "updated"
		}
		fmt.Fprintf(tw, "%s\t%s\treplicas %d\t%s%s\n", o.Name, o.Kind, after[i].Replicas, state, partitionNote(*after[i]))
	}
	return tw.Flush()
}

func (b busSetup) check(ctx context.Context, stdout, stderr io.Writer) error {
	cfgs, err := b.survey(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	var missing []string
	for i, o := range bus.Objects() {
		if cfgs[i] == nil {
			missing = append(missing, o.String())
			fmt.Fprintf(tw, "%s\t%s\treplicas -\tmissing\n", o.Name, o.Kind)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\treplicas %d\texists\n", o.Name, o.Kind, cfgs[i].Replicas)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "driftctl: bus_incomplete: missing %s (run driftctl bus-setup with the NATS administrator's rights)\n",
			strings.Join(missing, ", "))
		return options.ExitStatus(1) // a finding
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
		return coded.Errorf("permission_denied", "%s: the server refused a request (%v); bus-setup needs the NATS administrator's rights", doing, b.denied.get())
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, nats.ErrNoResponders):
		return coded.Errorf("jetstream_unavailable", "%s: JetStream is not enabled on %s for this account", doing, b.server)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported:
		return coded.Errorf("replicas_unavailable", "%s: the server supports no more than 1 replica (it is not clustered): %v; use --replicas 1 on a single node", doing, err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientResources:
		return coded.Errorf("replicas_unavailable", "%s: the cluster cannot place the replicas: %v; --replicas must not exceed the number of nodes", doing, err)
	case errors.As(err, &apiErr):
		return coded.Errorf("setup_refused", "%s: %v", doing, err)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return coded.Errorf("timeout", "%s: no answer from %s within %s (--timeout); is JetStream available and does this user have the administrator's rights?", doing, b.server, b.timeout)
	}
	return coded.Errorf("nats_error", "%s: %v", doing, err)
}

// site sets up (or with check, checks) the mirrors of a site's leaf node.
func (b busSetup) site(ctx context.Context, cfg bus.SiteConfig, check bool, stdout, stderr io.Writer) error {
	objs := bus.SiteObjects()
	before, err := bus.Survey(ctx, b.js, objs)
	if err != nil {
		return b.classify(ctx, "reading the site's buckets", err)
	}
	if !check {
		if _, err := bus.SetupSite(ctx, b.js, cfg); err != nil {
			if coded.CodeOf(err) == bus.CodeSiteMirrorMismatch {
				return err
			}
			return b.classify(ctx, "setting up the site's mirrors", err)
		}
	}
	after, err := bus.Survey(ctx, b.js, objs)
	if err != nil {
		return b.classify(ctx, "reading the site's buckets", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	var missing []string
	for i, o := range objs {
		switch {
		case after[i] == nil || after[i].Mirror == nil:
			missing = append(missing, o.String())
			fmt.Fprintf(tw, "%s\t%s\tmirror -\tmissing\n", o.Name, o.Kind)
			continue
		case check:
			fmt.Fprintf(tw, "%s\t%s\tmirror of %s %s\texists\n", o.Name, o.Kind, after[i].Mirror.Name, after[i].Mirror.FilterSubject)
			continue
		}
		state := "unchanged"
		switch {
		case before[i] == nil:
			state = "created"
		case !reflect.DeepEqual(*before[i], *after[i]):
			state = "updated"
		}
		fmt.Fprintf(tw, "%s\t%s\tmirror of %s %s\t%s\n", o.Name, o.Kind, after[i].Mirror.Name, after[i].Mirror.FilterSubject, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(missing) > 0 {
		if !check {
			return coded.Errorf("setup_failed", "%s missing right after the setup", strings.Join(missing, ", "))
		}
		fmt.Fprintf(stderr, "driftctl: bus_incomplete: missing mirror %s (run driftctl bus-setup --site with the site admin's rights)\n",
			strings.Join(missing, ", "))
		return options.ExitStatus(1)
	}
	return nil
}

// partitionNote says how many partitions a partitioned stream has.
func partitionNote(cfg jetstream.StreamConfig) string {
	if p := bus.PartitionsOf(cfg); p > 1 {
		return fmt.Sprintf("\tpartitions %d", p)
	}
	return ""
}
