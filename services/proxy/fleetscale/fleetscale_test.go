package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	if got.N != 100 || got.P50 != 50 || got.P99 != 99 || got.Max != 100 {
		t.Fatalf("summarize(1..100 ms) = %+v, want n 100, p50 50, p99 99, max 100", got)
	}
	if z := summarize(nil); z != (dist{}) {
		t.Fatalf("summarize(nil) = %+v, want zero", z)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("500x20, 2000x100")
	if err != nil || len(got) != 2 || got[1] != (size{2000, 100}) {
		t.Fatalf("parseSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "500", "0x1", "ax2"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q): no error", bad)
		}
	}
}

// TestManifestsHashApart: every simulated server's manifest, made from a
// real capture, parses and hashes differently from its neighbours', and its
// rug pull changes the hash.
func TestManifestsHashApart(t *testing.T) {
	ms, _, err := loadManifests("../../internal/surface/testdata/real")
	if err != nil {
		t.Fatal(err)
	}
	servers, proxies, tenants := layout(len(ms)+3, 6, 3, 2, ms)
	if len(tenants) != 3 || len(proxies) != 6 {
		t.Fatalf("layout: %d tenants, %d proxies", len(tenants), len(proxies))
	}
	seen := map[surface.Digest]string{}
	for _, s := range servers {
		if len(s.fronts) != 2 {
			t.Fatalf("server %s fronted by %d proxies, want 2", s.id, len(s.fronts))
		}
		for _, p := range s.fronts {
			if p.tenant != s.tenant {
				t.Fatalf("server %s of %s fronted by a proxy of %s", s.id, s.tenant, p.tenant)
			}
		}
		for _, m := range [][]byte{s.manifest, rugPull(s.manifest)} {
			sf, err := surface.Parse(m, surface.Options{})
			if err != nil {
				t.Fatalf("server %s: %v", s.id, err)
			}
			if other, dup := seen[sf.Hash]; dup {
				t.Fatalf("server %s hashes like %s", s.id, other)
			}
			seen[sf.Hash] = s.id
		}
	}
}

func TestTenantUsers(t *testing.T) {
	auth, err := os.ReadFile("../../../deploy/nats/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{passwords: map[string]string{}}
	out, err := c.tenantUsers(string(auth), []string{"t07"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROXY_T07 = {", `"mcpdrift.obs.list.t07.*"`, `"$JS.API.CONSUMER.CREATE.KV_mcpdrift_status.*.$KV.mcpdrift_status.t07.>"`,
		`"_INBOX_proxy_t07.>"`, "{ user = proxy-t07, password = ", "permissions = $PROXY_T07 }", "permissions = $PROXY_DEFAULT }"} {
		if !strings.Contains(out, want) {
			t.Errorf("auth with tenant t07 lacks %q", want)
		}
	}
}

// TestLeafUsers: the hub gets a leaf user per tenant, its permissions a
// copy of LEAF_DEFAULT confined to the tenant (its mirrors' deliveries
// and its proxies' inbox included).
func TestLeafUsers(t *testing.T) {
	auth, err := os.ReadFile("../../../deploy/nats/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{passwords: map[string]string{}}
	out, err := c.tenantUsers(string(auth), []string{"t07"})
	if err != nil {
		t.Fatal(err)
	}
	blk, _, err := confBlock(out, "LEAF_T07")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"mcpdrift.obs.list.t07.*"`, `"mcpdrift.mirror.t07.>"`, `"_INBOX_proxy_t07.>"`,
		`"$JS.hub.API.CONSUMER.CREATE.KV_mcpdrift_policy.*.$KV.mcpdrift_policy.t07"`} {
		if !strings.Contains(blk, want) {
			t.Errorf("LEAF_T07 lacks %s:\n%s", want, blk)
		}
	}
	if strings.Contains(blk, "default") {
		t.Errorf("LEAF_T07 still names tenant default:\n%s", blk)
	}
	if !strings.Contains(out, "{ user = leaf-t07, password = ") || c.passwords["leaf-t07"] == "" {
		t.Error("no user leaf-t07")
	}
}

// TestSiteAccounts: a leaf serving two tenants runs an account per tenant
// with its own proxy and admin users and PROXY_<T> permissions.
func TestSiteAccounts(t *testing.T) {
	auth, err := os.ReadFile("../../../deploy/nats/leaf/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := &site{tenants: []string{"t01", "t02"}, passwords: map[string]string{}}
	out, err := s.tenantAccounts(string(auth))
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range s.tenants {
		acct, _, err := confBlock(out, "TENANT_"+strings.ToUpper(tn))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"user = admin-" + tn, "user = proxy-" + tn, "permissions = $PROXY_" + strings.ToUpper(tn) + " }"} {
			if !strings.Contains(acct, want) {
				t.Errorf("account of %s lacks %q:\n%s", tn, want, acct)
			}
		}
		if _, _, err := confBlock(out, "PROXY_"+strings.ToUpper(tn)); err != nil {
			t.Error(err)
		}
	}
	if strings.Contains(out, "TENANT_DEFAULT {") || strings.Contains(out, "PROXY_DEFAULT = {") || strings.Contains(out, "$PROXY_DEFAULT") || strings.Contains(out, "$MCPDRIFT_NATS_PROXY_PASSWORD") {
		t.Errorf("the default account is left:\n%s", out)
	}
	if got := assignSites([]string{"a", "b", "c"}, 2); len(got) != 2 || len(got[0]) != 2 || got[1][0] != "b" {
		t.Errorf("assignSites = %v", got)
	}
}
