package session

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestIDKeyPlain: idKey reads a plain string id (printable ASCII, no
// escape) without decoding it, to the same key json.Unmarshal's reading
// gives, and an escaped one as before.
func TestIDKeyPlain(t *testing.T) {
	decoded := func(raw string) (string, bool) {
		text := raw
		if raw[0] == '"' {
			var str string
			if json.Unmarshal([]byte(raw), &str) != nil {
				return "", false
			}
			text = strings.TrimSpace(str)
		}
		if f, err := strconv.ParseFloat(text, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return "n:" + strconv.FormatFloat(f, 'g', -1, 64), true
		}
		return "s:" + text, true
	}
	for _, raw := range []string{`1`, `"1"`, `" 1 "`, `"1.0"`, `"abc"`, `""`, `"a\"b"`, `"\u0031"`, `"é"`, `"a\\b"`, `"x y"`,
		`"mcpdrift-0a1b2c3d4e5f-7"`, `"1e3"`, `"Infinity"`, `"NaN"`, `"\t1"`, `"` + strings.Repeat("z", 100) + `"`} {
		got, gok := idKey([]byte(raw))
		want, wok := decoded(raw)
		if got != want || gok != wok {
			t.Errorf("idKey(%s) = %q %v, want %q %v", raw, got, gok, want, wok)
		}
	}
}

// TestRequestsKeyed: the book refuses a client's id while one a coercing
// client takes for it is in flight, and frees the key with the request,
// however it is taken.
func TestRequestsKeyed(t *testing.T) {
	var b requests
	if !b.addClient([]byte(`1`), pendingReq{method: "ping"}) {
		t.Fatal("the first id refused")
	}
	for _, id := range []string{`1`, `"1"`, `" 1"`, `1.0`} {
		if b.addClient([]byte(id), pendingReq{method: "ping"}) || !b.inFlight([]byte(id)) {
			t.Fatalf("%s booked while 1 is in flight", id)
		}
	}
	if _, ok := b.take(`1`); !ok {
		t.Fatal("1 not in flight")
	}
	if b.inFlight([]byte(`"1"`)) || !b.addClient([]byte(`"1"`), pendingReq{method: "ping"}) {
		t.Fatal(`"1" refused once 1 was answered`)
	}
	if got := b.takeClientKeyed("n:1"); string(got) != `"1"` {
		t.Fatalf("takeClientKeyed = %s, want \"1\"", got)
	}
	if !b.addClient([]byte(`2`), pendingReq{}) || !b.addClient([]byte(`"x"`), pendingReq{}) {
		t.Fatal("fresh ids refused")
	}
	if out, _ := b.unanswered([][]byte{[]byte(`2`), []byte(`"x"`)}); len(out) != 2 {
		t.Fatalf("unanswered = %q", out)
	}
	if len(b.client) != 0 || len(b.keyed) != 0 {
		t.Fatalf("left booked: %v %v", b.client, b.keyed)
	}
}
