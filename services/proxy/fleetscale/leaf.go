package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
)

// The sites of the simulation (--sites): deploy/nats/leaf/leaf.conf as one
// nats-server process per site, linked to the hub's leafnodes ports. A
// site serves one or more tenants: as deploy/nats/leaf/auth.conf says, its
// leaf node runs one account per tenant (TENANT_<T>, a copy of
// TENANT_DEFAULT with that tenant's proxy and admin users) and one remote
// per tenant, bound to the hub as that tenant's leaf user (leaf-<t>,
// natscluster.go). Each tenant's mirrors are created in its account with
// bus.SetupSite, as `driftctl bus-setup --site --tenant T` does; the
// site's proxies connect to the leaf, not the hub.

// site is one running leaf node.
type site struct {
	name       string // leaf-sNN, also its JetStream domain's stem
	tenants    []string
	client     int
	http       int
	store, log string
	passwords  map[string]string // user -> password (admin-<t>, proxy-<t>)
	proc       *proc
}

// assignSites gives tenant i to site i mod n (n at most the tenants).
func assignSites(tenants []string, n int) [][]string {
	n = min(n, len(tenants))
	out := make([][]string, n)
	for i, t := range tenants {
		out[i%n] = append(out[i%n], t)
	}
	return out
}

// startSites starts a leaf node per group of tenants, waits until each
// has a link to the hub per tenant, and creates every tenant's mirrors.
func startSites(ctx context.Context, deployDir, bin, dir string, hub *cluster, groups [][]string) ([]*site, error) {
	var sites []*site
	stopAll := func() {
		for _, s := range sites {
			s.stop()
		}
	}
	for i, tenants := range groups {
		s, err := startSite(deployDir, bin, dir, hub, i+1, tenants)
		if err != nil {
			stopAll()
			return nil, err
		}
		sites = append(sites, s)
	}
	for _, s := range sites {
		if err := s.setup(ctx); err != nil {
			stopAll()
			return nil, err
		}
	}
	return sites, nil
}

