// Command notify is the mcpdrift notify service: it delivers verdicts,
// quarantines, approvals, held calls and their resolutions from NATS
// JetStream to webhooks (generic JSON, Slack, CloudEvents), filtered per
// destination, signed, retried with backoff, at least once. Each
// destination has durable consumers of its own, so one that is down holds
// up no other. docs/services/notify.md is the reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/notify/internal/notifysvc"
)

func main() {
	options.Main("notify", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Getenv, os.Stderr)
	})
}

// Variables of the one destination the environment can give, used when no
// --webhook flag is.
const (
	envWebhook = "MCPDRIFT_NOTIFY_WEBHOOK"
	envName    = "MCPDRIFT_NOTIFY_NAME"
	envFormat  = "MCPDRIFT_NOTIFY_FORMAT"
	envFilter  = "MCPDRIFT_NOTIFY_FILTER"
	envSecret  = "MCPDRIFT_NOTIFY_SECRET"
)

// CodeSecretUnreadable is the code of a secret file that cannot be read.
const CodeSecretUnreadable = "secret_unreadable"

// rawDest is one destination as the command line gives it.
type rawDest struct{ url, name, format, filter string }

// settings are what run reads from flags and the environment.
type settings struct {
	options.Service
	dests      []rawDest
	secretFile string
	secret     []byte // from MCPDRIFT_NOTIFY_SECRET or --secret-file: never printed
	svc        notifysvc.Config
}

// webhookValue adds a destination per --webhook; it shows no default and
// never its value.
type webhookValue struct{ s *settings }

func (v webhookValue) String() string { return "" }
func (v webhookValue) Set(u string) error {
	v.s.dests = append(v.s.dests, rawDest{url: u})
	return nil
}

// destValue sets one attribute of the destination the last --webhook
// added.
type destValue struct {
	s    *settings
	flag string
	def  string
	set  func(d *rawDest) *string
}

func (v destValue) String() string { return v.def }
func (v destValue) Set(x string) error {
	if len(v.s.dests) == 0 {
		return fmt.Errorf("--%s applies to the --webhook before it, and none is", v.flag)
	}
	p := v.set(&v.s.dests[len(v.s.dests)-1])
	if *p != "" {
		return fmt.Errorf("--%s given twice for webhook %d", v.flag, len(v.s.dests))
	}
	*p = x
	return nil
}

func settingsOptions(s *settings) []options.Option {
	s.svc = notifysvc.DefaultConfig
	dest := func(flag, def string, set func(d *rawDest) *string) destValue {
		return destValue{s: s, flag: flag, def: def, set: set}
	}
	return append(s.Service.Options("only check that the verdict stream and the approvals bucket exist (the notify role's rights suffice)"),
		options.Opt("webhook", "", "URL", "a destination: http or https URL the events are posted to; repeat for several. Never printed (its path or user may be a credential)", webhookValue{s}),
		options.Opt("format", "", "FORMAT", "format of the preceding --webhook's requests: json, slack or cloudevents", dest("format", notifysvc.FormatJSON, func(d *rawDest) *string { return &d.format })),
		options.Opt("filter", "", "EXPR", "events the preceding --webhook gets, e.g. 'tenant=acme kind!=held_call severity>=high'; none: every event", dest("filter", "", func(d *rawDest) *string { return &d.filter })),
		options.Opt("name", "", "NAME", "name of the preceding --webhook in its consumers (notify-NAME), dead letters, logs and metrics; none: 12 hex digits of the URL's SHA-256", dest("name", "", func(d *rawDest) *string { return &d.name })),
		options.Opt("secret-file", "MCPDRIFT_NOTIFY_SECRET_FILE", "FILE", "file holding the HMAC-SHA256 key of the X-Mcpdrift-Signature header (or MCPDRIFT_NOTIFY_SECRET); none: requests are not signed", options.String(&s.secretFile)),
		options.Opt("workers", "MCPDRIFT_NOTIFY_WORKERS", "N", "requests in flight to one destination", options.Int(&s.svc.Workers)),
		options.Opt("prefetch", "MCPDRIFT_NOTIFY_PREFETCH", "N", "messages each consumer buffers ahead", options.Int(&s.svc.Prefetch)),
		options.Opt("max-deliver", "MCPDRIFT_NOTIFY_MAX_DELIVER", "N", "attempts of an event at a destination before it is dead-lettered; -1 for no limit", options.Int(&s.svc.MaxDeliver)),
		options.Opt("ack-wait", "MCPDRIFT_NOTIFY_ACK_WAIT", "DURATION", "redelivery wait of an event no instance settled (a crash)", options.Duration(&s.svc.AckWait)),
		options.Opt("max-ack-pending", "MCPDRIFT_NOTIFY_MAX_ACK_PENDING", "N", "events in flight per consumer over all instances", options.Int(&s.svc.MaxAckPending)),
		options.Opt("retry-delay", "MCPDRIFT_NOTIFY_RETRY_DELAY", "DURATION", "wait after the first failed attempt; doubles per attempt", options.Duration(&s.svc.RetryDelay)),
		options.Opt("max-retry-delay", "MCPDRIFT_NOTIFY_MAX_RETRY_DELAY", "DURATION", "longest wait between attempts", options.Duration(&s.svc.MaxRetryDelay)),
		options.Opt("timeout", "MCPDRIFT_NOTIFY_TIMEOUT", "DURATION", "bound on one request; below --ack-wait", options.Duration(&s.svc.Timeout)),
		options.Opt("drain-timeout", "MCPDRIFT_NOTIFY_DRAIN_TIMEOUT", "DURATION", "bound on finishing requests in flight at shutdown", options.Duration(&s.svc.DrainTimeout)),
	)
}

