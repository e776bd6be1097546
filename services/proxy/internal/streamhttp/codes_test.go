package streamhttp

import (
	"net/http"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/edgeauth"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestHTTPCodesHaveShapes: every code the HTTP side refuses a request with
// alone (httpError) has its status and JSON-RPC error code in the registry
// of codes, the status each had when the transport chose it itself.
func TestHTTPCodesHaveShapes(t *testing.T) {
	for code, status := range map[session.Code]int{
		CodeInvalidMessage:             http.StatusBadRequest,
		CodeHeaderMismatch:             http.StatusBadRequest,
		CodeMessageTooLarge:            http.StatusRequestEntityTooLarge,
		CodeUnknownServer:              http.StatusNotFound,
		CodeUnknownRoute:               http.StatusNotFound,
		CodeUnknownStream:              http.StatusNotFound,
		CodeSessionUnknown:             http.StatusNotFound,
		CodeNoMetadata:                 http.StatusNotFound,
		CodeMethodNotAllowed:           http.StatusMethodNotAllowed,
		CodeNoEndpoint:                 http.StatusConflict,
		CodeStreamClosed:               http.StatusGone,
		CodeHostNotAllowed:             http.StatusForbidden,
		CodeOriginNotAllowed:           http.StatusForbidden,
		CodeUpstreamUnreachable:        http.StatusBadGateway,
		CodeOAuthMetadata:              http.StatusBadGateway,
		session.DropFraming:            http.StatusBadGateway,
		CodeSessionConflict:            http.StatusBadGateway,
		CodeUpstreamTooLarge:           http.StatusBadGateway,
		edgeauth.CodeUnauthenticated:   http.StatusUnauthorized,
		edgeauth.CodeInvalidCredential: http.StatusUnauthorized,
		edgeauth.CodeSessionForbidden:  http.StatusForbidden,
	} {
		e, ok := coded.Lookup(string(code))
		if !ok || e.RPC == 0 || session.HTTPStatus(code) != status {
			t.Errorf("%s: registry %+v (%v), HTTP %d, want %d", code, e, ok, session.HTTPStatus(code), status)
		}
	}
	for _, code := range []session.Code{CodeUpstreamHTTP, CodeNoResponse} {
		if e, ok := coded.Lookup(string(code)); !ok || e.RPC == 0 {
			t.Errorf("%s: registry %+v (%v): a JSON-RPC error code is needed", code, e, ok)
		}
	}
}
