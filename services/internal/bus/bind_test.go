package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// TestBind: check mode changes nothing and names every missing object;
// create mode sets up everything; check mode then binds what is asked for.
func TestBind(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := bus.Bind(ctx, js, bus.SetupCheck, bus.Config{}, bus.Fingerprints, bus.Status, bus.Manifests)
	if !errors.Is(err, bus.ErrMissing) {
		t.Fatalf("check on an empty server = %v, want ErrMissing", err)
	}
	for _, o := range []bus.Object{bus.Fingerprints, bus.Status, bus.Manifests} {
		if !strings.Contains(err.Error(), o.String()) {
			t.Errorf("the error does not name %s: %v", o, err)
		}
	}
	if found, err := bus.Survey(ctx, js, bus.Objects()); err != nil || found[0] != nil {
		t.Fatalf("check created something: %v %v", found, err)
	}
	if _, err := bus.Bind(ctx, js, "maybe", bus.Config{}); err == nil {
		t.Fatal("an unknown mode was accepted")
	}

	h, err := bus.Bind(ctx, js, bus.SetupCreate, bus.Config{Replicas: 1})
	if err != nil || h.Status == nil || h.Baselines == nil || h.Manifests == nil || h.Policy == nil {
		t.Fatalf("create: %+v %v", h, err)
	}
	h, err = bus.Bind(ctx, js, bus.SetupCheck, bus.Config{}, bus.Objects()...)
	if err != nil || h.Status == nil || h.Baselines == nil || h.Manifests == nil || h.Policy == nil {
		t.Fatalf("check after create: %+v %v", h, err)
	}
	h, err = bus.Bind(ctx, js, bus.SetupCheck, bus.Config{}, bus.Observations, bus.Manifests)
	if err != nil || h.Status != nil || h.Manifests == nil {
		t.Fatalf("check binds only what it is asked for: %+v %v", h, err)
	}
}