// header starts the --help text; options.Usage lists the options after it.
func header() string {
	return `notify: the mcpdrift notify service

Delivers events to webhooks: verdicts (` + bus.StreamVerdicts + `), among them quarantines
and approvals, and calls held for approval and their resolutions (the
approvals bucket ` + bus.BucketApprovals + `). Each --webhook is a destination; the
--format, --filter and --name after it apply to it. Each destination has
durable consumers of its own (notify-NAME, notify-NAME-approvals), so one that
is down holds up no other. An event is acked once the destination answered
2xx; a failed attempt is retried with a growing delay, and after
--max-deliver attempts dead-lettered on mcpdrift.dead.notify-NAME. Requests
carry Idempotency-Key (the event's id) and, with a secret, X-Mcpdrift-Signature:
sha256=HMAC-SHA256(secret, X-Mcpdrift-Timestamp + "." + body).

Filters (docs/services/notify.md#filters): clauses separated by spaces, all of
which must hold, each FIELD OP VALUE[,VALUE...]; fields tenant, server, kind
(verdict, quarantine, approval, held_call, call_resolved), status, severity;
operators = and != (any / none of the values), and >= <= > < on severity
(none < info < low < medium < high < critical).

Stops on SIGINT or SIGTERM after finishing the requests in flight. With
--ops-addr it serves /healthz, /readyz (connected to NATS, streams checked,
not stopping) and Prometheus /metrics.

Usage: notify --webhook URL [--format F] [--filter EXPR] [--name NAME] ... [flags]

Each flag can also be set by its environment variable; a flag wins. Without
--webhook, the environment gives one destination: ` + envWebhook + `,
` + envFormat + `, ` + envFilter + ` and ` + envName + `.
` + envSecret + ` holds the signing secret (no flag; or --secret-file).

`
}

// parse fills settings from defaults, then the environment, then flags.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*settings, error) {
	s := new(settings)
	if _, err := options.Parse(options.Command{Name: "notify", Header: header(), Options: settingsOptions(s)}, args, getenv, stderr); err != nil {
		return nil, err
	}
	if len(s.dests) == 0 && getenv(envWebhook) != "" {
		s.dests = []rawDest{{url: getenv(envWebhook), name: getenv(envName), format: getenv(envFormat), filter: getenv(envFilter)}}
	}
	if v := getenv(envSecret); v != "" {
		s.secret = []byte(v)
	}
	return s, nil
}

