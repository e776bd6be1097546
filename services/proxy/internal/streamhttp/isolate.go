package streamhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Upstreams behind one proxy share its origin (scheme, host and port): a
// client keeps per-origin state (cookies, HTTP authentication, HSTS,
// Alt-Svc, network error logging, cached answers, ...) for the proxy, not
// for each server behind it. Nothing of that state may cross from one
// upstream to another, so the proxy decides per kind of state:
//
//   - cookies are scoped: an upstream's Set-Cookie reaches the client
//     renamed with a prefix of that upstream's own (cookiePrefix), with
//     Path /<id> and no Domain; a client's Cookie reaches an upstream
//     holding only the cookies under that upstream's prefix, the prefix
//     taken off. A cookie under no prefix, or another's, never reaches it.
//   - of the headers of an upstream's answer, only those on passedHeaders
//     reach the client (fail closed: a per-origin header the proxy does not
//     know is dropped, not passed), beside the ones the proxy writes itself;
//     an answer other than 2xx keeps only keptOnError;
//   - WWW-Authenticate keeps its Bearer challenges only: a Basic or Digest
//     challenge sets up a protection space for the whole origin, whose
//     credentials a browser would hand to another upstream that asks with
//     the same realm;
//   - the proxy's answers are never stored by a cache (Cache-Control:
//     no-store): a stored answer would be served again without the proxy's
//     judgment, and under another upstream's verdict;
//   - Location is never passed (proxy.go, oauth.go).
//
// Each header dropped or scoped is counted by its class (Config.Stripped)
// and the dangerous ones logged (at most once per class, server and
// strippedLogEvery). docs/services/proxy-http.md, "Upstreams isolated",
// has the table.

// Header classes counted by Config.Stripped.
const (
	StripSetCookieScoped  = "set-cookie-scoped"  // an upstream's cookie, renamed to its own scope
	StripSetCookieInvalid = "set-cookie-invalid" // a Set-Cookie the proxy cannot read: dropped
	StripCookieForeign    = "cookie-foreign"     // a client's cookie not in the upstream's scope: not forwarded
	StripAuthChallenge    = "www-authenticate"   // a challenge other than Bearer
	StripAltSvc           = "alt-svc"
	StripHSTS             = "strict-transport-security"
	StripClearSiteData    = "clear-site-data"
	StripCORS             = "access-control" // Access-Control-* (the proxy's --allowed-origins decides)
	StripReporting        = "reporting"      // NEL, Report-To, Reporting-Endpoints
	StripCaching          = "caching"        // Cache-Control, Expires, Age, Vary, Pragma, ETag, Last-Modified
	StripLocation         = "location"
	StripOther            = "other" // any other header not on passedHeaders
)

// StripClasses lists every class, for a counter's fixed label set.
var StripClasses = []string{StripSetCookieScoped, StripSetCookieInvalid, StripCookieForeign, StripAuthChallenge,
	StripAltSvc, StripHSTS, StripClearSiteData, StripCORS, StripReporting, StripCaching, StripLocation, StripOther}

// passedHeaders are the headers of an upstream's 2xx answer that reach
// the client as they came: none of them is state a client keeps for the
// origin. The proxy writes Content-Type, Content-Length, Cache-Control and
// Mcp-Session-Id itself; Set-Cookie is scoped.
var passedHeaders = map[string]bool{
	"Retry-After": true, "Ratelimit": true, "Ratelimit-Policy": true,
	"X-Ratelimit-Limit": true, "X-Ratelimit-Remaining": true, "X-Ratelimit-Reset": true,
	"X-Request-Id": true, "Traceresponse": true,
}

// silentHeaders are replaced by the proxy's own (the body's description,
// the connection's business, the session id it gives) or set by the HTTP
// server anyway: dropped without counting.
var silentHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Content-Range": true,
	"Content-Md5": true, "Content-Digest": true, "Repr-Digest": true, "Digest": true, "Content-Location": true,
	"Mcp-Session-Id": true, "Date": true, "Server": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Trailer": true, "Te": true, "Upgrade": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
}

// stripClass is the class an upstream's answer header k is counted under
// when it is dropped; "" for one dropped silently.
func stripClass(k string) string {
	switch k = http.CanonicalHeaderKey(k); {
	case silentHeaders[k]:
		return ""
	case k == "Alt-Svc" || k == "Alt-Used":
		return StripAltSvc
	case k == "Strict-Transport-Security":
		return StripHSTS
	case k == "Clear-Site-Data":
		return StripClearSiteData
	case strings.HasPrefix(k, "Access-Control-"):
		return StripCORS
	case k == "Nel" || k == "Report-To" || k == "Reporting-Endpoints":
		return StripReporting
	case k == "Cache-Control" || k == "Expires" || k == "Age" || k == "Vary" || k == "Pragma" || k == "Etag" || k == "Last-Modified" || k == "Surrogate-Control":
		return StripCaching
	case k == "Location":
		return StripLocation
	case k == "Www-Authenticate":
		return StripAuthChallenge
	}
	return StripOther
}

// warned are the classes worth a warning: state that reaches beyond the
// answer it came with, which no MCP server needs to send.
var warned = map[string]bool{StripSetCookieInvalid: true, StripCookieForeign: true, StripAuthChallenge: true,
	StripAltSvc: true, StripHSTS: true, StripClearSiteData: true, StripReporting: true}

