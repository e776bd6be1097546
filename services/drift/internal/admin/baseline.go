package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
)

// Baselines is what the API serves of baselines as code (signed
// lockfiles, package lockfile); *driftsvc.Service is one.
type Baselines interface {
	// ExportBaseline returns the server's approved baselines as an
	// unsigned lockfile (driftctl signs it).
	ExportBaseline(ctx context.Context, tenant, server, actor string) (*lockfile.File, error)
	// ImportBaseline verifies a lockfile against the trusted keys and
	// installs its baselines.
	ImportBaseline(ctx context.Context, f *lockfile.File, actor string) (*state.ImportResult, error)
}

// ImportShow is the answer of POST .../baseline: the server after, the
// variants given a new baseline version, those that had it already, and
// the id of the key that signed the lockfile.
type ImportShow struct {
	ServerShow
	Imported  []string `json:"imported"`
	Unchanged []string `json:"unchanged"`
	KeyID     string   `json:"key_id"`
}

func (h *handler) baselineRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/servers/{tenant}/{server}/baseline", h.auth(RoleRead, "baseline_export", h.baselineExport))
	mux.HandleFunc("POST /v1/servers/{tenant}/{server}/baseline", h.auth(RoleWrite, "baseline_import", h.baselineImport))
}

var errNoBaselines = coded.New("not_found", "this drift service serves no baselines")

// baselineStatus is the HTTP status of a refused lockfile or import.
func baselineStatus(err error) int {
	switch coded.CodeOf(err) {
	case lockfile.CodeMalformed:
		return http.StatusBadRequest
	case lockfile.CodeSignatureInvalid, lockfile.CodeKeyUnknown, lockfile.CodeHashMismatch:
		return http.StatusUnprocessableEntity
	case state.ErrDowngrade.Code, state.ErrHashingMismatch.Code:
		return http.StatusConflict
	}
	return 0 // the code's own (httpStatus)
}

func (h *handler) baselineExport(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if h.d.Baselines == nil {
		return http.StatusNotFound, nil, errNoBaselines
	}
	t, s := path(r)
	f, err := h.d.Baselines.ExportBaseline(ctx, t, s, c.action.Actor)
	if err != nil {
		return baselineStatus(err), nil, err
	}
	return http.StatusOK, f, nil
}

func (h *handler) baselineImport(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if h.d.Baselines == nil {
		return http.StatusNotFound, nil, errNoBaselines
	}
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, lockfile.MaxBytes+1))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return http.StatusBadRequest, nil, coded.Errorf(lockfile.CodeMalformed, "the lockfile is over the limit of %d bytes", lockfile.MaxBytes)
		}
		return http.StatusBadRequest, nil, coded.Errorf("bad_request", "reading the body: %w", err)
	}
	f, err := lockfile.Read(data)
	if err != nil {
		return http.StatusBadRequest, nil, err
	}
	t, s := path(r)
	if f.Tenant != t || f.Server != s {
		return http.StatusBadRequest, nil, coded.Errorf(lockfile.CodeMalformed, "the lockfile is of %s/%s, the request names %s/%s", f.Tenant, f.Server, t, s)
	}
	// The audit names what was offered: each variant's baseline, and the key.
	var offered []string
	for _, v := range f.Variants {
		offered = append(offered, v.Variant+"="+v.Baseline.Hash)
	}
	if len(f.Variants) == 1 {
		c.action.Variant = f.Variants[0].Variant
	}
	if f.Signature != nil {
		offered = append(offered, "key="+f.Signature.KeyID)
	}
	c.action.Hash = strings.Join(offered, " ")
	res, err := h.d.Baselines.ImportBaseline(ctx, f, c.action.Actor)
	if err != nil {
		return baselineStatus(err), nil, err
	}
	return http.StatusOK, ImportShow{ServerShow: serverShow(res.View), Imported: nonNilStrings(res.Imported), Unchanged: nonNilStrings(res.Unchanged), KeyID: res.KeyID}, nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