func (s *settings) validate() (zerolog.Level, error) {
	lvl, err := s.Service.Validate()
	errs := []error{err}
	for i, d := range s.dests {
		dst, err := notifysvc.ParseDestination(i+1, d.url, d.name, d.format, d.filter)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.svc.Destinations = append(s.svc.Destinations, dst)
	}
	if s.secretFile != "" {
		if len(s.secret) > 0 {
			errs = append(errs, fmt.Errorf("%s and --secret-file both set: give one", envSecret))
		} else if b, err := os.ReadFile(s.secretFile); err != nil {
			errs = append(errs, coded.Errorf(CodeSecretUnreadable, "secret file %s: %v", s.secretFile, errors.Unwrap(err)))
		} else if s.secret = []byte(strings.TrimRight(string(b), "\r\n")); len(s.secret) == 0 {
			errs = append(errs, coded.Errorf(CodeSecretUnreadable, "secret file %s is empty", s.secretFile))
		}
	}
	if len(s.svc.Destinations) == len(s.dests) { // else a destination's error says enough
		errs = append(errs, s.svc.Validate())
	}
	return lvl, options.Invalid(errors.Join(errs...))
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	s, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	lvl, err := s.validate()
	if err != nil {
		return err
	}
	log := options.Logger(stderr, lvl, notifysvc.ServiceName)
	o := ops.New(notifysvc.ServiceName, log)
	return o.RunWith(ctx, s.OpsAddr, func(ctx context.Context) error { return serve(ctx, s, log, o) })
}

// serve connects, checks the bus and delivers until ctx ends; o holds its
// readiness checks and metrics.
func serve(ctx context.Context, s *settings, log zerolog.Logger, o *ops.Server) error {
	started := o.Starting("connecting and checking streams")
	metrics := notifysvc.NewMetrics(o.Registry())
	b, err := s.Open(ctx, notifysvc.ServiceName, log, []bus.Object{bus.Verdicts, bus.Approvals})
	if err != nil {
		return err
	}
	defer b.Close(2 * time.Second) // acks and naks still buffered
	o.AddCheck("nats", ops.NATSConnected(b.NC))
	svc, err := notifysvc.New(s.svc, notifysvc.Deps{JS: b.JS, Log: log, Now: time.Now, Secret: s.secret, Metrics: metrics})
	if err != nil {
		return err
	}
	c := s.svc.WithDefaults()
	arr := zerolog.Arr()
	var routes []bus.Route
	for _, d := range c.Destinations {
		for _, rt := range c.Routes(d) {
			o.AddConsumerLag(b.JS, rt.Stream, rt.Consumer.Durable)
			routes = append(routes, rt)
		}
		arr = arr.Dict(zerolog.Dict().Str("name", d.Name).Str("host", d.Host()).Str("format", d.Format).Str("filter", d.Filter.String()))
	}
	// Ready once every destination's consumers exist: a new consumer takes
	// the events published after it was created. Once seen, the check
	// holds (the Router creates a deleted consumer again; the nats check
	// follows the connection).
	var created atomic.Bool
	o.AddCheck("consumers", func(ctx context.Context) error {
		if created.Load() {
			return nil
		}
		for _, rt := range routes {
			if _, err := b.JS.Consumer(ctx, rt.Stream, rt.Consumer.Durable); err != nil {
				return fmt.Errorf("consumer %s not created yet: %v", rt.Consumer.Durable, err)
			}
		}
		created.Store(true)
		return nil
	})
	started()
	log.Info().Str("url", b.NC.ConnectedUrlRedacted()).Array("destinations", arr).Bool("signed", len(s.secret) > 0).
		Int("max_deliver", c.MaxDeliver).Dur("timeout", c.Timeout).Msg("notify service started")
	err = svc.Run(ctx)
	st := svc.Stats()
	log.Info().Uint64("delivered", st.Delivered).Uint64("filtered", st.Filtered).Uint64("failures", st.Failures).
		Uint64("retries", st.Retries).Uint64("dead_lettered", st.DeadLettered).Msg("notify service stopped")
	return err
}
