package bus_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

const secret = "s3cret-pw"

// TestConnectErrorsHideSecrets: whatever fails, the password or token of
// the URL is not in the error (a URL that does not parse is quoted whole
// by the parser).
func TestConnectErrorsHideSecrets(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"refused", "nats://user:" + secret + "@127.0.0.1:1"},
		{"token", "nats://" + secret + "@127.0.0.1:1"},
		{"list", "nats://127.0.0.1:1,nats://user:" + secret + "@127.0.0.1:2"},
		{"unparsable", "nats://user:" + secret + "@bad host:4222"},
		{"escaped", "nats://user:" + strings.ReplaceAll(secret, "-", "%2D") + "@127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			nc, err := bus.Connect(ctx, bus.Conn{URL: tc.url, Name: "test", Once: true}, zerolog.New(&logs).Level(zerolog.DebugLevel))
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "%2D") || strings.Contains(logs.String(), secret) {
				t.Errorf("the secret shows: %v\n%s", err, logs.String())
			}
			if !strings.Contains(err.Error(), "connecting to NATS at ") {
				t.Errorf("error %q does not say what it was doing", err)
			}
		})
	}
}

// TestConnectAuthError: refused credentials are ErrNATSAuth, without the
// password.
func TestConnectAuthError(t *testing.T) {
	opts := natstest.Options(t)
	opts.Username, opts.Password = "user", "right-password"
	srv := natstest.StartWith(t, opts)
	port := srv.Addr().(*net.TCPAddr).Port
	url := "nats://user:" + secret + "@127.0.0.1:" + itoa(port)
	_, err := bus.Connect(context.Background(), bus.Conn{URL: url, Name: "test", Once: true}, zerolog.Nop())
	if !errors.Is(err, bus.ErrNATSAuth) || strings.Contains(err.Error(), secret) {
		t.Fatalf("Connect with a wrong password = %v, want ErrNATSAuth without the password", err)
	}
}

// TestConnectLogsEvents: a service's connection logs that it went down and
// came back, with the URL redacted, and is quiet otherwise at info.
func TestConnectLogsEvents(t *testing.T) {
	opts := natstest.Options(t)
	opts.Username, opts.Password = "user", secret
	srv := natstest.StartWith(t, opts)
	port := srv.Addr().(*net.TCPAddr).Port
	var logs syncbuf.Buffer
	nc, err := bus.Connect(context.Background(), bus.Conn{URL: "nats://user:" + secret + "@127.0.0.1:" + itoa(port), Name: "test"},
		zerolog.New(&logs).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if logs.String() != "" {
		t.Fatalf("a healthy connect logged at info: %s", logs.String())
	}
	srv.Stop()
	waitLogged(t, &logs, `"message":"nats disconnected"`)
	again := natstest.Options(t)
	again.Port, again.Username, again.Password, again.StoreDir = port, "user", secret, opts.StoreDir
	natstest.StartWith(t, again)
	waitLogged(t, &logs, `"message":"nats reconnected"`)
	if !strings.Contains(logs.String(), "user:xxxxx@") || strings.Contains(logs.String(), secret) {
		t.Fatalf("the reconnect line does not redact the URL:\n%s", logs.String())
	}
}

func waitLogged(t *testing.T, logs *syncbuf.Buffer, want string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		if got := logs.String(); !strings.Contains(got, want) {
			return fmt.Errorf("no %s logged; logged:\n%s", want, got)
		}
		return nil
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
