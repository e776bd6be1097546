package streamhttp

import "github.com/mcpdrift/mcpdrift/services/proxy/internal/session"

// The stable codes of what the proxy answers itself on HTTP, beside the
// session's (session.DropCodes, the refusals): the same type, so the agent
// and the metrics read one vocabulary. Each is in the registry of codes
// (services/internal/coded, docs/codes.md), which gives its JSON-RPC error
// code and HTTP status (httpError).
const (
	// CodeInvalidMessage: the body is not JSON-RPC (session.Unreadable,
	// as on every transport), or names more than one Mcp-Session-Id.
	CodeInvalidMessage = session.InvalidMessage
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
	// CodeMessageTooLarge: a client's body over the limit
	// (session.TooLarge, as on every transport).
	CodeMessageTooLarge = session.MessageTooLarge
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
