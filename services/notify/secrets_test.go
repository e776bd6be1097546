package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/options/optionstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

// TestNATSPasswordNeverShows: a password in MCPDRIFT_NATS_URL shows
// neither in --help nor in the error and the log lines of a failed connect
// (issue 15: the connect error quoted it).
func TestNATSPasswordNeverShows(t *testing.T) {
	optionstest.NATSPasswordNeverShows(t, run, map[string]string{envWebhook: "https://hooks.example/x"}, false, []string{})
}

// The secrets of a destination: the signing key, and the webhook URL's
// password and path (a Slack webhook's path is its credential).
const (
	signingKey  = "sign-key-7f3a"
	urlPassword = "url-pw-91c2"
	urlPath     = "T01/B02/slack-token-55e1"
)

// TestWebhookSecretsNeverShow: the signing key and the webhook URL's
// password and path show nowhere: not in --help, not in a refused start,
// not in the logs of a running service whose destination fails every
// request (the failures are logged, retried and dead-lettered).
func TestWebhookSecretsNeverShow(t *testing.T) {
	check := func(what, out string) {
		t.Helper()
		for _, s := range []string{signingKey, urlPassword, urlPath} {
			if strings.Contains(out, s) {
				t.Errorf("%s shows %q:\n%s", what, s, out)
			}
		}
	}
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no "+r.URL.Path, http.StatusInternalServerError) // the answer quotes the path: it is not logged
	}))
	defer refusing.Close()
	hook := strings.Replace(refusing.URL, "http://", "http://user:"+urlPassword+"@", 1) + "/services/" + urlPath
	e := map[string]string{"MCPDRIFT_NATS_URL": srv.ClientURL(), envSecret: signingKey, "MCPDRIFT_LOG_LEVEL": "debug"}

	for _, args := range [][]string{{"--help"}, {"--webhook", hook, "--format", "xml"}, {"--webhook", hook, "--filter", "kind=nope"},
		{"--webhook", strings.Replace(hook, "http://", "gopher://", 1)}} {
		var out syncbuf.Buffer
		err := run(context.Background(), args, env(e), &out)
		check(strings.Join(args[:1], " "), out.String()+"\n"+errString(err))
	}

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	const name = "hooks"
	go func() {
		done <- run(ctx, []string{"--webhook", hook, "--name", name, "--format", "slack", "--max-deliver", "2", "--retry-delay", "10ms", "--max-retry-delay", "20ms"}, env(e), &logs)
	}()
	poll.Eventually(t, 30*time.Second, func() error {
		// A destination's consumers take what comes after they exist.
		if _, err := js.Consumer(ctx, bus.StreamVerdicts, "notify-"+name); err != nil {
			return fmt.Errorf("consumer notify-%s: %v; logs:\n%s", name, err, logs.String())
		}
		return nil
	})
	v := &mcpdriftv1.Verdict{EventId: "verdict-acme.files.v1-1", Tenant: "acme", Server: "files", Variant: "v1",
		Status: mcpdriftv1.Status_STATUS_CHANGED, AtUnixMs: time.Now().UnixMilli()}
	data, _ := bus.MarshalJSON(v)
	if _, err := bus.Publish(ctx, js, bus.VerdictSubject("acme", "files"), data, v.EventId); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "message terminated") {
			return fmt.Errorf("not dead-lettered yet: %s", logs.String())
		}
		return nil
	})
	cancel()
	err := <-done
	check("the running service's logs", logs.String()+"\n"+errString(err))
	if !strings.Contains(logs.String(), "answered 500") {
		t.Errorf("the failures are not logged:\n%s", logs.String())
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
