package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// OAuth through the proxy (MCP authorization, RFC 9728 protected-resource
// metadata). A client that connects to http://PROXY/ID/mcp must find
// metadata that names that URL as the resource, or it refuses the server
// (or asks the authorization server for a token for another resource).
// So the proxy:
//   - answers /.well-known/oauth-protected-resource/ID/mcp (and the root
//     form when it fronts one server) with the upstream's metadata,
//     fetched and validated, "resource" rewritten to the proxy's URL;
//   - rewrites resource_metadata in a 401's WWW-Authenticate to that URL;
//   - answers the authorization-server discovery clients try at the
//     proxy's origin (oauth-authorization-server, openid-configuration;
//     a 2025-03-26 client looks there when the server publishes no
//     protected-resource metadata) with the upstream origin's, fetched and
//     validated (its issuer must be the upstream's origin), and relays the
//     2025-03-26 fallback endpoints /authorize, /token and /register there
//     (SDK clients follow no redirect on these); a client that found the
//     authorization server in the metadata talks to it directly, as it
//     would without the proxy;
//   - forwards the client's Authorization header unchanged.
// docs/transparency.md describes the flow, docs/threat-model.md the
// trade-offs.

// CodeOAuthMetadata: the upstream's protected-resource metadata could not
// be fetched, or was refused (wrong origin, size, type, or a resource that
// is not the upstream's): HTTP 502, fail closed. CodeNoMetadata: the
// upstream publishes none (404).
const (
	CodeOAuthMetadata session.Code = "oauth_metadata_invalid"
	CodeNoMetadata    session.Code = "oauth_metadata_missing"
)

const (
	protectedResourcePath = "/.well-known/oauth-protected-resource"
	// maxMetadata bounds a metadata document the proxy reads.
	maxMetadata = 64 << 10
	// metadataTimeout bounds a metadata fetch.
	metadataTimeout = 5 * time.Second
)

var (
	authServerPaths = []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"}
	// authFallbackPaths are the endpoints a 2025-03-26 client uses at the
	// server's origin when it finds no authorization-server metadata.
	authFallbackPaths = []string{"/authorize", "/token", "/register"}
	// resourceMetadataParam is the resource_metadata parameter of a
	// WWW-Authenticate challenge (RFC 9728 §5.1), quoted or a token.
	resourceMetadataParam = regexp.MustCompile(`(?i)(\bresource_metadata\s*=\s*)("(?:[^"\\]|\\.)*"|[^\s,]+)`)
)

// OAuthRoutes are the http.ServeMux patterns of the OAuth discovery routes
// the proxy answers at its origin (oauthRoute): public metadata and the
// authorization server's fallback endpoints, which clients reach without
// the agent's own credentials.
var OAuthRoutes = []string{"/.well-known/", "/authorize", "/token", "/register"}

// oauthRoute answers the OAuth discovery routes at the proxy's origin;
// false when r is not one of them.
func (p *Proxy) oauthRoute(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	if rest, ok := wellKnown(path, protectedResourcePath); ok {
		if f := p.frontFor(rest); f != nil {
			f.protectedResource(w, r)
		} else {
			httpError(w, nil, CodeUnknownServer, "no MCP server behind this proxy at "+strings.TrimPrefix(path, protectedResourcePath))
		}
		return true
	}
	for _, prefix := range authServerPaths {
		if rest, ok := wellKnown(path, prefix); ok {
			f := p.frontFor(rest)
			if f == nil {
				httpError(w, nil, CodeUnknownServer, "no MCP server behind this proxy at "+strings.TrimPrefix(path, prefix))
				return true
			}
			// The server's own path in place of the proxy's: RFC 8414's
			// path form names the issuer's path.
			suffix := ""
			if rest != "" {
				suffix = f.upstreamURL().Path
			}
			f.relayUpstream(w, r, prefix+strings.TrimSuffix(suffix, "/"), f.authServerMetadata)
			return true
		}
	}
	if slices.Contains(authFallbackPaths, path) && p.fronts[strings.TrimPrefix(path, "/")] == nil {
		if f := p.frontFor(""); f != nil {
			f.relayUpstream(w, r, path, nil)
			return true
		}
	}
	return false
}

// wellKnown reports a path that is prefix or prefix/REST, with "/REST".
func wellKnown(path, prefix string) (string, bool) {
	if path == prefix {
		return "", true
	}
	if rest, ok := strings.CutPrefix(path, prefix); ok && strings.HasPrefix(rest, "/") {
		return rest, true
	}
	return "", false
}

// frontFor is the server a well-known path names: "/ID/mcp" (or "/ID/sse",
// "/ID"), or "" for the only server behind the proxy.
func (p *Proxy) frontFor(rest string) *front {
	if rest == "" {
		if len(p.fronts) != 1 {
			return nil
		}
		for _, f := range p.fronts {
			return f
		}
	}
	id, route, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	f := p.fronts[id]
	if f == nil || (route != "" && route != f.route()) {
		return nil
	}
	return f
}

