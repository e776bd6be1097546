package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// browserTarget is where a browser goes with a Location header: the URL
// parser of browsers (WHATWG) drops every tab, line feed and carriage
// return inside a URL and the C0 controls and spaces around it before
// resolving it, so "/\t/evil" is "//evil", another host.
func browserTarget(loc string) string {
	loc = strings.Trim(loc, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
	return strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(loc)
}

// TestLoginNextStaysOnSite: a link to the login form whose next is an
// off-site address in disguise (a tab or another control character
// between the slashes, which browsers drop) must not send the person who
// logs in to another site, where a page made to look like the console
// could ask for the token again.
func TestLoginNextStaysOnSite(t *testing.T) {
	s := startStack(t)
	for _, next := range []string{
		"/\t/evil.example/",
		"/\n/evil.example/",
		"/\r/evil.example/",
		"\t//evil.example/",
		"/\t\\evil.example/",
		"/\x0b/evil.example/",
		"/\x00/evil.example/",
		"//evil.example/",
		"/\\evil.example/",
		"https://evil.example/",
		"/%2F/evil.example/", // stays a path on this site: fine either way
	} {
		// The login form carries next as the link gave it.
		must(t, s.client().get("/login?next="+url.QueryEscape(next)), http.StatusOK)
		// The redirect is read as it comes: Go's client refuses to parse
		// such a Location, a browser follows it.
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/login", strings.NewReader(url.Values{"token": {writeSecret}, "next": {next}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("next %q: login answered %d", next, resp.StatusCode)
		}
		loc := resp.Header.Get("Location")
		dst := browserTarget(loc)
		u, err := url.Parse(dst)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(dst, "/") || strings.HasPrefix(dst, "//") || strings.HasPrefix(dst, "/\\") {
			t.Errorf("next %q: login sent the browser to %q (a browser reads %q): off the site", next, loc, dst)
		}
	}
}
