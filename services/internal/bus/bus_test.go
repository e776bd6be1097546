package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

func TestSetupIsIdempotent(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
			t.Fatalf("bus.Setup #%d: %v", i+1, err)
		}
	}
	for _, name := range []string{bus.StreamObservations, bus.StreamFingerprints, bus.StreamVerdicts, bus.StreamAdmin} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if cfg := s.CachedInfo().Config; cfg.Duplicates != bus.DefaultConfig.DuplicateWindow || cfg.Replicas != 1 {
			t.Fatalf("stream %s: duplicates %v replicas %d", name, cfg.Duplicates, cfg.Replicas)
		}
	}
}

// TestSetupLeavesWhatIsAsWanted: a second Setup with the same settings
// updates nothing (no stream update advisory: an update is a write every
// running consumer sees, and services start on a bus set up already); a
// changed setting is applied.
func TestSetupLeavesWhatIsAsWanted(t *testing.T) {
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	updated, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	// The marker stream's update comes after every update Setup could
	// have made: once it arrives, nothing before it was Setup's.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "MARKER", Subjects: []string{"marker"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "MARKER", Subjects: []string{"marker"}, Description: "x"}); err != nil {
		t.Fatal(err)
	}
	msg, err := updated.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := "$JS.EVENT.ADVISORY.STREAM.UPDATED.MARKER"; msg.Subject != want {
		t.Fatalf("a second Setup with the same settings updated: %s", msg.Subject)
	}

	if _, err := bus.Setup(ctx, js, bus.Config{ObservationMaxAge: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	msg, err = updated.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := "$JS.EVENT.ADVISORY.STREAM.UPDATED." + bus.StreamObservations; msg.Subject != want {
		t.Fatalf("a changed setting: advisory %s, want %s", msg.Subject, want)
	}
	s, err := js.Stream(ctx, bus.StreamObservations)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 48*time.Hour {
		t.Fatalf("observations max age %v after Setup with 48h", got)
	}
}

func TestPublishDeduplicates(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx := context.Background()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := bus.Publish(ctx, js, bus.ListObservationSubject("acme", "fs"), []byte("x"), "obs-1"); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := js.Stream(ctx, bus.StreamObservations)
	info, _ := s.Info(ctx)
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages stored for one message id, want 1", info.State.Msgs)
	}
}

// An alerting subscriber needs no generated code: a plain subscription and a
// JSON decoder read a verdict.
func TestVerdictReadableWithoutGeneratedCode(t *testing.T) {
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	ctx := context.Background()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync(bus.Prefix + ".drift.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	v := &mcpdriftv1.Verdict{EventId: "v-1", Tenant: "acme", Server: "fs", Status: mcpdriftv1.Status_STATUS_CHANGED,
		ReasonCode: "drift", Severity: "critical", LiveHash: "sha256:ab"}
	data, err := bus.MarshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(ctx, js, bus.VerdictSubject("acme", "fs"), data, v.EventId); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var plain map[string]any
	if err := json.Unmarshal(msg.Data, &plain); err != nil {
		t.Fatalf("verdict is not JSON: %v\n%s", err, msg.Data)
	}
	if plain["status"] != "STATUS_CHANGED" || plain["tenant"] != "acme" || plain["serve"] != false || plain["severity"] != "critical" {
		t.Fatalf("verdict as plain JSON: %v", plain)
	}
}

func TestValidID(t *testing.T) {
	for _, ok := range []string{"a", "acme-corp", "fs_01", "A9"} {
		if err := bus.ValidID("server", ok); err != nil {
			t.Errorf("bus.ValidID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", "ü", string(make([]byte, 65))} {
		if err := bus.ValidID("server", bad); !errors.Is(err, bus.ErrInvalidID) {
			t.Errorf("bus.ValidID(%q) = %v, want invalid_id", bad, err)
		}
	}
}

func TestRedactURLs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://proxy:s3cret@n1:4222", "nats://proxy:xxxxx@n1:4222"},
		{"nats://a:p1@n1:4222,nats://n2:4222,tls://b:p@2@n3:4222", "nats://a:xxxxx@n1:4222,nats://n2:4222,tls://b:xxxxx@n3:4222"},
		{"nats://u:100%pure@n1", "nats://u:xxxxx@n1"},                      // not valid URL syntax: hidden all the same
		{"nats://s3cr3t-token@n1:4222", "nats://xxxxx@n1:4222"},            // a token
		{"nats://n1:4222,nats://tok@n2", "nats://n1:4222,nats://xxxxx@n2"}, // a token in a list
	} {
		if got := bus.RedactURLs(tc.in); got != tc.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
