package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

var funcs = template.FuncMap{
	"when":        when,
	"short":       short,
	"add":         func(a, b int) int { return a + b },
	"depth":       func(d int) string { return "d" + strconv.Itoa(min(max(d, 0), 12)) },
	"pathEsc":     url.PathEscape,
	"visibleText": func(s string) Text { return plain(s, nil) },
}

func parseTemplates() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" || strings.HasPrefix(base, "_") {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/_*.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: parsing %s: %w", n, err)
		}
		out[base] = t
	}
	return out, nil
}

func when(ms int64) string {
	if ms == 0 {
		return "—"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
}

func short(hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// frame is what the layout draws around every page.
type frame struct {
	Title string
	User  *who
	Nav   string
	Error *pageError
	Note  string
	Body  any
}

type pageError struct {
	Code    string
	Message string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, page string, body any) {
	c.renderFrame(w, r, code, page, &frame{Body: body})
}

func (c *Console) renderFrame(w http.ResponseWriter, r *http.Request, code int, page string, f *frame) {
	t := c.pages[page]
	var buf bytes.Buffer
	if err := t.Execute(&buf, f); err != nil {
		c.d.Log.Error().Err(err).Str("page", page).Msg("rendering console page")
		http.Error(w, "internal: the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if f.Error != nil {
		w.Header().Set("X-Mcpdrift-Error", f.Error.Code)
	}
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// fail answers an error: a page saying its code and sentence, or to a
// caller that does not ask for HTML (a script), the admin API's JSON error.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, u *who, status int, code, msg string) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Mcpdrift-Error", code)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(apiError(code, msg))
		return
	}
	c.renderFrame(w, r, status, "error", &frame{Title: "Error", User: u, Error: &pageError{Code: code, Message: msg}})
}

func (c *Console) failErr(w http.ResponseWriter, r *http.Request, u *who, err error) {
	code := coded.CodeOf(err)
	if code == "" {
		code = "internal"
	}
	st := http.StatusInternalServerError
	switch code {
	case "not_found":
		st = http.StatusNotFound
	case "invalid_id", "bad_request":
		st = http.StatusBadRequest
	}
	c.fail(w, r, u, st, code, coded.MessageOf(err))
}

// ---- fleet ----

// statusOrder ranks a server's statuses: the one shown is the worst.
var statusOrder = []status.Status{status.Changed, status.Pending, status.Quarantined, status.Unknown, status.Verified}

// FleetRow is one server on the fleet page.
type FleetRow struct {
	Tenant, Server string
	Status         string
	Held           bool
	Variants       []VariantBrief
	Baseline       int64
	DriftAtMs      int64
	Severity       string
	Risk           *status.Risk // the server's risk band and mode (nil: never rated)
	Serve          bool
}

// VariantBrief is a variant on the fleet page.
type VariantBrief struct {
	Name, Status string
}

// StatusCount is one status's count at the top of the fleet page.
type StatusCount struct {
	Status string
	N      int
	Href   string
	On     bool
}

type fleetView struct {
	Tenants      []string
	Tenant       string
	Status       string
	Counts       []StatusCount
	Total        int
	Matched      int
	Rows         []FleetRow
	Page, Pages  int
	From, To     int
	Prev, Next   string
	Live         bool
	ClearFilters string
}

func severityRank(s string) int {
	var sv surface.Severity
	if err := sv.UnmarshalText([]byte(s)); err != nil {
		return -1
	}
	return int(sv)
}

// fleetRow summarises a server: its worst status (a held server is
// quarantined), its newest baseline version and drift, its worst severity.
func fleetRow(v *status.View) FleetRow {
	row := FleetRow{Tenant: v.Tenant, Server: v.Server, Held: v.Held()}
	if v.Hold != nil {
		row.Risk = v.Hold.Risk
	}
	worst := len(statusOrder)
	for i := range v.Variants {
		rec := &v.Variants[i]
		row.Variants = append(row.Variants, VariantBrief{Name: rec.Variant, Status: string(rec.Status)})
		if k := slices.Index(statusOrder, rec.Status); k >= 0 && k < worst {
			worst = k
		}
		row.Baseline = max(row.Baseline, rec.BaselineVersion)
		row.DriftAtMs = max(row.DriftAtMs, rec.DriftAtMs)
		if rec.Status != status.Verified && severityRank(rec.Severity) > severityRank(row.Severity) {
			row.Severity = rec.Severity
		}
		row.Serve = row.Serve || v.Serve(rec)
	}
	switch {
	case row.Held:
		row.Status = string(status.Quarantined)
	case worst < len(statusOrder):
		row.Status = string(statusOrder[worst])
	default:
		row.Status = string(status.Unknown)
	}
	return row
}

func fleetURL(tenant, st string, page int) string {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	if st != "" {
		q.Set("status", st)
	}
	if page > 1 {
		q.Set("page", strconv.Itoa(page))
	}
	if len(q) == 0 {
		return "/"
	}
	return "/?" + q.Encode()
}

func (c *Console) fleet(w http.ResponseWriter, r *http.Request, u *who) {
	views, err := c.d.Backend.List(r.Context())
	if err != nil {
		c.failErr(w, r, u, err)
		return
	}
	c.renderFrame(w, r, http.StatusOK, "fleet", &frame{Title: "Fleet", User: u, Nav: "fleet", Body: c.fleetView(views, r.URL.Query())})
}

// fleetView filters, counts and paginates the fleet.
func (c *Console) fleetView(views []status.View, q url.Values) *fleetView {
	fv := &fleetView{Tenant: q.Get("tenant"), Status: q.Get("status"), Live: c.d.Follow != nil}
	fv.Page, _ = strconv.Atoi(q.Get("page"))
	fv.Page = max(fv.Page, 1)
	counts := map[string]int{}
	var tenants []string
	seen := map[string]bool{}
	var rows []FleetRow
	for i := range views {
		v := &views[i]
		if !seen[v.Tenant] {
			seen[v.Tenant] = true
			tenants = append(tenants, v.Tenant)
		}
		if fv.Tenant != "" && v.Tenant != fv.Tenant {
			continue
		}
		row := fleetRow(v)
		counts[row.Status]++
		fv.Total++
		if fv.Status != "" && row.Status != fv.Status {
			continue
		}
		rows = append(rows, row)
	}
	slices.Sort(tenants)
	fv.Tenants = tenants
	fv.Matched = len(rows)
	for _, st := range statusOrder {
		s := string(st)
		href := fleetURL(fv.Tenant, s, 1)
		if fv.Status == s {
			href = fleetURL(fv.Tenant, "", 1)
		}
		fv.Counts = append(fv.Counts, StatusCount{Status: s, N: counts[s], Href: href, On: fv.Status == s})
	}
	size := c.cfg.PageSize
	fv.Pages = max(1, (len(rows)+size-1)/size)
	fv.Page = min(fv.Page, fv.Pages)
	lo := (fv.Page - 1) * size
	hi := min(lo+size, len(rows))
	fv.Rows = rows[lo:hi]
	fv.From, fv.To = lo+1, hi
	if len(rows) == 0 {
		fv.From = 0
	}
	if fv.Page > 1 {
		fv.Prev = fleetURL(fv.Tenant, fv.Status, fv.Page-1)
	}
	if fv.Page < fv.Pages {
		fv.Next = fleetURL(fv.Tenant, fv.Status, fv.Page+1)
	}
	fv.ClearFilters = "/"
	return fv
}

// ---- review ----

// ItemView is one item of a diff, drawn side by side.
type ItemView struct {
	Kind, Name string
	What       string // "changed", "added", "removed"
	// OldLabel and NewLabel head the two sides.
	OldLabel, NewLabel string
	Severity           string
	Benign             bool
	Changes            []surface.Change
	Rows               []Row
	Cut                bool
	Missing            string // why the item's content cannot be drawn
	// Approve is the item's own approve form on the review page (a
	// per-item approve of its live definition, bound to the live hash the
	// page shows); nil where none is offered.
	Approve *ItemApprove
}

// ItemApprove is the form that approves one item's live definition: POST
// Action with the session's CSRF token, the variant, the live hash and the
// item (KIND:NAME), as the admin API's per-item approve takes them.
type ItemApprove struct {
	Action, CSRF, Variant, Hash, Item string
}

// DiffView is a classified diff, drawn.
type DiffView struct {
	OldLabel, NewLabel string
	OldHash, NewHash   string
	Severity           string
	Benign             bool
	Changed            []ItemView
	Added              []ItemView
	Removed            []ItemView
}

// VariantView is one variant on the review page.
type VariantView struct {
	Rec      status.Record
	Serve    bool
	Selected bool
	Href     string
	// CompareHash is what the live manifest is compared with: the
	// baseline, or for a new variant its reference.
	CompareHash string
}

type reviewView struct {
	Tenant, Server string
	// Bands and Modes are the risk form's choices.
	Bands     []policy.Band
	Modes     []policy.Mode
	Held      bool
	Hold      *status.Server
	Status    string
	Variants  []VariantView
	Selected  *VariantView
	Diff      *DiffView
	DiffError string
	// Approvable: the selected variant has a live manifest that an approve
	// would make its baseline.
	Approvable bool
	Base       string // /servers/t/s
}

func serverBase(tenant, server string) string {
	return "/servers/" + url.PathEscape(tenant) + "/" + url.PathEscape(server)
}

func compareHash(rec *status.Record) string {
	if rec.BaselineHash != "" {
		return rec.BaselineHash
	}
	return rec.ReferenceHash
}

func (c *Console) review(w http.ResponseWriter, r *http.Request, u *who) {
	rv, err := c.reviewView(r.Context(), r.PathValue("tenant"), r.PathValue("server"), r.URL.Query().Get("variant"))
	if err != nil {
		c.failErr(w, r, u, err)
		return
	}
	rv.offerItems(u)
	f := &frame{Title: rv.Tenant + "/" + rv.Server, User: u, Nav: "fleet", Body: rv}
	switch r.URL.Query().Get("done") {
	case "approved":
		f.Note = "Approved: the live surface is the new baseline."
	case "approved_item":
		f.Note = "Approved the item's live definition into a new baseline version; whatever else differs from the live surface is still unapproved."
	case "quarantined":
		f.Note = "Quarantined: no variant of this server is served until an approve."
	case "rebaselined":
		f.Note = "Re-baselined: the variant's baseline is now hashed with the settings the policy asks for."
	case "risk":
		f.Note = "Risk set: the server's calls are judged by the new mode."
	}
	c.renderFrame(w, r, http.StatusOK, "review", f)
}

func validIDs(tenant, server string) error {
	for _, p := range [][2]string{{"tenant", tenant}, {"server", server}} {
		if err := bus.ValidID(p[0], p[1]); err != nil {
			return coded.Errorf(bus.CodeInvalidID, "%w", err)
		}
	}
	return nil
}

func (c *Console) reviewView(ctx context.Context, tenant, server, variant string) (*reviewView, error) {
	if err := validIDs(tenant, server); err != nil {
		return nil, err
	}
	v, err := c.d.Backend.Server(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	row := fleetRow(v)
	rv := &reviewView{Tenant: tenant, Server: server, Held: v.Held(),
		Bands: []policy.Band{policy.BandLow, policy.BandMedium, policy.BandHigh, policy.BandCritical},
		Modes: []policy.Mode{policy.ModeAllow, policy.ModeQuarantine, policy.ModeBlock}, Hold: v.Hold, Status: row.Status, Base: serverBase(tenant, server)}
	sel := -1
	for i := range v.Variants {
		rec := v.Variants[i]
		vv := VariantView{Rec: rec, Serve: v.Serve(&rec), CompareHash: compareHash(&rec),
			Href: rv.Base + "?variant=" + url.QueryEscape(rec.Variant)}
		rv.Variants = append(rv.Variants, vv)
		if rec.Variant == variant {
			sel = i
		}
	}
	if sel < 0 && variant != "" {
		return nil, coded.Errorf("not_found", "%s/%s has no listing variant %s", tenant, server, variant)
	}
	if sel < 0 { // the first variant that drifted, else the first
		for i := range rv.Variants {
			if st := rv.Variants[i].Rec.Status; st == status.Changed || st == status.Pending {
				sel = i
				break
			}
		}
	}
	if sel < 0 && len(rv.Variants) > 0 {
		sel = 0
	}
	if sel < 0 {
		return rv, nil
	}
	rv.Variants[sel].Selected = true
	rv.Selected = &rv.Variants[sel]
	rec := &rv.Selected.Rec
	rv.Approvable = rec.LiveHash != "" && rec.LiveError == "" &&
		(rec.LiveHash != rec.BaselineHash || rec.Status != status.Verified || rv.Held)
	base := rv.Selected.CompareHash
	if rec.LiveHash != "" && rec.LiveError == "" && rec.LiveHash != base {
		label := "approved baseline v" + strconv.FormatInt(rec.BaselineVersion, 10)
		switch {
		case base == "": // pending under the strict posture: nothing approved to compare with
			label = "nothing approved yet"
		case rec.BaselineHash == "":
			label = "approved for variant " + rec.ReferenceVariant
		}
		rv.Diff, err = c.diffView(ctx, base, rec.LiveHash, label, "live")
		if err != nil {
			rv.DiffError = err.Error()
		}
	}
	return rv, nil
}

// offerItems gives each item of the diff its own approve form, for a
// caller who may write, when the diff is the selected variant's live
// manifest against its approved baseline (a variant never approved has no
// baseline to approve items into). A listing's own change (a kind listed
// or not) has no item to name: only a whole approve takes it.
func (rv *reviewView) offerItems(u *who) {
	if rv.Diff == nil || rv.Selected == nil || !u.CanWrite() || !rv.Approvable {
		return
	}
	rec := &rv.Selected.Rec
	if rec.BaselineHash == "" || rv.Diff.OldHash != rec.BaselineHash || rv.Diff.NewHash != rec.LiveHash {
		return
	}
	for _, list := range [][]ItemView{rv.Diff.Changed, rv.Diff.Added, rv.Diff.Removed} {
		for i := range list {
			if _, ok := surface.KindNamed(list[i].Kind); !ok {
				continue
			}
			list[i].Approve = &ItemApprove{Action: rv.Base + "/approve", CSRF: u.CSRF, Variant: rec.Variant, Hash: rec.LiveHash,
				Item: state.ItemRef{Kind: list[i].Kind, Name: list[i].Name}.String()}
		}
	}
}

// emptySurface is what a variant that was never approved is compared
// with: its whole live surface shows as added.
var emptySurface = func() *surface.Surface {
	sf, err := surface.Parse([]byte(`{"tools":[]}`), surface.Options{})
	if err != nil {
		panic(err)
	}
	return sf
}()

// diffView diffs two stored manifests and draws every item of the diff.
func (c *Console) diffView(ctx context.Context, oldHash, newHash, oldLabel, newLabel string) (*DiffView, error) {
	old := emptySurface
	if oldHash != "" {
		var err error
		if old, err = c.d.Manifest(ctx, oldHash); err != nil {
			return nil, err
		}
	}
	cur, err := c.d.Manifest(ctx, newHash)
	if err != nil {
		return nil, err
	}
	rep := surface.Diff(old, cur)
	dv := &DiffView{OldLabel: oldLabel, NewLabel: newLabel, OldHash: oldHash, NewHash: newHash, Severity: rep.Severity.String(), Benign: rep.Benign}
	find := func(sf *surface.Surface, d surface.ItemDiff) *surface.Item {
		k, ok := surface.KindNamed(d.Kind)
		if !ok {
			return nil
		}
		it, ok := sf.Find(k, d.Name)
		if !ok {
			return nil
		}
		return &it
	}
	draw := func(d surface.ItemDiff, what string) ItemView {
		iv := ItemView{Kind: d.Kind, Name: d.Name, What: what, Severity: d.Severity.String(), Benign: d.Benign, Changes: d.Changes,
			OldLabel: oldLabel, NewLabel: newLabel}
		var o, n *surface.Item
		if what != "added" {
			o = find(old, d)
		}
		if what != "removed" {
			n = find(cur, d)
		}
		if o == nil && n == nil {
			iv.Missing = "no content to show: the change is to the listing itself"
			return iv
		}
		rows, cut, err := itemRows(o, n, d.Changes)
		if err != nil {
			iv.Missing = err.Error()
		}
		iv.Rows, iv.Cut = rows, cut
		return iv
	}
	for _, d := range rep.Changed {
		dv.Changed = append(dv.Changed, draw(d, "changed"))
	}
	for _, d := range rep.Added {
		dv.Added = append(dv.Added, draw(d, "added"))
	}
	for _, d := range rep.Removed {
		dv.Removed = append(dv.Removed, draw(d, "removed"))
	}
	return dv, nil
}

// ---- actions ----

// callAPI carries out a write as the admin API: the same handler, the
// caller's token, so that it is checked, done and audited as the API's.
func (c *Console) callAPI(r *http.Request, u *who, path string, body any) (int, *admin.Error) {
	return c.apiDo(r, u, http.MethodPost, path, body, nil)
}

func apiError(code, msg string) *admin.Error {
	var e admin.Error
	e.Error.Code, e.Error.Message = code, msg
	return &e
}

func apiPath(tenant, server, action string) string {
	return "/v1/servers/" + url.PathEscape(tenant) + "/" + url.PathEscape(server) + "/" + action
}

// redraw answers a refused action: the review page drawn again from what
// is stored now, saying why it was refused.
func (c *Console) redraw(w http.ResponseWriter, r *http.Request, u *who, code int, e *admin.Error, variant string) {
	t, s := r.PathValue("tenant"), r.PathValue("server")
	msg := e.Error.Message
	if len(e.Error.Candidates) > 0 {
		msg += " (variants: " + strings.Join(e.Error.Candidates, ", ") + ")"
	}
	rv, err := c.reviewView(r.Context(), t, s, variant)
	if err != nil {
		c.fail(w, r, u, code, e.Error.Code, msg)
		return
	}
	rv.offerItems(u)
	c.renderFrame(w, r, code, "review", &frame{Title: t + "/" + s, User: u, Nav: "fleet", Body: rv,
		Error: &pageError{Code: e.Error.Code, Message: msg}})
}

// act carries out one of the review page's actions through the admin API
// (POST /v1/servers/{tenant}/{server}/<action> with body, as the caller):
// a refusal of who is asking is an error page, any other refusal is the
// review page drawn again saying why; done goes back to the review page
// with a note.
func (c *Console) act(w http.ResponseWriter, r *http.Request, u *who, action string, body any, variant, done string) {
	t, s := r.PathValue("tenant"), r.PathValue("server")
	code, e := c.callAPI(r, u, apiPath(t, s, action), body)
	if e != nil {
		if code == http.StatusForbidden || code == http.StatusUnauthorized {
			c.fail(w, r, u, code, e.Error.Code, e.Error.Message)
			return
		}
		if e.Error.Code == "stale_hash" {
			e.Error.Message = "The live surface changed since this page was drawn, so nothing was done; the page below shows it as it is now. (" + e.Error.Message + ")"
		}
		c.redraw(w, r, u, code, e, variant)
		return
	}
	http.Redirect(w, r, serverBase(t, s)+"?done="+done+"&variant="+url.QueryEscape(variant), http.StatusSeeOther)
}

// approve approves the live manifest, or with an item (KIND:NAME) only
// that item's live definition (a per-item approve).
func (c *Console) approve(w http.ResponseWriter, r *http.Request, u *who) {
	req := admin.ApproveRequest{Hash: r.PostFormValue("hash"), Variant: r.PostFormValue("variant")}
	done := "approved"
	if item := r.PostFormValue("item"); item != "" {
		req.Items, done = []string{item}, "approved_item"
	}
	c.act(w, r, u, "approve", req, req.Variant, done)
}

func (c *Console) quarantine(w http.ResponseWriter, r *http.Request, u *who) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	variant := r.PostFormValue("variant")
	if reason == "" {
		c.redraw(w, r, u, http.StatusBadRequest, apiError("bad_request", "say why the server is quarantined: the reason is recorded with the hold and in the audit trail"), variant)
		return
	}
	c.act(w, r, u, "quarantine", admin.QuarantineRequest{Reason: reason}, variant, "quarantined")
}

// rebaseline moves a variant to the hashing settings its tenant's policy
// asks for (POST .../rebaseline), bound to the live hash by those settings
// that the page showed.
func (c *Console) rebaseline(w http.ResponseWriter, r *http.Request, u *who) {
	req := admin.RebaselineRequest{Hash: r.PostFormValue("hash"), Variant: r.PostFormValue("variant")}
	c.act(w, r, u, "rebaseline", req, req.Variant, "rebaselined")
}

// risk sets the server's risk band and mode (POST .../risk): an admin's
// relax or tightening, with a reason.
func (c *Console) risk(w http.ResponseWriter, r *http.Request, u *who) {
	req := admin.RiskRequest{Band: policy.Band(r.PostFormValue("band")), Mode: policy.Mode(r.PostFormValue("mode")),
		Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	variant := r.PostFormValue("variant")
	if req.Reason == "" {
		c.redraw(w, r, u, http.StatusBadRequest, apiError("bad_request", "say why the risk mode is set: the reason is recorded with it and in the audit trail"), variant)
		return
	}
	c.act(w, r, u, "risk", req, variant, "risk")
}

// ---- history ----

type historyVersion struct {
	status.Baseline
	Href string // diff from the previous version
}

type historyVariant struct {
	Variant  string
	Versions []historyVersion
}

type historyView struct {
	Tenant, Server string
	Base           string
	Variants       []historyVariant
	Variant        string
	From, To       int64
	Diff           *DiffView
	DiffError      string
	Same           bool
}

func (c *Console) history(w http.ResponseWriter, r *http.Request, u *who) {
	t, s := r.PathValue("tenant"), r.PathValue("server")
	if err := validIDs(t, s); err != nil {
		c.failErr(w, r, u, err)
		return
	}
	q := r.URL.Query()
	hist, err := c.d.Backend.History(r.Context(), t, s, "")
	if err != nil {
		c.failErr(w, r, u, err)
		return
	}
	hv := &historyView{Tenant: t, Server: s, Base: serverBase(t, s), Variant: q.Get("variant")}
	hv.From, _ = strconv.ParseInt(q.Get("from"), 10, 64)
	hv.To, _ = strconv.ParseInt(q.Get("to"), 10, 64)
	var fromHash, toHash string
	for _, h := range hist {
		vv := historyVariant{Variant: h.Variant}
		for i, b := range h.Baselines {
			ver := historyVersion{Baseline: b}
			if i > 0 {
				ver.Href = hv.Base + "/history?" + url.Values{"variant": {h.Variant},
					"from": {strconv.FormatInt(h.Baselines[i-1].Version, 10)}, "to": {strconv.FormatInt(b.Version, 10)}}.Encode()
			}
			vv.Versions = append(vv.Versions, ver)
			if h.Variant == hv.Variant {
				if b.Version == hv.From {
					fromHash = b.Hash
				}
				if b.Version == hv.To {
					toHash = b.Hash
				}
			}
		}
		hv.Variants = append(hv.Variants, vv)
	}
	if hv.Variant == "" && len(hist) == 1 {
		hv.Variant = hist[0].Variant
	}
	if q.Has("from") || q.Has("to") {
		switch {
		case fromHash == "" || toHash == "":
			hv.DiffError = fmt.Sprintf("variant %q has no baseline version %d or %d", hv.Variant, hv.From, hv.To)
		case fromHash == toHash:
			hv.Same = true
		default:
			hv.Diff, err = c.diffView(r.Context(), fromHash, toHash,
				"v"+strconv.FormatInt(hv.From, 10), "v"+strconv.FormatInt(hv.To, 10))
			if err != nil {
				hv.DiffError = err.Error()
			}
		}
	}
	c.renderFrame(w, r, http.StatusOK, "history", &frame{Title: "History of " + t + "/" + s, User: u, Nav: "fleet", Body: hv})
}
