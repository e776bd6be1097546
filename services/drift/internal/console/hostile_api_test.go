package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/driftsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// The admin API as an attacker meets it: on the same stack as the console
// (a real nats-server, the drift service, the API under /v1 on a real
// HTTP server), every answer read as it comes off the wire.

// raw sends one request to the stack's HTTP server with the headers as
// given (a header may be given twice) and returns the status, the error
// code of a JSON error body ("" for none) and the body.
func (s *stack) raw(method, path string, hdr [][2]string, body string) (int, string, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hdr {
		req.Header.Add(h[0], h[1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e admin.Error
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Code, string(b)
}

func bearer(secret string) [][2]string { return [][2]string{{"Authorization", "Bearer " + secret}} }

// audited returns the next admin action audited, failing when none is.
func (s *stack) audited() *mcpdriftv1.AdminAction {
	s.t.Helper()
	return nextAction(s.t, s.actions)
}

// server reads tenant/server's first variant's status, baseline version
// and whether it is held.
func (s *stack) state(tenant, server string) (st string, version int64, held bool) {
	s.t.Helper()
	v, err := s.svc.Server(context.Background(), tenant, server)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(v.Variants[0].Status), v.Variants[0].BaselineVersion, v.Held()
}

type route struct {
	method, path, body string
	write              bool
}

func adminRoutes(hash string) []route {
	const id = "0123456789abcdef0123456789abcdef"
	return []route{
		{"GET", "/v1/servers", "", false},
		{"GET", "/v1/servers/acme/notes", "", false},
		{"GET", "/v1/servers/acme/notes/diff", "", false},
		{"GET", "/v1/servers/acme/notes/history", "", false},
		{"GET", "/v1/servers/acme/notes/baseline", "", false},
		{"GET", "/v1/verdicts", "", false},
		{"GET", "/v1/approvals", "", false},
		{"GET", "/v1/policy", "", false},
		{"POST", "/v1/policy/test", `{"tenant":"acme","server":"notes","tool":"read_note"}`, false},
		{"POST", "/v1/servers/acme/notes/approve", `{"hash":"` + hash + `"}`, true},
		{"POST", "/v1/servers/acme/notes/approve", `{"hash":"` + hash + `","items":["tool:export_notes"]}`, true},
		{"POST", "/v1/servers/acme/notes/quarantine", `{"reason":"pwned"}`, true},
		{"POST", "/v1/servers/acme/notes/rebaseline", `{"hash":"` + hash + `"}`, true},
		{"POST", "/v1/servers/acme/notes/risk", `{"band":"low","mode":"allow","reason":"pwned"}`, true},
		{"POST", "/v1/servers/acme/notes/baseline", `{}`, true},
		{"PUT", "/v1/policy", `{"tenants":{"acme":{"rules":[]}}}`, true},
		{"POST", "/v1/approvals/" + id + "/approve", "", true},
		{"POST", "/v1/approvals/" + id + "/deny", "", true},
	}
}

// TestAPIRefusesWithoutTheRole: every admin route, without credentials or
// with credentials that are not a token (an empty or blank secret, another
// scheme, a secret with a space more, a token's secret cut short), answers
// 401 unauthenticated; a read token on every write route answers 403
// forbidden; each refusal is audited (actor anonymous or the token's name,
// not ok, its code) and changes nothing.
func TestAPIRefusesWithoutTheRole(t *testing.T) {
	s := startStack(t)
	_, pulled := s.rugPull()
	notTokens := [][][2]string{
		nil,
		{{"Authorization", ""}},
		{{"Authorization", "Bearer "}},
		{{"Authorization", "Bearer      "}},
		{{"Authorization", "bearer " + writeSecret}},
		{{"Authorization", "Basic " + writeSecret}},
		{{"Authorization", writeSecret}},
		{{"Authorization", "Bearer  " + writeSecret}},
		{{"Authorization", "Bearer " + writeSecret[:len(writeSecret)-1]}},
		{{"Authorization", "Bearer " + writeSecret + "x"}},
		{{"Authorization", "Bearer " + strings.ToUpper(writeSecret)}},
	}
	for _, rt := range adminRoutes(pulled) {
		for _, hdr := range notTokens {
			drain(s.actions)
			code, ec, body := s.raw(rt.method, rt.path, hdr, rt.body)
			if code != http.StatusUnauthorized || ec != "unauthenticated" {
				t.Errorf("%s %s with %q: %d %s, want 401 unauthenticated", rt.method, rt.path, hdr, code, body)
				continue
			}
			a := s.audited()
			if a.Actor != "anonymous" || a.Ok || a.ErrorCode != "unauthenticated" || a.Role != "" {
				t.Errorf("%s %s with %q: audited %+v, want anonymous refused unauthenticated", rt.method, rt.path, hdr, a)
			}
		}
		if !rt.write {
			continue
		}
		drain(s.actions)
		code, ec, body := s.raw(rt.method, rt.path, bearer(readSecret), rt.body)
		if code != http.StatusForbidden || ec != "forbidden" {
			t.Errorf("%s %s with the read token: %d %s, want 403 forbidden", rt.method, rt.path, code, body)
			continue
		}
		if a := s.audited(); a.Actor != "reader" || a.Role != "read" || a.Ok || a.ErrorCode != "forbidden" {
			t.Errorf("%s %s with the read token: audited %+v, want reader refused forbidden", rt.method, rt.path, a)
		}
	}
	if st, v, held := s.state("acme", "notes"); st != "changed" || v != 1 || held {
		t.Errorf("after the refused writes acme/notes is %s at v%d held=%v, want changed at v1", st, v, held)
	}
}

// TestAPITwoAuthorizationHeaders: a request with two Authorization
// headers never acts with the second (a proxy in front that appends its
// own header behind the client's does not lend the client its role), and
// a bogus first header does not fall through to a valid second one.
func TestAPITwoAuthorizationHeaders(t *testing.T) {
	s := startStack(t)
	s.rugPull()
	for _, hdr := range [][][2]string{
		{{"Authorization", "Bearer " + readSecret}, {"Authorization", "Bearer " + writeSecret}},
		{{"Authorization", "Bearer not-a-token-0123456789"}, {"Authorization", "Bearer " + writeSecret}},
		{{"Authorization", ""}, {"Authorization", "Bearer " + writeSecret}},
	} {
		drain(s.actions)
		code, ec, body := s.raw("POST", "/v1/servers/acme/notes/quarantine", hdr, `{"reason":"two headers"}`)
		if code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("quarantine with %q: %d %s, want refused", hdr, code, body)
		}
		if a := s.audited(); a.Ok || a.Actor == "alice" || a.ErrorCode != ec {
			t.Errorf("quarantine with %q: audited %+v", hdr, a)
		}
	}
	if _, _, held := s.state("acme", "notes"); held {
		t.Error("a request with two Authorization headers quarantined acme/notes")
	}
}

// TestAPIHostileIDs: a tenant, server or variant that is not an id (a
// NATS wildcard or token separator, a path separator, dot-dot, a NUL, a
// look-alike letter, too long) is refused 400 invalid_id on every route,
// before it reaches a subject or a key, and the audit row does not carry it.
func TestAPIHostileIDs(t *testing.T) {
	s := startStack(t)
	_, pulled := s.rugPull()
	bad := []string{"a.b", "*", ">", "acme.>", "a%2Fb", "%2E%2E", ".", "a%00b", "a%20b",
		"%D0%B0cme", // Cyrillic а
		"acme%E2%80%8B", strings.Repeat("a", 65), "%24JS", "a%09b", "x%2F..%2Fnotes", "x%2F..%2Facme"}
	for _, b := range bad {
		for _, rt := range []route{
			{"GET", "/v1/servers/" + b + "/notes", "", false},
			{"GET", "/v1/servers/acme/" + b + "/diff", "", false},
			{"POST", "/v1/servers/" + b + "/notes/approve", `{"hash":"` + pulled + `"}`, true},
			{"POST", "/v1/servers/acme/" + b + "/quarantine", `{"reason":"x","preemptive":true}`, true},
			{"GET", "/v1/servers/acme/notes?variant=" + b, "", false},
			{"GET", "/v1/policy?tenant=" + b, "", false},
		} {
			drain(s.actions)
			code, ec, body := s.raw(rt.method, rt.path, bearer(writeSecret), rt.body)
			if b == "." && !strings.Contains(rt.path, "=") {
				// Go's ServeMux cleans the path first: a redirect to the
				// path without the dot segment, which names nothing.
				if code != http.StatusTemporaryRedirect {
					t.Errorf("%s %s: %d %s, want Go's 307 to the cleaned path", rt.method, rt.path, code, body)
				}
				continue
			}
			if code != http.StatusBadRequest || ec != "invalid_id" {
				t.Errorf("%s %s: %d %s, want 400 invalid_id", rt.method, rt.path, code, body)
				continue
			}
			if a := s.audited(); a.Ok || a.ErrorCode != "invalid_id" || (a.Tenant != "" && a.Tenant != "acme") || (a.Server != "" && a.Server != "notes") || a.Variant != "" {
				t.Errorf("%s %s: audited %+v", rt.method, rt.path, a)
			}
		}
	}
	// A variant in the body.
	for _, b := range []string{"a.b", "*", ">", "v0.>", "a/b", "..", ".", "a\u0000b", "a b", "\u0430cme", "v0\u200b", strings.Repeat("a", 65), "$JS", "a\tb"} {
		drain(s.actions)
		code, ec, body := s.raw("POST", "/v1/servers/acme/notes/approve", bearer(writeSecret), `{"hash":"`+pulled+`","variant":"`+b+`"}`)
		// A control character raw in a JSON string is no JSON.
		if code != http.StatusBadRequest || (ec != "invalid_id" && ec != "bad_request") {
			t.Errorf("approve with variant %q: %d %s, want 400 invalid_id", b, code, body)
		}
		if a := s.audited(); a.Ok || a.ErrorCode != ec || a.Variant != "" {
			t.Errorf("approve with variant %q: audited %+v", b, a)
		}
	}
	if st, v, held := s.state("acme", "notes"); st != "changed" || v != 1 || held {
		t.Errorf("after the hostile ids acme/notes is %s at v%d held=%v, want changed at v1", st, v, held)
	}
	if _, err := s.svc.Server(context.Background(), "a", "b"); err == nil {
		t.Error("a server a/b exists")
	}
}

// TestAPIHostileBodies: a body that is not one JSON object of the
// documented shape (an unknown field, a second value after it, too large,
// not an object) is refused 400 bad_request and approves nothing; a key
// given twice is read once, and the hash audited is the hash acted on.
func TestAPIHostileBodies(t *testing.T) {
	s := startStack(t)
	reviewed, pulled := s.rugPull()
	for _, body := range []string{
		`{"hash":"` + pulled + `","approve_all":true}`,
		`{"hash":"` + pulled + `"} {"items":["tool:export_notes"]}`,
		`{"hash":"` + pulled + `"}]`,
		`{"hash":"` + pulled + `"}garbage`,
		`{"hash":"` + pulled + `","variant":"v0","pad":"` + strings.Repeat("x", 70<<10) + `"}`,
		`{"hash":"` + pulled + `","variant":"` + strings.Repeat("v", 70<<10) + `"}`,
		`["` + pulled + `"]`,
		`"` + pulled + `"`,
		`{"hash":null}`,
		`{"hash":"` + pulled + `","items":"tool:export_notes"}`,
		`{"hash":["` + pulled + `"]}`,
		`{"hash":"sha256:` + strings.Repeat("0", 64) + `"}`, // not live: stale, not bad
		``,
	} {
		drain(s.actions)
		code, ec, answer := s.raw("POST", "/v1/servers/acme/notes/approve", bearer(writeSecret), body)
		if code/100 != 4 || (ec != "bad_request" && ec != "invalid_id" && ec != "stale_hash") {
			t.Errorf("approve with %.80q: %d %.200s, want a 400 bad_request (or 409 stale_hash)", body, code, answer)
		}
		if a := s.audited(); a.Ok || a.ErrorCode != ec {
			t.Errorf("approve with %.80q: audited %+v", body, a)
		}
	}
	if st, v, _ := s.state("acme", "notes"); st != "changed" || v != 1 {
		t.Fatalf("after the hostile bodies acme/notes is %s at v%d, want changed at v1", st, v)
	}
	// A key twice, in another case: the one the decoder keeps is the one
	// acted on and audited.
	drain(s.actions)
	code, ec, answer := s.raw("POST", "/v1/servers/acme/notes/approve", bearer(writeSecret), `{"hash":"`+pulled+`","HASH":"`+reviewed+`"}`)
	a := s.audited()
	if a.Hash != reviewed || code != http.StatusConflict || ec != "stale_hash" {
		t.Errorf("approve with hash twice: %d %s, audited %q: want the last key (the reviewed hash, not live) refused stale_hash", code, answer, a.Hash)
	}
	if st, v, _ := s.state("acme", "notes"); st != "changed" || v != 1 {
		t.Fatalf("after the twice-keyed body acme/notes is %s at v%d, want changed at v1", st, v)
	}
}

// TestApproveBoundToWhatWasReviewed: an approve names the live hash the
// reviewer saw; once the server moved on it approves nothing (whole or by
// item), the baseline hash is not the live one either, a replayed approve
// adds no version, two approves at once add one, and an approve of a held
// server lifts the hold only with the live hash.
func TestApproveBoundToWhatWasReviewed(t *testing.T) {
	s := startStack(t)
	reviewed, pulled := s.rugPull()
	moved := s.manifest(append(rugPullTools(), tool("wipe", "Delete everything.", nil, map[string]any{}, nil))...)
	approve := func(body string) (int, string) {
		t.Helper()
		drain(s.actions)
		code, ec, _ := s.raw("POST", "/v1/servers/acme/notes/approve", bearer(writeSecret), body)
		if a := s.audited(); a.Actor != "alice" || a.Ok != (code == http.StatusOK) || a.ErrorCode != ec || !strings.HasPrefix(a.Hash, hashIn(body)) {
			t.Errorf("approve %s: audited %+v", body, a)
		}
		return code, ec
	}
	// The baseline's own hash is not what is live.
	if code, ec := approve(`{"hash":"` + reviewed + `"}`); code != http.StatusConflict || ec != "stale_hash" {
		t.Errorf("approving the baseline's hash: %d %s, want 409 stale_hash", code, ec)
	}
	// The server moves on between the review (of pulled) and the approve.
	s.observe("acme", "notes", moved)
	poll.Eventually(t, 10*time.Second, func() error {
		v, err := s.svc.Server(context.Background(), "acme", "notes")
		if err != nil {
			return err
		}
		if v.Variants[0].LiveHash != moved {
			return fmt.Errorf("live %s, want %s", v.Variants[0].LiveHash, moved)
		}
		return nil
	})
	for _, body := range []string{
		`{"hash":"` + pulled + `"}`,
		`{"hash":"` + pulled + `","variant":"v0"}`,
		`{"hash":"` + pulled + `","items":["tool:export_notes"]}`,
		`{"hash":"` + pulled + `","variant":"v0","items":["tool:read_note"]}`,
	} {
		if code, ec := approve(body); code != http.StatusConflict || ec != "stale_hash" {
			t.Errorf("approve %s after the server moved: %d %s, want 409 stale_hash", body, code, ec)
		}
	}
	if st, v, _ := s.state("acme", "notes"); st != "changed" || v != 1 {
		t.Fatalf("after the stale approves acme/notes is %s at v%d, want changed at v1", st, v)
	}
	// Held: a stale approve keeps the hold, the live one lifts it.
	drain(s.actions)
	if code, _, body := s.raw("POST", "/v1/servers/acme/notes/quarantine", bearer(writeSecret), `{"reason":"looking"}`); code != http.StatusOK {
		t.Fatalf("quarantine: %d %s", code, body)
	}
	s.audited()
	if code, ec := approve(`{"hash":"` + pulled + `"}`); code != http.StatusConflict || ec != "stale_hash" {
		t.Errorf("a stale approve of a held server: %d %s", code, ec)
	}
	if st, _, held := s.state("acme", "notes"); st != "quarantined" || !held {
		t.Errorf("after a stale approve the server is %s held=%v, want quarantined and held", st, held)
	}
	// Two approves of the live hash at once: one new version.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = s.raw("POST", "/v1/servers/acme/notes/approve", bearer(writeSecret), `{"hash":"`+moved+`","variant":"v0"}`)
		}()
	}
	wg.Wait()
	if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
		t.Errorf("two approves of the live hash at once answered %v, want both 200 (the second finds it approved)", codes)
	}
	if st, v, held := s.state("acme", "notes"); st != "verified" || v != 2 || held {
		t.Errorf("after two approves at once acme/notes is %s at v%d held=%v, want verified at v2, not held", st, v, held)
	}
	// A replay adds no version.
	if code, ec := approve(`{"hash":"` + moved + `","variant":"v0"}`); code != http.StatusOK {
		t.Errorf("a replayed approve: %d %s", code, ec)
	}
	if st, v, _ := s.state("acme", "notes"); st != "verified" || v != 2 {
		t.Errorf("after a replayed approve acme/notes is %s at v%d, want verified at v2", st, v)
	}
	hist, err := s.svc.History(context.Background(), "acme", "notes", "")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(hist[0].Baselines); n != 2 || hist[0].Baselines[1].Hash != moved {
		t.Errorf("history %+v, want v1 and v2 = %s", hist, moved)
	}
}