// strippedLogEvery bounds the warnings per class and server.
const strippedLogEvery = 10 * time.Second

// stripLog rate-limits the warnings of one front.
type stripLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// stripped counts a header of class dropped or scoped, and warns of the
// dangerous ones at most once per class every strippedLogEvery.
func (f *front) stripped(class string, n int) {
	if n == 0 || class == "" {
		return
	}
	if c := f.p.cfg.Stripped; c != nil {
		for range n {
			c(class)
		}
	}
	if !warned[class] {
		return
	}
	f.warnedAt.mu.Lock()
	now := time.Now()
	if now.Sub(f.warnedAt.last[class]) < strippedLogEvery {
		f.warnedAt.mu.Unlock()
		return
	}
	if f.warnedAt.last == nil {
		f.warnedAt.last = map[string]time.Time{}
	}
	f.warnedAt.last[class] = now
	f.warnedAt.mu.Unlock()
	f.log.Warn().Str("header", class).Msg("per-origin client state of the upstream not passed on (upstreams behind the proxy share its origin)")
}

// cookiePrefix is the prefix of the names of an upstream's cookies at the
// client: of a fixed length, so that no server id's prefix begins
// another's, and of characters a cookie name may hold whatever the id.
func cookiePrefix(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "mcpdrift." + hex.EncodeToString(sum[:8]) + "."
}

// cookiePath is the Path of an upstream's cookies at the client: its
// routes (/<id>/mcp, /<id>/sse, /<id>/messages).
func cookiePath(id string) string {
	return (&url.URL{Path: "/" + id}).EscapedPath()
}

// scopeSetCookie rewrites one Set-Cookie of the upstream to its scope at
// the client; false when the proxy cannot read it (it is then dropped).
func (f *front) scopeSetCookie(line string) (string, bool) {
	c, err := http.ParseSetCookie(line)
	if err != nil {
		return "", false
	}
	c.Name = f.cookies + c.Name
	c.Path = cookiePath(f.up.ID)
	c.Domain = ""
	s := c.String()
	return s, s != ""
}

// upstreamCookies leaves in h (a request to the upstream) only the
// cookies of the upstream's scope, their prefix taken off, and counts the
// others.
func (f *front) upstreamCookies(h http.Header) {
	vs := h.Values("Cookie")
	if len(vs) == 0 {
		return
	}
	var kept []string
	foreign := 0
	for _, v := range vs {
		for part := range strings.SplitSeq(v, ";") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if rest, ok := strings.CutPrefix(part, f.cookies); ok && rest != "" && rest[0] != '=' {
				kept = append(kept, rest)
			} else {
				foreign++
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
	f.stripped(StripCookieForeign, foreign)
}

// copyHeaders copies to dst the headers of an upstream answer (src, 2xx)
// whose body the proxy judged and writes itself: passedHeaders as they
// came, Set-Cookie scoped; every other one is dropped and counted.
func (f *front) copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case passedHeaders[ck]:
			dst[ck] = append([]string(nil), vs...)
		case ck == "Set-Cookie":
			f.setCookies(dst, vs)
		default:
			f.stripped(stripClass(ck), len(vs))
		}
	}
}

// setCookies adds the upstream's cookies vs to dst, each scoped.
func (f *front) setCookies(dst http.Header, vs []string) {
	for _, v := range vs {
		if s, ok := f.scopeSetCookie(v); ok {
			dst.Add("Set-Cookie", s)
			f.stripped(StripSetCookieScoped, 1)
		} else {
			f.stripped(StripSetCookieInvalid, 1)
		}
	}
}

// bearerChallenges keeps the Bearer challenges of WWW-Authenticate values
// vs (the scheme of MCP authorization) and reports how many others it
// left out; nil when none is left.
func bearerChallenges(vs []string) ([]string, int) {
	var out []string
	left := 0
	for _, v := range vs {
		var keep []string
		for _, c := range splitChallenges(v) {
			scheme, _, _ := strings.Cut(c, " ")
			if strings.EqualFold(strings.TrimRight(scheme, "\t"), "Bearer") {
				keep = append(keep, c)
			} else {
				left++
			}
		}
		if len(keep) > 0 {
			out = append(out, strings.Join(keep, ", "))
		}
	}
	return out, left
}

// splitChallenges splits a WWW-Authenticate value into its challenges
// (RFC 9110 §11.6.1): the comma separates both challenges and a
// challenge's parameters; an element that begins with a token not
// followed by "=" begins a challenge (its scheme). Commas in quoted
// strings are kept.
func splitChallenges(v string) []string {
	var elems []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			elems = append(elems, v[start:i])
			start = i + 1
		}
	}
	elems = append(elems, v[start:])
	var out []string
	for _, e := range elems {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if len(out) == 0 || beginsChallenge(e) {
			out = append(out, e)
		} else {
			out[len(out)-1] += ", " + e
		}
	}
	return out
}

// beginsChallenge reports an element that begins with an auth-scheme: a
// token followed by the end or by white space and then no "=" (an
// auth-param is a token, optional white space, "=").
func beginsChallenge(e string) bool {
	i := 0
	for i < len(e) && isTokenChar(e[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	if i == len(e) {
		return true
	}
	if e[i] != ' ' && e[i] != '\t' {
		return false
	}
	rest := strings.TrimLeft(e[i:], " \t")
	return !strings.HasPrefix(rest, "=")
}

// isTokenChar reports a tchar of RFC 9110 §5.6.2.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
