package streamhttp

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// DNS rebinding: a web page whose name resolves to the proxy's address
// speaks to the proxy from the agent's browser; the browser names the
// page's host in Host and its origin in Origin. The proxy's listener
// checks both against allowlists (HostPolicy) before anything else, and
// refuses others with 403 and a coded JSON-RPC error.
//
// The upstream's own protection is not weakened: the upstream sees the
// Host it would see from a client that connects to it directly (its own
// authority, from --upstream: a Host the proxy copied from the client
// would name the proxy, which an upstream that checks Host refuses, and
// would make the upstream's check a check of the proxy's name), and the
// client's Origin and Sec-Fetch-* unchanged, so an upstream that refuses
// an origin directly refuses it through the proxy too.
// docs/transparency.md has the decision.

// CodeHostNotAllowed and CodeOriginNotAllowed: a request whose Host or
// Origin is not in the listener's allowlist (HTTP 403).
const (
	CodeHostNotAllowed   session.Code = "host_not_allowed"
	CodeOriginNotAllowed session.Code = "origin_not_allowed"
)

// HostPolicy is what the proxy's listener accepts in Host and Origin.
type HostPolicy struct {
	// Hosts are the Host values accepted: host:port, or a host alone for
	// any port; "*" accepts any (no check). Empty: any.
	Hosts []string
	// Origins are the Origin values accepted (scheme://host[:port]); a
	// request without Origin (not from a browser) is not checked. "*"
	// accepts any. Empty: a request that carries an Origin is refused.
	Origins []string
}

// LoopbackPolicy is the default of a listener on a loopback address:
// localhost, 127.0.0.1 and [::1] with the listener's port, as Host and as
// http:// origins. ok is false when addr is not a loopback address.
func LoopbackPolicy(addr net.Addr) (p HostPolicy, ok bool) {
	tcp, isTCP := addr.(*net.TCPAddr)
	if !isTCP || !tcp.IP.IsLoopback() {
		return HostPolicy{}, false
	}
	port := fmt.Sprint(tcp.Port)
	for _, h := range []string{"localhost", "127.0.0.1", "[::1]"} {
		p.Hosts = append(p.Hosts, h+":"+port)
		p.Origins = append(p.Origins, "http://"+h+":"+port)
	}
	return p, true
}

// Validate checks every entry.
func (p HostPolicy) Validate() error {
	var errs []error
	for _, h := range p.Hosts {
		if h != "*" && (h == "" || strings.ContainsAny(h, "/ ") || strings.Contains(h, "://")) {
			errs = append(errs, fmt.Errorf("allowed host %q: want host or host:port", h))
		}
	}
	for _, o := range p.Origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("allowed origin %q: want scheme://host[:port]", o))
		}
	}
	return errors.Join(errs...)
}

// hostAllowed reports a Host value in the list.
func (p HostPolicy) hostAllowed(host string) bool {
	if len(p.Hosts) == 0 || slices.Contains(p.Hosts, "*") {
		return true
	}
	host = strings.ToLower(host)
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
		if strings.Contains(h, ":") {
			name = "[" + h + "]"
		}
	}
	for _, a := range p.Hosts {
		a = strings.ToLower(a)
		if a == host || a == name {
			return true
		}
	}
	return false
}

// originAllowed reports an Origin value in the list.
func (p HostPolicy) originAllowed(origin string) bool {
	if slices.Contains(p.Origins, "*") {
		return true
	}
	origin = strings.TrimSuffix(strings.ToLower(origin), "/")
	for _, a := range p.Origins {
		if strings.TrimSuffix(strings.ToLower(a), "/") == origin {
			return true
		}
	}
	return false
}

// GuardHosts serves next only the requests whose Host and Origin p
// accepts; the others get 403 with a JSON-RPC error whose data names the
// code (host_not_allowed, origin_not_allowed).
func GuardHosts(p HostPolicy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.hostAllowed(r.Host) {
			httpError(w, nil, CodeHostNotAllowed,
				fmt.Sprintf("Host %q is not one this proxy serves (--allowed-hosts): a DNS rebinding attempt is refused", r.Host))
			return
		}
		if origins := r.Header.Values("Origin"); len(origins) > 1 || (len(origins) == 1 && !p.originAllowed(origins[0])) {
			httpError(w, nil, CodeOriginNotAllowed,
				fmt.Sprintf("Origin %q is not one this proxy serves (--allowed-origins)", strings.Join(origins, ", ")))
			return
		}
		next.ServeHTTP(w, r)
	})
}