func hashIn(body string) string {
	var r struct {
		Hash string `json:"hash"`
	}
	_ = json.Unmarshal([]byte(body), &r)
	return r.Hash
}

// TestApproveLiftsHoldWhateverTheClocks: two drift instances whose clocks
// differ. A hold placed by the instance whose clock is ahead, before an
// approve on the other began, is the hold the approver saw: the approve of
// the live hash lifts it. Before, the approve compared the hold's time (the
// other instance's clock) with its own start and answered held_again, again
// and again, for as long as the clocks were apart; and by the same
// comparison an instance whose clock is ahead lifted a hold placed after
// its approve began.
func TestApproveLiftsHoldWhateverTheClocks(t *testing.T) {
	s := startStack(t)
	_, pulled := s.rugPull()
	ahead, err := driftsvc.New(driftsvc.Config{}, driftsvc.Deps{JS: s.b.JS, Handles: s.b.Handles, Log: zerolog.Nop(),
		Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ahead.Quarantine(context.Background(), "acme", "notes", "bob", "looking", false); err != nil {
		t.Fatal(err)
	}
	if st, _, held := s.state("acme", "notes"); st != "quarantined" || !held {
		t.Fatalf("after the hold acme/notes is %s held=%v", st, held)
	}
	drain(s.actions)
	code, ec, body := s.raw("POST", "/v1/servers/acme/notes/approve", bearer(writeSecret), `{"hash":"`+pulled+`"}`)
	if code != http.StatusOK {
		t.Errorf("approving the live hash of a server held before: %d %s %s, want 200", code, ec, body)
	}
	if st, v, held := s.state("acme", "notes"); st != "verified" || v != 2 || held {
		t.Errorf("after the approve acme/notes is %s at v%d held=%v, want verified at v2, not held", st, v, held)
	}
}