// route is the proxy's route of the server: "mcp" (Streamable HTTP) or
// "sse" (HTTP+SSE).
func (f *front) route() string {
	if f.up.URL != "" {
		return "mcp"
	}
	return "sse"
}

// upstreamURL is the server's endpoint.
func (f *front) upstreamURL() *url.URL {
	raw := f.up.URL
	if raw == "" {
		raw = f.up.SSEURL
	}
	u, _ := url.Parse(raw) // validated by New
	return u
}

// publicURL is the URL the client connected to: the proxy's endpoint of
// the server, on the Host the listener accepted.
func (f *front) publicURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/" + f.up.ID + "/" + f.route()
}

// metadataURL is where the proxy publishes the server's protected-resource
// metadata.
func (f *front) metadataURL(r *http.Request) string {
	u, _ := url.Parse(f.publicURL(r))
	return u.Scheme + "://" + u.Host + protectedResourcePath + u.Path
}

// challenges rewrites the resource_metadata of each WWW-Authenticate
// challenge in vs (in place) to the proxy's metadata URL, and remembers the
// upstream's URL when it is on the upstream's origin (the proxy fetches
// nothing elsewhere).
func (f *front) challenges(r *http.Request, vs []string) {
	mine := f.metadataURL(r)
	for i, v := range vs {
		vs[i] = resourceMetadataParam.ReplaceAllStringFunc(v, func(m string) string {
			sub := resourceMetadataParam.FindStringSubmatch(m)
			theirs := strings.Trim(sub[2], `"`)
			if u, err := url.Parse(theirs); err == nil && sameOrigin(u, f.upstreamURL()) {
				f.mu.Lock()
				f.advertised = u.String()
				f.mu.Unlock()
			}
			return sub[1] + `"` + mine + `"`
		})
	}
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// protectedResource answers the server's protected-resource metadata at
// the proxy: the upstream's (from the URL its challenge named, else its
// path-aware and then its root well-known URL), validated, with resource
// rewritten to the proxy's URL of the server.
func (f *front) protectedResource(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpError(w, nil, CodeMethodNotAllowed, r.Method+" is not a method of this route")
		return
	}
	up := f.upstreamURL()
	origin := up.Scheme + "://" + up.Host
	f.mu.Lock()
	candidates := []string{f.advertised}
	f.mu.Unlock()
	candidates = append(candidates, origin+protectedResourcePath+strings.TrimSuffix(up.Path, "/"), origin+protectedResourcePath)
	var doc map[string]json.RawMessage
	var err error
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if doc, err = f.fetchMetadata(r.Context(), c); !errors.Is(err, errNoMetadata) {
			break
		}
	}
	switch {
	case errors.Is(err, errNoMetadata):
		httpError(w, nil, CodeNoMetadata, "the MCP server behind this proxy publishes no protected-resource metadata")
		return
	case err != nil:
		f.log.Warn().Err(err).Str("code", string(CodeOAuthMetadata)).Msg("protected-resource metadata refused")
		httpError(w, nil, CodeOAuthMetadata, "the MCP server's protected-resource metadata was refused: "+err.Error())
		return
	}
	doc["resource"], _ = json.Marshal(f.publicURL(r))
	body, err := json.Marshal(doc)
	if err != nil {
		httpError(w, nil, CodeOAuthMetadata, "the MCP server's protected-resource metadata cannot be re-encoded")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
}

var errNoMetadata = errors.New("no metadata there (404)")

// fetchMetadata fetches a protected-resource metadata document from the
// upstream's origin and validates it: 200, JSON, at most maxMetadata, an
// object whose resource is the upstream's endpoint (or origin: RFC 9728
// §3.3, the resource is the URL the metadata was published for) and whose
// authorization_servers, if any, are http(s) URLs. No redirect is followed.
func (f *front) fetchMetadata(ctx context.Context, target string) (map[string]json.RawMessage, error) {
	up := f.upstreamURL()
	tu, err := url.Parse(target)
	if err != nil || !sameOrigin(tu, up) {
		return nil, fmt.Errorf("metadata URL %q is not on the server's origin", target)
	}
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	resp, err := f.send(ctx, http.MethodGet, target, http.Header{"Accept": {"application/json"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", target, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errNoMetadata
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("fetching %s: HTTP %d", target, resp.StatusCode)
	}
	if m, _ := mediaOf(resp.Header); m != mediaJSON {
		return nil, fmt.Errorf("%s is not JSON (%q)", target, resp.Header.Get("Content-Type"))
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", target, err)
	}
	if len(raw) > maxMetadata {
		return nil, fmt.Errorf("%s is over %d bytes", target, maxMetadata)
	}
	doc, err := oneObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", target, err)
	}
	var resource string
	if err := json.Unmarshal(doc["resource"], &resource); err != nil || resource == "" {
		return nil, fmt.Errorf("%s names no resource", target)
	}
	ru, err := url.Parse(resource)
	if err != nil || !sameOrigin(ru, up) || !strings.HasPrefix(strings.TrimSuffix(up.Path, "/")+"/", strings.TrimSuffix(ru.Path, "/")+"/") {
		return nil, fmt.Errorf("%s names resource %q, not the server %s", target, resource, up)
	}
	if as, ok := doc["authorization_servers"]; ok {
		var list []string
		if err := json.Unmarshal(as, &list); err != nil {
			return nil, fmt.Errorf("%s: authorization_servers is not a list of URLs", target)
		}
		for _, a := range list {
			if u, err := url.Parse(a); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return nil, fmt.Errorf("%s: authorization server %q is not an http(s) URL", target, a)
			}
		}
	}
	return doc, nil
}

