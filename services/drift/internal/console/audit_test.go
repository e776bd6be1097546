package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(func() int { return chtest.Main(m) })) }

// TestActivityAuditTables runs the real audit sink into a real ClickHouse
// server, has a rug pull approved through the console, and reads the audit
// queries' answers on the activity page.
func TestActivityAuditTables(t *testing.T) {
	ch := chtest.Shared(t)
	db := ch.Database(t)
	conn, err := auditq.Open(ch.Addr, "default", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s := startStackWith(t, func(d *Deps) {
		d.Audit = func(ctx context.Context, q auditq.Query, sinceMs int64) (*auditq.Result, error) {
			return auditq.Run(ctx, conn, db, q, sinceMs)
		}
	})
	var logs syncbuf.Buffer
	cmd := exec.Command(filepath.Join(cmdtest.Dir(t, "audit"), "audit"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+s.b.ClientURL(), "MCPDRIFT_CLICKHOUSE_ADDR="+ch.Addr,
		"MCPDRIFT_AUDIT_DATABASE="+db, "MCPDRIFT_AUDIT_BATCH_AGE=20ms", "MCPDRIFT_BUS_SETUP=check")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	_, h2 := s.rugPull()
	c := s.client()
	bearer := map[string]string{"Authorization": "Bearer " + writeSecret}
	must(t, c.do(http.MethodPost, "/servers/acme/notes/approve", url.Values{"hash": {h2}, "variant": {"v0"}}, bearer), http.StatusSeeOther)

	var page string
	poll.Eventually(t, 60*time.Second, func() error {
		a := c.do(http.MethodGet, "/activity?since=24h", nil, bearer)
		if a.code != http.StatusOK {
			return fmt.Errorf("activity: %d %.300s", a.code, a.body)
		}
		page = a.body
		for _, want := range []string{
			`data-query="drifts"`, `<span class="frag">notes</span>`, `<meter min="0" max="1" value="1"></meter>`,
			`data-query="approvals"`, `<span class="frag">alice</span>`,
			`data-query="approval-time"`,
			`data-query="drifts-per-day"`, `<span class="frag">` + time.Now().UTC().Format("2006-01-02") + `</span>`,
		} {
			if !strings.Contains(page, want) {
				return fmt.Errorf("the activity page lacks %q yet (audit log: %s)", want, logs.String())
			}
		}
		return nil
	})
	lacks(t, page, `class="error"`, "audit-off")
	must(t, c.do(http.MethodGet, "/activity?since=yesterday", nil, bearer), http.StatusBadRequest)
}

// TestActivityWithoutClickHouse: the page says the queries are not there.
func TestActivityWithoutClickHouse(t *testing.T) {
	s := startStack(t)
	a := s.client().do(http.MethodGet, "/activity", nil, map[string]string{"Authorization": "Bearer " + readSecret})
	must(t, a, http.StatusOK)
	contains(t, a.body, `id="audit-off"`, "ClickHouse is not configured")
}
