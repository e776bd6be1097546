package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
)

// approvalsView is the held calls page.
type approvalsView struct {
	admin.ApprovalsShow
}

// Or is s, or def when s is empty.
func (approvalsView) Or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// approvals draws the held calls, read through the admin API (GET
// /v1/approvals) as the caller: the API checks the role and audits it.
func (c *Console) approvals(w http.ResponseWriter, r *http.Request, u *who) {
	var v approvalsView
	code, e := c.apiDo(r, u, http.MethodGet, "/v1/approvals", nil, &v.ApprovalsShow)
	if e != nil {
		c.fail(w, r, u, code, e.Error.Code, e.Error.Message)
		return
	}
	f := &frame{Title: "Held calls", User: u, Nav: "approvals", Body: v}
	switch r.URL.Query().Get("done") {
	case "approved":
		f.Note = "Approved: the proxy holding the call forwards it."
	case "denied":
		f.Note = "Denied: the proxy holding the call refuses it."
	}
	c.renderFrame(w, r, http.StatusOK, "approvals", f)
}

// resolve approves or denies a held call through the admin API (POST
// /v1/approvals/{id}/approve|deny): the same session, CSRF and role rules
// as approve and quarantine, and the API's audit.
func (c *Console) resolve(approve bool) pageFunc {
	return func(w http.ResponseWriter, r *http.Request, u *who) {
		action, done := "deny", "denied"
		if approve {
			action, done = "approve", "approved"
		}
		body := admin.ResolveBody{Reason: strings.TrimSpace(r.PostFormValue("reason"))}
		code, e := c.apiDo(r, u, http.MethodPost, "/v1/approvals/"+url.PathEscape(r.PathValue("id"))+"/"+action, body, nil)
		if e != nil {
			c.fail(w, r, u, code, e.Error.Code, e.Error.Message)
			return
		}
		http.Redirect(w, r, "/approvals?done="+done, http.StatusSeeOther)
	}
}

// apiDo calls the admin API in process as u (its bearer secret), decoding
// a 200's body into out when it is not nil.
func (c *Console) apiDo(r *http.Request, u *who, method, path string, body, out any) (int, *admin.Error) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		return http.StatusBadRequest, apiError("bad_request", err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+u.secret)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RemoteAddr = r.RemoteAddr
	rec := httptest.NewRecorder()
	c.d.API.ServeHTTP(rec, req)
	if rec.Code == http.StatusOK {
		if out != nil {
			if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
				return http.StatusInternalServerError, apiError("internal", "the admin API's answer could not be read: "+err.Error())
			}
		}
		return rec.Code, nil
	}
	var e admin.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
		return rec.Code, apiError("internal", "the admin API answered "+strconv.Itoa(rec.Code))
	}
	return rec.Code, &e
}