// relayUpstream answers r with the upstream origin's answer at path (and
// r's query): the method, a body of at most maxMetadata and the headers an
// OAuth exchange needs go there; the status, those headers (Location
// unchanged on the fallback endpoints, where it names the client's
// redirect URI; never on metadata) and a body of at most
// maxMetadata come back. No redirect is followed. check, when set, judges
// a 200 answer's body; one it refuses is not passed on (502).
func (f *front) relayUpstream(w http.ResponseWriter, r *http.Request, path string, check func([]byte) error) {
	up := f.upstreamURL()
	target := url.URL{Scheme: up.Scheme, Host: up.Host, Path: path, RawQuery: r.URL.RawQuery}
	body, err := readAll(r.Body, maxMetadata)
	if err != nil {
		refuseMessage(w, session.MessageTooLarge, session.TooLarge(maxMetadata))
		return
	}
	h := http.Header{}
	for _, k := range []string{"Content-Type", "Accept", "Authorization"} {
		if v := r.Header.Values(k); len(v) > 0 {
			h[k] = slices.Clone(v)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), metadataTimeout)
	defer cancel()
	var rd []byte
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rd = body
	}
	resp, err := f.send(ctx, r.Method, target.String(), h, rd)
	if err != nil {
		httpError(w, nil, CodeUpstreamUnreachable, "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata+1))
	if err != nil || len(ans) > maxMetadata {
		httpError(w, nil, CodeOAuthMetadata, fmt.Sprintf("the MCP server's answer at %s is unreadable or over %d bytes", path, maxMetadata))
		return
	}
	if check != nil && resp.StatusCode == http.StatusOK {
		if err := check(ans); err != nil {
			f.log.Warn().Err(err).Str("code", string(CodeOAuthMetadata)).Str("path", path).Msg("authorization server metadata refused")
			httpError(w, nil, CodeOAuthMetadata, "the MCP server's authorization server metadata was refused: "+err.Error())
			return
		}
	}
	for _, k := range []string{"Content-Type", "Location", "Cache-Control", "Pragma", "WWW-Authenticate"} {
		v := resp.Header.Values(k)
		if len(v) == 0 {
			continue
		}
		if k == "Location" && check != nil {
			// Metadata is fetched, never redirected: a Location there could
			// name another upstream's route at the proxy's origin, whose
			// metadata the client would then take for this server's.
			f.stripped(StripLocation, len(v))
			continue
		}
		if k == "WWW-Authenticate" && check != nil {
			// A Basic or Digest challenge would open a protection space for
			// the proxy's whole origin (isolate.go); the fallback endpoints,
			// served only for a proxy of one server, keep theirs.
			var left int
			if v, left = bearerChallenges(v); len(v) == 0 {
				f.stripped(StripAuthChallenge, left)
				continue
			}
			f.stripped(StripAuthChallenge, left)
		}
		w.Header()[k] = slices.Clone(v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(ans)
}

// authServerMetadata judges authorization-server metadata the proxy
// answers at its own origin (RFC 8414): one JSON object whose issuer is the
// upstream's origin, the only authorization server a client looks for at
// the server's origin.
func (f *front) authServerMetadata(b []byte) error {
	doc, err := oneObject(b)
	if err != nil {
		return err
	}
	var issuer string
	if err := json.Unmarshal(doc["issuer"], &issuer); err != nil {
		return errors.New("no issuer")
	}
	if u, err := url.Parse(issuer); err != nil || !sameOrigin(u, f.upstreamURL()) {
		return fmt.Errorf("issuer %q is not the server's origin", issuer)
	}
	return nil
}

// oneObject reads a metadata document: one JSON object, nothing after it,
// read as strictly as the proxy reads a manifest (canonjson: a duplicate
// member name, a lone surrogate or invalid UTF-8 make it ambiguous to the
// clients that read it after the proxy judged it, so it is refused).
func oneObject(b []byte) (map[string]json.RawMessage, error) {
	var strict canonjson.Doc
	if err := strict.Parse(b, canonjson.Limits{MaxBytes: maxMetadata, MaxDepth: 32, LaxNumbers: true}); err != nil {
		return nil, fmt.Errorf("not one JSON object: %w", err)
	}
	var doc map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil || doc == nil || dec.More() {
		return nil, errors.New("not one JSON object")
	}
	return doc, nil
}
