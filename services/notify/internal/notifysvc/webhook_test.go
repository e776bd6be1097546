package notifysvc

import (
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

func TestParseDestination(t *testing.T) {
	const secretPath = "T000/B000/XXXXsecretXXXX"
	for _, tc := range []struct {
		name, url, dname, format, filter string
		code                             string // "" for none
	}{
		{name: "https", url: "https://hooks.example.com/services/" + secretPath},
		{name: "http_port_user", url: "http://user:pw-secret@127.0.0.1:8080/in/" + secretPath, format: FormatCloudEvents, filter: "tenant=a"},
		{name: "named", url: "https://h/x", dname: "secops", format: FormatSlack},
		{name: "ftp", url: "ftp://h/" + secretPath, code: CodeInvalidWebhook},
		{name: "no_scheme", url: "hooks.example.com/" + secretPath, code: CodeInvalidWebhook},
		{name: "no_host", url: "https:///" + secretPath, code: CodeInvalidWebhook},
		{name: "unparseable", url: "http://h:%zz/" + secretPath, code: CodeInvalidWebhook},
		{name: "bad_port", url: "http://h:port/" + secretPath, code: CodeInvalidWebhook},
		{name: "empty", url: "", code: CodeInvalidWebhook},
		{name: "format", url: "https://h/" + secretPath, format: "xml", code: CodeUnknownFormat},
		{name: "filter", url: "https://h/" + secretPath, filter: "severity>>high", code: CodeInvalidFilter},
		{name: "bad_name", url: "https://h/" + secretPath, dname: "sec.ops", code: CodeInvalidDestination},
		{name: "long_name", url: "https://h/" + secretPath, dname: strings.Repeat("n", MaxNameLength+1), code: CodeInvalidDestination},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDestination(3, tc.url, tc.dname, tc.format, tc.filter)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.dname != "" && d.Name != tc.dname || tc.dname == "" && len(d.Name) != 12 {
					t.Errorf("name %q", d.Name)
				}
				if strings.Contains(d.Host(), "pw-") {
					t.Errorf("Host %q shows the user's password", d.Host())
				}
				return
			}
			if coded.CodeOf(err) != tc.code || !strings.Contains(err.Error(), "webhook 3") {
				t.Fatalf("err %v, want code %s naming webhook 3", err, tc.code)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the URL: %v", err)
			}
		})
	}
	// The name made from the URL is stable, and differs between URLs.
	a, _ := ParseDestination(1, "https://h/a", "", "", "")
	a2, _ := ParseDestination(2, "https://h/a", "", FormatSlack, "tenant=x")
	b, _ := ParseDestination(1, "https://h/b", "", "", "")
	if a.Name != a2.Name || a.Name == b.Name {
		t.Errorf("names %q %q %q: want the same for one URL, another for another", a.Name, a2.Name, b.Name)
	}
}

// TestSign: the signature is "sha256=" and the hex HMAC-SHA256 of
// "<timestamp>.<body>" (the answer computed with Python's hmac module).
func TestSign(t *testing.T) {
	const want = "sha256=bb6ada108e1d7db814ce611b0da877fb1f7ed9f3177fab8fcf3f8a2cbc762732"
	if got := Sign([]byte("Jefe"), "1714564800", []byte(`{"id":"e1"}`)); got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	if Sign([]byte("Jefe"), "1", []byte("body")) == Sign([]byte("Jefe"), "2", []byte("body")) {
		t.Error("the signature does not cover the timestamp")
	}
}

func TestClipEscaped(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"ab&amp;cd", 4, "ab…"}, // never half an entity
		{"ab&amp;cd", 7, "ab&amp;…"},
		{"é&lt;x", 2, "é…"},
	} {
		if got := clipEscaped(tc.in, tc.n); got != tc.want {
			t.Errorf("clipEscaped(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
