package streamhttp

import "github.com/mcpdrift/mcpdrift/services/proxy/internal/session"

// The stable codes of what the proxy answers itself on HTTP, beside the
// session's (session.DropCodes, the refusals): the same type, so the agent
// and the metrics read one vocabulary (docs/services/proxy-http.md).
const (
	// CodeInvalidMessage: the body is not JSON-RPC, or names more than one
	// Mcp-Session-Id.
	CodeInvalidMessage session.Code = "invalid_message"
	// CodeHeaderMismatch: a request metadata header disagrees with the
	// body or is missing (JSON-RPC error -32020).
	CodeHeaderMismatch session.Code = "header_mismatch"
	// CodeUnknownServer and CodeUnknownRoute: no such server id or route.
	CodeUnknownServer session.Code = "unknown_server"
	CodeUnknownRoute  session.Code = "unknown_route"
	// CodeUnknownStream: HTTP+SSE: no open event stream with that session.
	CodeUnknownStream session.Code = "unknown_session"
	// CodeMethodNotAllowed: an HTTP method the route does not take.
	CodeMethodNotAllowed session.Code = "method_not_allowed"
	// CodeNoEndpoint: HTTP+SSE: the server has not named its message URL.
	CodeNoEndpoint session.Code = "no_endpoint"
	// CodeStreamClosed: HTTP+SSE: the client's stream ended.
	CodeStreamClosed session.Code = "stream_closed"
	// CodeMessageTooLarge: a client's body over the limit.
	CodeMessageTooLarge session.Code = "message_too_large"
	// CodeSessionUnknown: a session id the proxy did not register.
	CodeSessionUnknown session.Code = "session_unknown"
	// CodeSessionConflict: an initialize answer named a session already open.
	CodeSessionConflict session.Code = "session_conflict"
	// CodeUpstreamUnreachable: the server could not be reached.
	CodeUpstreamUnreachable session.Code = "upstream_unreachable"
	// CodeUpstreamTooLarge: the server's answer is over the limit (decoded).
	CodeUpstreamTooLarge session.Code = "upstream_message_too_large"
	// CodeUpstreamHTTP: the server answered other than 2xx.
	CodeUpstreamHTTP session.Code = "upstream_http_error"
	// CodeNoResponse: the server's answer held no response to a request.
	CodeNoResponse session.Code = "response_missing"
)
