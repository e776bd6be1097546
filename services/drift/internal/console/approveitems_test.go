package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
)

// itemForm is the review page's approve form of one item, as drawn.
func itemForm(csrf, hash, item string) string {
	return `<form method="post" action="/servers/acme/notes/approve" class="approve-item">
    <input type="hidden" name="csrf" value="` + csrf + `">
    <input type="hidden" name="variant" value="v0">
    <input type="hidden" name="hash" value="` + hash + `">
    <input type="hidden" name="item" value="` + item + `">`
}

// TestReviewApproveItem: the review page draws one approve form per item
// of the diff, bound to the live hash the page shows, for a writer only.
// Posting one (with the session's CSRF token, as the other forms) approves
// that item alone through the admin API, audited with the item: the server
// stays changed and the diff keeps the other item, with its own form. A
// form for an item that is no longer a difference, one of a stale page, and
// one without the CSRF token are refused and change nothing. Approving the
// last item verifies the server.
func TestReviewApproveItem(t *testing.T) {
	s := startStack(t)
	h1, h2 := s.rugPull()

	reader := s.client()
	reader.login(readSecret)
	a := reader.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	lacks(t, a.body, "approve-item")

	c := s.client()
	c.login(writeSecret)
	token := c.csrf("/servers/acme/notes")
	a = c.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	contains(t, a.body, itemForm(token, h2, "tool:read_note"), itemForm(token, h2, "tool:export_notes"), "Approve only this item")
	lacks(t, a.body, `name="item" value="tool:search_notes"`) // unchanged: not a difference

	for _, tc := range []struct {
		name string
		form url.Values
		code int
		err  string
	}{
		{"no_csrf", url.Values{"hash": {h2}, "variant": {"v0"}, "item": {"tool:export_notes"}}, http.StatusForbidden, "csrf_invalid"},
		{"unchanged", url.Values{"csrf": {token}, "hash": {h2}, "variant": {"v0"}, "item": {"tool:search_notes"}}, http.StatusConflict, "item_unchanged"},
		{"stale", url.Values{"csrf": {token}, "hash": {h1}, "variant": {"v0"}, "item": {"tool:export_notes"}}, http.StatusConflict, "stale_hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := c.do(http.MethodPost, "/servers/acme/notes/approve", tc.form, nil)
			must(t, a, tc.code)
			if got := a.hdr.Get("X-Mcpdrift-Error"); got != tc.err {
				t.Errorf("error code %q, want %s", got, tc.err)
			}
		})
	}
	s.waitStatus("acme", "notes", "changed")

	drain(s.actions)
	a = c.do(http.MethodPost, "/servers/acme/notes/approve", url.Values{"csrf": {token}, "hash": {h2}, "variant": {"v0"}, "item": {"tool:export_notes"}}, nil)
	must(t, a, http.StatusSeeOther)
	act := nextAction(t, s.actions)
	if want := admin.AuditItems(h2, []string{"tool:export_notes"}); act.Action != "approve" || act.Actor != "alice" || !act.Ok || act.Hash != want {
		t.Errorf("audited %+v, want an approve of %s by alice", act, want)
	}
	a = c.get(a.hdr.Get("Location"))
	must(t, a, http.StatusOK)
	contains(t, a.body, "Approved the item", `id="server-status">changed<`, "approved baseline v2", "Changed (1)",
		itemForm(token, h2, "tool:read_note"), "<code>approved_items</code>")
	lacks(t, a.body, "Added (", `name="item" value="tool:export_notes"`)

	a = c.do(http.MethodPost, "/servers/acme/notes/approve", url.Values{"csrf": {token}, "hash": {h2}, "variant": {"v0"}, "item": {"tool:read_note"}}, nil)
	must(t, a, http.StatusSeeOther)
	s.waitStatus("acme", "notes", "verified")
	a = c.get(a.hdr.Get("Location"))
	must(t, a, http.StatusOK)
	lacks(t, a.body, "approve-item")
	if !strings.Contains(a.body, "is its approved baseline") {
		t.Errorf("the verified server's page still shows a diff")
	}
}
