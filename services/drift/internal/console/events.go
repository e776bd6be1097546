package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Event is what the fleet page's script hears of a verdict: which server
// moved and to what (never the verdict's free text).
type Event struct {
	Tenant  string `json:"tenant"`
	Server  string `json:"server"`
	Variant string `json:"variant"`
	Status  string `json:"status"`
}

func statusWord(s mcpdriftv1.Status) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}

// events streams verdicts as server-sent events ("verdict", JSON Event)
// until the client leaves or the console shuts down.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	_, ok, err := c.caller(r)
	if err != nil {
		c.sessionsDown(w, r, err)
		return
	}
	if !ok {
		c.refusedBearer(r)
		c.fail(w, r, nil, http.StatusUnauthorized, "unauthenticated", "log in, or send a valid bearer token")
		return
	}
	if c.d.Follow == nil {
		c.fail(w, r, nil, http.StatusNotImplemented, "unavailable", "this server does not stream verdicts")
		return
	}
	ch := make(chan Event, 256)
	stop, err := c.d.Follow(func(raw []byte) {
		var v mcpdriftv1.Verdict
		if err := bus.UnmarshalJSON(raw, &v); err != nil {
			return
		}
		select {
		case ch <- Event{Tenant: v.Tenant, Server: v.Server, Variant: v.Variant, Status: statusWord(v.Status)}:
		default: // a slow page misses events; its next refresh catches up
		}
	})
	if err != nil {
		c.fail(w, r, nil, http.StatusServiceUnavailable, "unavailable", "subscribing to verdicts: "+err.Error())
		return
	}
	defer stop()
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	// The subscription is in place: say so, so that a page (and a test)
	// knows every later verdict reaches it.
	_, _ = w.Write([]byte("retry: 3000\nevent: ready\ndata: {}\n\n"))
	if fl != nil {
		fl.Flush()
	}
	keep := time.NewTicker(25 * time.Second)
	defer keep.Stop()
	for {
		var msg []byte
		select {
		case <-r.Context().Done():
			return
		case <-c.quit:
			return
		case <-keep.C:
			msg = []byte(": keep-alive\n\n")
		case e := <-ch:
			data, _ := json.Marshal(e)
			msg = append(append([]byte("event: verdict\ndata: "), data...), "\n\n"...)
		}
		if _, err := w.Write(msg); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

// ---- activity ----

// Activity is one line of the timeline: a verdict or an admin action.
type Activity struct {
	AtMs     int64
	Type     string // "verdict" or "admin"
	Tenant   string
	Server   string
	Variant  string
	What     string // the status, or the action
	Previous string
	Actor    string
	Ok       bool
	Code     string // the reason code, or the refusal's code
	Detail   string
	Hash     string
}

type activityView struct {
	Items       []Activity
	Unavailable string
	Limit       int
	// Audit are the audit queries' answers, when ClickHouse is configured.
	Audit      []AuditTable
	AuditOff   bool
	Since      string
	SinceLinks []sinceLink
}

type sinceLink struct {
	Label, Href string
	On          bool
}

// AuditTable is one audit query's answer, drawn.
type AuditTable struct {
	Name, Help string
	Columns    []string
	Rows       [][]AuditCell
	Error      string
}

// AuditCell is one value; a count gets a bar (a meter) scaled to the
// column's largest.
type AuditCell struct {
	Text    string
	Bar     bool
	N, Max  float64
	Numeric bool
}

// sinces are the periods the audit tables can cover.
var sinces = []struct{ label, value string }{{"24 hours", "24h"}, {"7 days", "168h"}, {"30 days", "720h"}, {"all time", "0"}}

func (c *Console) auditTables(ctx context.Context, since time.Duration) []AuditTable {
	sinceMs := int64(0)
	if since > 0 {
		sinceMs = c.d.Now().Add(-since).UnixMilli()
	}
	var out []AuditTable
	for _, q := range auditq.Queries {
		t := AuditTable{Name: q.Name, Help: q.Help}
		res, err := c.d.Audit(ctx, q, sinceMs)
		if err != nil {
			t.Error = err.Error()
			out = append(out, t)
			continue
		}
		t.Columns = res.Columns
		maxOf := make([]float64, len(res.Columns))
		for _, r := range res.Rows {
			for i, v := range r {
				if n, ok := count(v); ok {
					maxOf[i] = max(maxOf[i], n)
				}
			}
		}
		for _, r := range res.Rows {
			row := make([]AuditCell, len(r))
			for i, v := range r {
				cell := AuditCell{Text: auditq.Cell(res.Columns[i], v)}
				if n, ok := count(v); ok && !strings.HasSuffix(res.Columns[i], "_ms") {
					cell.Numeric, cell.N, cell.Max, cell.Bar = true, n, maxOf[i], maxOf[i] > 0
				}
				row[i] = cell
			}
			t.Rows = append(t.Rows, row)
		}
		out = append(out, t)
	}
	return out
}

// count reads an unsigned or signed integer column's value.
func count(v any) (float64, bool) {
	switch n := v.(type) {
	case uint64:
		return float64(n), true
	case uint32:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	}
	return 0, false
}

const activityLimit = 200

func (c *Console) activity(w http.ResponseWriter, r *http.Request, u *who) {
	av := &activityView{Limit: activityLimit, AuditOff: c.d.Audit == nil, Since: r.URL.Query().Get("since")}
	if av.Since == "" {
		av.Since = "720h"
	}
	since, err := time.ParseDuration(av.Since)
	if av.Since == "0" {
		since, err = 0, nil
	}
	if err != nil || since < 0 {
		c.fail(w, r, u, http.StatusBadRequest, "bad_request", "since must be a duration such as 24h or 720h, or 0 for all time")
		return
	}
	for _, s := range sinces {
		av.SinceLinks = append(av.SinceLinks, sinceLink{Label: s.label, Href: "/activity?since=" + s.value, On: s.value == av.Since})
	}
	if c.d.Audit != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		av.Audit = c.auditTables(ctx, since)
		cancel()
	}
	if c.d.JS == nil {
		av.Unavailable = "this drift service has no stream access for the timeline"
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		verdicts, err1 := recent(ctx, c.d.JS, bus.StreamVerdicts, activityLimit, func(m *jetstream.RawStreamMsg) (Activity, bool) {
			var v mcpdriftv1.Verdict
			if bus.UnmarshalJSON(m.Data, &v) != nil {
				return Activity{}, false
			}
			return Activity{AtMs: v.AtUnixMs, Type: "verdict", Tenant: v.Tenant, Server: v.Server, Variant: v.Variant,
				What: statusWord(v.Status), Previous: statusWord(v.PreviousStatus), Actor: v.Actor, Ok: true,
				Code: v.ReasonCode, Detail: v.Reason, Hash: v.LiveHash}, true
		})
		actions, err2 := recent(ctx, c.d.JS, bus.StreamAdmin, activityLimit, func(m *jetstream.RawStreamMsg) (Activity, bool) {
			if !strings.HasPrefix(m.Subject, bus.Prefix+".admin.") {
				return Activity{}, false // dead letters share the stream
			}
			var a mcpdriftv1.AdminAction
			if bus.UnmarshalJSON(m.Data, &a) != nil {
				return Activity{}, false
			}
			return Activity{AtMs: a.AtUnixMs, Type: "admin", Tenant: a.Tenant, Server: a.Server, Variant: a.Variant,
				What: a.Action, Actor: a.Actor, Ok: a.Ok, Code: a.ErrorCode, Detail: a.ErrorMessage, Hash: a.Hash}, true
		})
		if err := errors.Join(err1, err2); err != nil {
			av.Unavailable = "reading the streams: " + err.Error()
		}
		av.Items = append(verdicts, actions...)
		slices.SortStableFunc(av.Items, func(a, b Activity) int { return cmp.Compare(b.AtMs, a.AtMs) })
		if len(av.Items) > activityLimit {
			av.Items = av.Items[:activityLimit]
		}
	}
	c.renderFrame(w, r, http.StatusOK, "activity", &frame{Title: "Activity", User: u, Nav: "activity", Body: av})
}

// recent reads up to n of the newest messages of a stream, newest first.
func recent(ctx context.Context, js jetstream.JetStream, stream string, n int, f func(*jetstream.RawStreamMsg) (Activity, bool)) ([]Activity, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	var out []Activity
	// At most 4n messages are read: the admin stream also holds dead
	// letters, which are skipped.
	for seq, read := info.State.LastSeq, 0; seq >= 1 && seq >= info.State.FirstSeq && len(out) < n && read < 4*n; seq, read = seq-1, read+1 {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		if a, ok := f(m); ok {
			out = append(out, a)
		}
	}
	return out, nil
}
