package jsonrpc

// The MCP vocabulary the proxy reads and writes: method names, _meta keys
// and protocol versions. One home for each, so that the session and the
// transports cannot drift apart on a spelling (issue 15).

// Methods the proxy decides on, sends itself, or lets pass by name.
const (
	MethodInitialize  = "initialize"
	MethodInitialized = "notifications/initialized"
	// MethodDiscover opens a 2026-07-28 exchange in place of initialize.
	MethodDiscover = "server/discover"
	MethodPing     = "ping"
	MethodSetLevel = "logging/setLevel"

	MethodToolsList             = "tools/list"
	MethodPromptsList           = "prompts/list"
	MethodResourcesList         = "resources/list"
	MethodResourceTemplatesList = "resources/templates/list"

	MethodToolsCall            = "tools/call"
	MethodPromptsGet           = "prompts/get"
	MethodResourcesRead        = "resources/read"
	MethodResourcesSubscribe   = "resources/subscribe"
	MethodResourcesUnsubscribe = "resources/unsubscribe"
	// MethodSubscriptionsListen holds a 2026-07-28 stream of change
	// notifications open.
	MethodSubscriptionsListen = "subscriptions/listen"

	MethodToolsListChanged     = "notifications/tools/list_changed"
	MethodPromptsListChanged   = "notifications/prompts/list_changed"
	MethodResourcesListChanged = "notifications/resources/list_changed"

	// NotificationPrefix begins the method of every notification, and of
	// nothing else.
	NotificationPrefix = "notifications/"
)

// Members and _meta keys.
const (
	// MetaKey is the member of params and results that carries metadata.
	MetaKey = "_meta"
	// MetaProtocolVersion and MetaClientCapabilities are the _meta keys of
	// a 2026-07-28 request that name its protocol version and its client's
	// capabilities (its listing variant); MetaClientInfo names the client.
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	// MetaCode is the key under which the proxy's own errors carry their
	// stable code: in a tool error's _meta, in a JSON-RPC error's data.
	MetaCode = "mcpdrift/code"
)

// Protocol versions the proxy tells apart. Versions are dates and compare
// as strings.
const (
	// ProtocolStateless is the first version of the stateless era
	// (server/discover, _meta, subscriptions/listen, the request metadata
	// headers Mcp-Method, Mcp-Name and Mcp-Param-*).
	ProtocolStateless = "2026-07-28"
	// Protocol20250618 is the version the proxy opens an older server in
	// when the server names none it speaks.
	Protocol20250618 = "2025-06-18"
)
