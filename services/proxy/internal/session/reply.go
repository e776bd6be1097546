package session

import (
	"strconv"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// The one reply path. Every JSON-RPC error the proxy writes itself, to an
// agent or to a server in the agent's stead, on any transport, is made by
// Reply, and its shape is its code's entry in the registry of codes
// (coded.Lookup): the JSON-RPC error code, and over HTTP the status
// (HTTPStatus). A refused tools/call is the one other shape, an MCP tool
// error (ToolError). No transport picks a JSON-RPC code of its own, so the
// same event gets the same bytes on stdio, Streamable HTTP and HTTP+SSE;
// what a transport cannot read of the agent's is answered by Unreadable
// and TooLarge, on every transport alike.

// Client messages the proxy cannot take, on every transport.
const (
	// InvalidMessage: the agent's message is not a JSON-RPC message the
	// proxy can read (Unreadable); on HTTP also a request that names more
	// than one Mcp-Session-Id.
	InvalidMessage Code = "invalid_message"
	// MessageTooLarge: the agent's message is over the transport's limit
	// (TooLarge).
	MessageTooLarge Code = "message_too_large"
)

// rpcFallback is the JSON-RPC error code of a code the registry gives no
// shape (none: TestRepliesHaveShapes).
const rpcFallback = -32603

// Reply returns the proxy's JSON-RPC error with code: the registry's
// JSON-RPC error code for it, text as the message, code under
// mcpdrift/code in its data, and id exactly as the request wrote it (null
// when nil).
func Reply(id []byte, code Code, text string) []byte {
	rpc := rpcFallback
	if e, ok := coded.Lookup(string(code)); ok && e.RPC != 0 {
		rpc = e.RPC
	}
	return jsonrpc.ErrorResponseData(id, rpc, text, string(code))
}

// HTTPStatus is the status of an HTTP request the proxy answers with code
// alone: the registry's (502 Bad Gateway for a code it gives none).
func HTTPStatus(code Code) int {
	if e, ok := coded.Lookup(string(code)); ok && e.HTTP != 0 {
		return e.HTTP
	}
	return 502
}

// ToolError is the tools/call result the client gets for a refused call:
// an MCP tool error (isError: true) with code, echoing the request's id.
func ToolError(id []byte, code Code, text string) []byte {
	return jsonrpc.ToolError(id, string(code), text)
}

// Unreadable is the answer to an agent's message the proxy cannot read
// (err is jsonrpc.Split's): the same on every transport.
func Unreadable(err error) []byte {
	return Reply(nil, InvalidMessage, "mcpdrift proxy: unreadable JSON-RPC message: "+err.Error())
}

// TooLarge is the answer to an agent's message over limit bytes, dropped
// unread: the same on every transport.
func TooLarge(limit int) []byte {
	return Reply(nil, MessageTooLarge, "mcpdrift proxy: the message is over the limit of "+strconv.Itoa(limit)+" bytes; it was dropped unread")
}
