package options

import (
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Bus setup modes of a service (--bus-setup).
const (
	SetupCreate = "create" // create or update every stream and bucket (bus.Setup)
	SetupCheck  = "check"  // only check that they exist: a least-privilege role
)

// Service is what every service on the bus is configured with, besides its
// own settings: NATS, the bus setup, its log level and its ops address.
type Service struct {
	NATSURL   string
	NATSCreds string
	Replicas  int
	BusSetup  string
	LogLevel  string
	OpsAddr   string
}

// Options sets the built-in defaults and returns the options, first in a
// service's --help. checkUsage says what --bus-setup check looks at and
// which role's rights suffice.
func (s *Service) Options(checkUsage string) []Option {
	s.NATSURL, s.Replicas, s.BusSetup, s.LogLevel = "nats://127.0.0.1:4222", 1, SetupCreate, "info"
	return []Option{
		Opt("nats-url", "MCPDRIFT_NATS_URL", "URL", "NATS server URLs, comma-separated", String(&s.NATSURL)),
		Opt("nats-creds", "MCPDRIFT_NATS_CREDS", "FILE", "NATS credentials file (.creds) for this role", String(&s.NATSCreds)),
		Opt("replicas", "MCPDRIFT_REPLICAS", "N", "replicas of the streams and buckets it creates: 1 on a single node, 3 in a cluster", Int(&s.Replicas)),
		Opt("bus-setup", "MCPDRIFT_BUS_SETUP", "MODE", "create: create or update the streams and buckets at start (needs the NATS admin's rights); check: "+checkUsage, String(&s.BusSetup)),
		Opt("log-level", "MCPDRIFT_LOG_LEVEL", "LEVEL", "debug, info, warn or error", String(&s.LogLevel)),
		Opt("ops-addr", "MCPDRIFT_OPS_ADDR", "ADDR", "host:port of /healthz, /readyz and /metrics (docs/metrics.md); empty: not served", String(&s.OpsAddr)),
	}
}

// Validate returns the log level and every problem of these settings.
func (s Service) Validate() (zerolog.Level, error) {
	var errs []error
	lvl, err := zerolog.ParseLevel(s.LogLevel)
	if err != nil || s.LogLevel == "" {
		errs = append(errs, fmt.Errorf("log level %q: want debug, info, warn or error", s.LogLevel))
	}
	if s.NATSURL == "" {
		errs = append(errs, errors.New("nats url is empty"))
	}
	if err := (bus.Config{Replicas: s.Replicas}).Validate(); err != nil || s.Replicas < 1 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", s.Replicas))
	}
	if s.BusSetup != SetupCreate && s.BusSetup != SetupCheck {
		errs = append(errs, fmt.Errorf("bus setup %q: want %s or %s", s.BusSetup, SetupCreate, SetupCheck))
	}
	return lvl, errors.Join(errs...)
}