func startSite(deployDir, bin, dir string, hub *cluster, n int, tenants []string) (*site, error) {
	s := &site{name: fmt.Sprintf("leaf-s%02d", n), tenants: tenants, passwords: map[string]string{}}
	sdir := filepath.Join(dir, s.name)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return nil, err
	}
	auth, err := os.ReadFile(filepath.Join(deployDir, "leaf", "auth.conf"))
	if err != nil {
		return nil, err
	}
	siteAuth, err := s.tenantAccounts(string(auth))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(sdir, "auth.conf"), []byte(siteAuth), 0o600); err != nil {
		return nil, err
	}
	ports, err := chtest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	s.client, s.http = ports[0], ports[1]
	s.store, s.log = filepath.Join(sdir, "store"), filepath.Join(dir, s.name+".log")
	// One remote per tenant, to every hub node's leafnodes port, as the
	// tenant's leaf user.
	var remotes strings.Builder
	for _, t := range tenants {
		var urls []string
		for _, hn := range hub.nodes {
			u := url.URL{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", hn.leaf), User: url.UserPassword("leaf-"+t, hub.passwords["leaf-"+t])}
			urls = append(urls, fmt.Sprintf("%q", u.String()))
		}
		fmt.Fprintf(&remotes, "    { urls = [%s], account = TENANT_%s }\n", strings.Join(urls, ", "), strings.ToUpper(t))
	}
	conf, err := template(filepath.Join(deployDir, "leaf", "leaf.conf"), [][2]string{
		{`server_name = leaf-site1`, "server_name = " + s.name},
		{`domain = site1`, "domain = " + strings.ReplaceAll(s.name, "-", "")},
		{`listen = "0.0.0.0:4222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, s.client)},
		{`http = "0.0.0.0:8222"`, fmt.Sprintf(`http = "127.0.0.1:%d"`, s.http)},
		{`store_dir = "/var/lib/nats"`, fmt.Sprintf(`store_dir = %q`, s.store)},
		{"    { urls = [$MCPDRIFT_NATS_HUB_URL], account = TENANT_DEFAULT }\n", remotes.String()},
	})
	if err != nil {
		return nil, err
	}
	cf := filepath.Join(sdir, "leaf.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	// sys keeps the shipped variable; the tenants' users have their hashes
	// written in (tenantAccounts).
	h, err := bcrypt.GenerateFromPassword([]byte(randomHex(16)), bcrypt.MinCost)
	if err != nil {
		return nil, err
	}
	if s.proc, err = startProc(s.name, bin, []string{"-c", cf}, []string{"MCPDRIFT_NATS_SYS_PASSWORD=" + string(h)}, s.log); err != nil {
		return nil, err
	}
	return s, nil
}

// tenantAccounts rewrites the shipped leaf auth.conf for the site's
// tenants: PROXY_<T> for each (a copy of PROXY_DEFAULT), and in accounts
// one TENANT_<T> per tenant (a copy of TENANT_DEFAULT with users
// admin-<t> and proxy-<t>: user names are unique on a server).
func (s *site) tenantAccounts(auth string) (string, error) {
	proxyBlock, proxyEnd, err := confBlock(auth, "PROXY_DEFAULT")
	if err != nil {
		return "", fmt.Errorf("leaf auth.conf: %w; update fleetscale's template", err)
	}
	acct, acctEnd, err := confBlock(auth, "TENANT_DEFAULT")
	if err != nil {
		return "", fmt.Errorf("leaf auth.conf: %w; update fleetscale's template", err)
	}
	acctStart := strings.Index(auth, acct)
	var perms, accts strings.Builder
	for _, t := range s.tenants {
		perms.WriteString("\n" + forTenant(proxyBlock, "PROXY", t) + "\n")
		a := strings.Replace(acct, "TENANT_DEFAULT", "TENANT_"+strings.ToUpper(t), 1)
		for _, u := range []string{"admin", "proxy"} {
			pw := randomHex(16)
			s.passwords[u+"-"+t] = pw
			h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
			if err != nil {
				return "", err
			}
			old := fmt.Sprintf("user = %s, password = $MCPDRIFT_NATS_%s_PASSWORD", u, strings.ToUpper(u))
			if !strings.Contains(a, old) {
				return "", fmt.Errorf("leaf auth.conf: %q not found; update fleetscale's template", old)
			}
			a = strings.Replace(a, old, fmt.Sprintf("user = %s-%s, password = %q", u, t, h), 1)
		}
		a = strings.Replace(a, "$PROXY_DEFAULT", "$PROXY_"+strings.ToUpper(t), 1)
		accts.WriteString(a + "\n  ")
	}
	// PROXY_DEFAULT gives way to the copies: nats-server refuses a
	// variable that nothing uses.
	proxyStart := strings.Index(auth, proxyBlock)
	return auth[:proxyStart] + strings.TrimSpace(perms.String()) + auth[proxyEnd:acctStart] + strings.TrimSpace(accts.String()) + auth[acctEnd:], nil
}

// url is the leaf's client URL with a user's credentials.
func (s *site) url(user string) string {
	u := url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", s.client), User: url.UserPassword(user, s.passwords[user])}
	return u.String()
}

// links is how many leaf connections the node's monitoring reports.
func (s *site) links() (int, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/leafz", s.http))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var z struct {
		Leafs int `json:"leafnodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		return 0, err
	}
	return z.Leafs, nil
}

// setup waits for the site's links (one per tenant) and creates each
// tenant's mirrors as its site admin (bus.SetupSite, one replica).
func (s *site) setup(ctx context.Context) error {
	var last string
	if !waitFor(60*time.Second, func() bool {
		if s.proc.exited() {
			return true
		}
		n, err := s.links()
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d of %d links", n, len(s.tenants))
		return n == len(s.tenants)
	}) || s.proc.exited() {
		return fmt.Errorf("leaf node %s: not linked to the hub within 60s (%s; log %s)", s.name, last, s.log)
	}
	for _, t := range s.tenants {
		nc, err := bus.Connect(ctx, bus.Conn{URL: s.url("admin-" + t), Name: "mcpdrift-site-admin-" + s.name + "-" + t}, zerolog.Nop())
		if err != nil {
			return fmt.Errorf("leaf node %s, tenant %s: %w", s.name, t, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return err
		}
		var serr error
		ok := waitFor(60*time.Second, func() bool {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, serr = bus.SetupSite(sctx, js, bus.SiteConfig{Tenant: t, Replicas: 1})
			return serr == nil
		})
		nc.Close()
		if !ok {
			return fmt.Errorf("leaf node %s: the mirrors of tenant %s: %w", s.name, t, serr)
		}
	}
	return nil
}

// statusConsumers counts the consumers on the site's status mirrors (the
// site's proxies' watches), over its tenants' accounts, and the status
// mirrors that are active (each one consumer on the hub's status stream:
// a direct consumer, which the hub's stream info does not count).
func (s *site) statusConsumers(ctx context.Context) (watches, mirrors int) {
	for _, t := range s.tenants {
		nc, err := bus.Connect(ctx, bus.Conn{URL: s.url("admin-" + t), Name: "mcpdrift-site-admin-" + s.name + "-" + t}, zerolog.Nop())
		if err != nil {
			continue
		}
		if js, err := jetstream.New(nc); err == nil {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			if st, err := js.Stream(c, "KV_"+bus.BucketStatus); err == nil {
				info := st.CachedInfo()
				watches += info.State.Consumers
				if info.Mirror != nil && info.Mirror.Active >= 0 {
					mirrors++
				}
			}
			cancel()
		}
		nc.Close()
	}
	return watches, mirrors
}

func (s *site) stop() {
	if s.proc != nil {
		s.proc.stop(15 * time.Second)
	}
}
