package options

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// DefaultNATSURL is the --nats-url of every command.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// DefaultLogLevel is the --log-level of every command.
const DefaultLogLevel = "info"

// NATSURL and NATSCreds are the options of every command that connects to
// NATS; credsUsage says whose credentials.
func NATSURL(p *string) Option {
	*p = DefaultNATSURL
	return Opt("nats-url", "MCPDRIFT_NATS_URL", "URL", "NATS server URLs, comma-separated; passwords in them are never printed", String(p))
}

func NATSCreds(p *string, credsUsage string) Option {
	return Opt("nats-creds", "MCPDRIFT_NATS_CREDS", "FILE", "NATS credentials file (.creds) "+credsUsage, String(p))
}

// Replicas is the option of the replicas of what the bus setup creates.
func Replicas(p *int) Option {
	*p = 1
	return Opt("replicas", "MCPDRIFT_REPLICAS", "N", "replicas of the streams and buckets it creates: 1 on a single node, 3 in a cluster (1 to 5)", Int(p))
}

// Service is what every service on the bus is configured with, besides its
// own settings: NATS, the bus setup, its log level and its ops address.
type Service struct {
	NATSURL   string
	NATSCreds string
	Replicas  int
	// Partitions of the observation and fingerprint streams (bus
	// Config.Partitions): set by the fingerprint and drift services'
	// --partitions, 0 for the others (the streams' partitions left alone).
	Partitions int
	BusSetup   string
	LogLevel   string
	OpsAddr    string
}

// Options sets the built-in defaults and returns the options, first in a
// service's --help. checkUsage says what --bus-setup check looks at and
// which role's rights suffice; a service that sets up nothing (the proxy)
// passes "" and has no --replicas and --bus-setup.
func (s *Service) Options(checkUsage string) []Option {
	s.BusSetup, s.LogLevel = bus.SetupCreate, DefaultLogLevel
	opts := []Option{NATSURL(&s.NATSURL), NATSCreds(&s.NATSCreds, "for this role")}
	if checkUsage != "" {
		opts = append(opts, Replicas(&s.Replicas),
			Opt("bus-setup", "MCPDRIFT_BUS_SETUP", "MODE", "create: create or update the streams and buckets at start (needs the NATS admin's rights); check: "+checkUsage, String(&s.BusSetup)))
	} else {
		s.Replicas = 1
	}
	return append(opts,
		Opt("log-level", "MCPDRIFT_LOG_LEVEL", "LEVEL", "debug, info, warn or error", String(&s.LogLevel)),
		Opt("ops-addr", "MCPDRIFT_OPS_ADDR", "ADDR", "host:port of /healthz, /readyz and /metrics (docs/metrics.md); empty: not served", String(&s.OpsAddr)),
	)
}

// Validate returns the log level and every problem of these settings.
func (s Service) Validate() (zerolog.Level, error) {
	var errs []error
	lvl, err := ParseLevel(s.LogLevel)
	if err != nil {
		errs = append(errs, err)
	}
	if s.NATSURL == "" {
		errs = append(errs, errors.New("nats url is empty"))
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", s.Replicas))
	}
	if s.Partitions < 0 || s.Partitions > bus.MaxPartitions {
		errs = append(errs, fmt.Errorf("partitions %d: want 1 to %d, or 0 for as the streams are", s.Partitions, bus.MaxPartitions))
	}
	if s.BusSetup != bus.SetupCreate && s.BusSetup != bus.SetupCheck {
		errs = append(errs, fmt.Errorf("bus setup %q: want %s or %s", s.BusSetup, bus.SetupCreate, bus.SetupCheck))
	}
	return lvl, errors.Join(errs...)
}

// ParseLevel reads a --log-level.
func ParseLevel(s string) (zerolog.Level, error) {
	lvl, err := zerolog.ParseLevel(s)
	if err != nil || s == "" {
		return zerolog.NoLevel, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return lvl, nil
}

// Logger is the logger of every command: JSON lines on w, with the time
// and the command's name.
func Logger(w io.Writer, level zerolog.Level, service string) zerolog.Logger {
	return zerolog.New(w).Level(level).With().Timestamp().Str("service", service).Logger()
}

// SetupTimeout bounds a service's bus setup or check at start.
const SetupTimeout = 30 * time.Second

// Bus is a service's connection to NATS and what it needs of the bus.
type Bus struct {
	NC *nats.Conn
	JS jetstream.JetStream
	*bus.Handles
}

// Open connects the service named name to NATS (bus.Connect: client
// mcpdrift-<name>, replies on the inbox _INBOX_<name> its NATS role may
// read, deploy/nats/auth.conf) and binds or checks the bus objects it
// needs as --bus-setup says (bus.Bind). Close it when done.
func (s Service) Open(ctx context.Context, name string, log zerolog.Logger, need []bus.Object, jsOpts ...jetstream.JetStreamOpt) (*Bus, error) {
	nc, err := bus.Connect(ctx, bus.Conn{URL: s.NATSURL, Creds: s.NATSCreds, Name: "mcpdrift-" + name, InboxPrefix: "_INBOX_" + name}, log)
	if err != nil {
		return nil, err
	}
	b := &Bus{NC: nc}
	if b.JS, err = jetstream.New(nc, jsOpts...); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	setupCtx, cancel := context.WithTimeout(ctx, SetupTimeout)
	defer cancel()
	if b.Handles, err = bus.Bind(setupCtx, b.JS, s.BusSetup, bus.Config{Replicas: s.Replicas, Partitions: s.Partitions}, need...); err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err() // asked to stop while starting
		}
		return nil, fmt.Errorf("setting up streams and buckets: %w", err)
	}
	return b, nil
}

// Close sends what is still buffered (acks, naks), waiting up to flush,
// and closes the connection.
func (b *Bus) Close(flush time.Duration) {
	_ = b.NC.FlushTimeout(flush)
	b.NC.Close()
}

// Partitions is the option of the partitions of the observation and
// fingerprint streams (bus Config.Partitions), for the bus setup and the
// services that consume them.
func Partitions(p *int) Option {
	return Opt("partitions", "MCPDRIFT_PARTITIONS", "N",
		"partitions of the observation and fingerprint streams by (tenant, server), the same on the bus setup and every fingerprint and drift instance; 0: as the streams are (none when new)", Int(p))
}

// PartitionSet is the option of the partitions a service instance takes
// (bus.ParsePartitionSet); env is its variable.
func PartitionSet(p *string, env string) Option {
	return Opt("partition-set", env, "LIST",
		"partitions this instance consumes, e.g. 0,2-3; empty: every one (those pinned to another instance wait here as a standby)", String(p))
}

// Partitioning returns the partitions of stream as they are on the server,
// checked against want (0: any), and the partition set setText names
// among them: what a fingerprint or drift instance consumes.
func (b *Bus) Partitioning(ctx context.Context, stream string, want int, setText string) (int, []int, error) {
	ctx, cancel := context.WithTimeout(ctx, SetupTimeout)
	defer cancel()
	p, err := bus.StreamPartitions(ctx, b.JS, stream, want)
	if err != nil {
		return 0, nil, err
	}
	set, err := bus.ParsePartitionSet(setText, p)
	if err != nil {
		return 0, nil, Invalid(err)
	}
	return p, set, nil
}
