package console

import (
	"net/http"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/driftsvc"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
)

// TestWithholdChangedShown: the review page says a variant's action on
// drift, and that a changed variant under withhold_changed serves its
// unchanged items only.
func TestWithholdChangedShown(t *testing.T) {
	s := startStackPolicy(t, driftsvc.Config{Policy: state.Policy{Posture: state.Discovery, OnDrift: state.WithholdChanged}}, nil)
	s.observe("acme", "notes", s.manifest(reviewedTools()...))
	s.waitStatus("acme", "notes", "verified")
	c := s.client()
	c.login(readSecret)
	a := c.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	contains(t, a.body, "on drift: withhold_changed")
	lacks(t, a.body, "unchanged items only")

	s.observe("acme", "notes", s.manifest(rugPullTools()...))
	s.waitStatus("acme", "notes", "changed")
	a = c.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	contains(t, a.body, "unchanged items only", "on drift: withhold_changed")
	lacks(t, a.body, "instructions changed")
}
