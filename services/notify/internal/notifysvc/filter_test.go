package notifysvc

import (
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

func TestFilterMatch(t *testing.T) {
	changedHigh := &Event{Kind: KindVerdict, Tenant: "acme", Server: "files", Status: "changed", Severity: "high"}
	quarantined := &Event{Kind: KindQuarantine, Tenant: "beta", Server: "db", Status: "quarantined", Severity: "none"}
	held := &Event{Kind: KindHeldCall, Tenant: "acme", Server: "db", Status: StatusHeld, Severity: "none"}
	for _, tc := range []struct {
		name, expr string
		want       []bool // changedHigh, quarantined, held
	}{
		{"empty", "", []bool{true, true, true}},
		{"spaces_only", "   ", []bool{true, true, true}},
		{"tenant", "tenant=acme", []bool{true, false, true}},
		{"tenant_list", "tenant=beta,acme", []bool{true, true, true}},
		{"not_tenant", "tenant!=acme", []bool{false, true, false}},
		{"server", "server=db", []bool{false, true, true}},
		{"kind", "kind=quarantine,held_call", []bool{false, true, true}},
		{"status", "status=changed", []bool{true, false, false}},
		{"not_status", "status!=held,quarantined", []bool{true, false, false}},
		{"severity_ge", "severity>=high", []bool{true, false, false}},
		{"severity_gt", "severity>high", []bool{false, false, false}},
		{"severity_le", "severity<=medium", []bool{false, true, true}},
		{"severity_lt_none", "severity<none", []bool{false, false, false}},
		{"severity_eq", "severity=none", []bool{false, true, true}},
		{"and", "tenant=acme severity>=high", []bool{true, false, false}},
		{"and_tabs", "tenant=acme\tkind!=held_call", []bool{true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFilter(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			for i, ev := range []*Event{changedHigh, quarantined, held} {
				if got := f.Match(ev); got != tc.want[i] {
					t.Errorf("%q on %s/%s %s: %v, want %v", tc.expr, ev.Tenant, ev.Server, ev.Kind, got, tc.want[i])
				}
			}
		})
	}
}

func TestParseFilterErrors(t *testing.T) {
	for _, tc := range []struct{ name, expr, want string }{
		{"no_operator", "tenant", "want FIELD OP VALUE"},
		{"unknown_field", "team=a", `unknown field "team"`},
		{"no_value", "tenant=", "no value"},
		{"empty_item", "tenant=a,", "tenant \"\""},
		{"bad_tenant", "tenant=a.b", `tenant "a.b"`},
		{"unknown_status", "status=drifted", `unknown status "drifted"`},
		{"unknown_kind", "kind=alert", `unknown kind "alert"`},
		{"unknown_severity", "severity>=urgent", `unknown severity "urgent"`},
		{"ordered_tenant", "tenant>=a", "compares severities only"},
		{"ordered_list", "severity>=low,high", "takes one severity"},
		{"double_operator", "status==changed", `unknown status "=changed"`},
		{"uppercase_field", "Tenant=a", "want FIELD OP VALUE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFilter(tc.expr)
			if err == nil || coded.CodeOf(err) != CodeInvalidFilter || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseFilter(%q) = %v, want %s with %q", tc.expr, err, CodeInvalidFilter, tc.want)
			}
		})
	}
}

// FuzzParseFilter: any expression either parses, to a filter whose String
// parses to the same clauses, or is refused with invalid_filter; matching
// never panics.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"", "tenant=acme", "severity>=high kind!=held_call", "status=changed,verified server=a_b-1", "x", "=", "severity<"} {
		f.Add(s)
	}
	ev := &Event{Kind: KindVerdict, Tenant: "acme", Server: "files", Status: "changed", Severity: "high"}
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := ParseFilter(expr)
		if err != nil {
			if coded.CodeOf(err) != CodeInvalidFilter {
				t.Fatalf("error without code: %v", err)
			}
			return
		}
		again, err := ParseFilter(flt.String())
		if err != nil || again.String() != flt.String() || again.Match(ev) != flt.Match(ev) {
			t.Fatalf("%q: String %q does not parse back the same: %v", expr, flt.String(), err)
		}
	})
}
