package driftsvc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
)

// TestGuardNeverAcceptsInvisible: under guard, a change the guard accepts
// otherwise (a new optional parameter, a new tool) is drift when the item
// carries an invisible character, even one the baseline (a first manifest
// trusted on first use) already had at the same place.
func TestGuardNeverAcceptsInvisible(t *testing.T) {
	e := newEnv(t)
	v1 := e.tools("a:adds\u200b")
	v2 := e.tools("a+opt:adds\u200b")                      // a new optional parameter; the description keeps its U+200B
	v3 := e.tools("a+opt:adds\u200b", "b:subtracts\ufe0f") // a new tool whose description carries a variation selector
	clean1, clean2 := e.tools("c"), e.tools("c+opt")
	svc, _ := e.start(Config{Policy: state.Policy{Posture: state.Discovery, OnDrift: state.Block, Guard: true}})
	at := time.Now()
	step := 0
	observe := func(server, h string) *state.Record {
		step++
		e.publishV(server, "v0", fmt.Sprint("o", step), h, at.Add(time.Duration(step)*time.Second))
		return e.waitVariant(svc, server, "v0", func(r *state.Record) bool { return r.LiveHash == h })
	}
	if r := observe("g", v1); r.Status != state.Verified {
		t.Fatalf("first manifest under discovery: %+v", r)
	}
	if r := observe("g", v2); r.Status != state.Changed || r.Benign || r.Reason == state.ReasonAutoApproved {
		t.Fatalf("an optional parameter on a tool that keeps an invisible character: %+v", r)
	}
	if _, _, err := svc.Approve(t.Context(), "acme", "g", "", v2, "alice"); err != nil {
		t.Fatal(err)
	}
	if r := observe("g", v3); r.Status != state.Changed || r.Benign || !strings.Contains(r.ReasonText, "critical") {
		t.Fatalf("a new tool with an invisible character: %+v", r)
	}
	// The same changes without invisible characters are accepted.
	observe("h", clean1)
	if r := observe("h", clean2); r.Status != state.Verified || r.Reason != state.ReasonAutoApproved {
		t.Fatalf("a new optional parameter under guard: %+v", r)
	}
}
