package coded

import "slices"

// Area is who writes a code, and so where a client or an operator reads it.
type Area string

// The areas of the registry, in the order docs/codes.md lists them.
const (
	// AreaProxy: the proxy's answers to an agent, the same on every
	// transport (stdio, Streamable HTTP, HTTP+SSE): a tools/call refused
	// is an MCP tool error with the code in result._meta["mcpdrift/code"];
	// every other answer of the proxy's own is a JSON-RPC error with the
	// code in error.data["mcpdrift/code"]. Drops are counted in
	// mcpdrift_proxy_dropped_messages_total by code.
	AreaProxy Area = "proxy"
	// AreaProxyHTTP: the proxy's answers on HTTP only (routes, sessions,
	// headers, the upstream's HTTP), shaped as AreaProxy's.
	AreaProxyHTTP Area = "proxy-http"
	// AreaProxyOps: what the proxy logs or exits with, for its operator.
	AreaProxyOps Area = "proxy-ops"
	// AreaEngine: the fingerprint engine's errors (canonjson, surface):
	// Fingerprint.error_code, a status record's live_error, driftctl.
	AreaEngine Area = "engine"
	// AreaPolicy: a per-call policy document refused (the admin API's
	// errors list, driftctl).
	AreaPolicy Area = "policy"
	// AreaBus: dead letters (DeadLetter.code on mcpdrift.dead.<service>,
	// the code label of the dead-letter metrics) and the bus setup.
	AreaBus Area = "bus"
	// AreaFingerprint: Fingerprint.error_code of the fingerprint service's
	// own.
	AreaFingerprint Area = "fingerprint"
	// AreaVerdict: the reason of a Verdict and of a status record.
	AreaVerdict Area = "verdict"
	// AreaAdmin: the admin API's error bodies ({"error":{"code":…}}), the
	// review console's, and driftctl's "driftctl: <code>: …".
	AreaAdmin Area = "admin"
	// AreaAudit: the audit sink and the audit queries.
	AreaAudit Area = "audit"
	// AreaNotify: the notify service's refusals of its settings at start
	// ("notify: config: <code>: …", exit status 2).
	AreaNotify Area = "notify"
	// AreaDriftctl: driftctl's own errors ("driftctl: <code>: …").
	AreaDriftctl Area = "driftctl"
)

// Areas lists every area in order.
var Areas = []Area{AreaProxy, AreaProxyHTTP, AreaProxyOps, AreaEngine, AreaPolicy, AreaBus, AreaFingerprint, AreaVerdict, AreaAdmin, AreaAudit, AreaNotify, AreaDriftctl}

// Use is what a code means in one area.
type Use struct {
	Area  Area
	Means string
}

// Entry is one code of the registry.
type Entry struct {
	Code string
	Uses []Use
	// RPC is the JSON-RPC error code of the proxy's own error with this
	// code (0: the proxy answers none with it, or only tool errors).
	RPC int
	// HTTP is the status of an HTTP request the proxy answers with this
	// code alone (0: none, or the status depends: an upstream's).
	HTTP int
	// Tool: a tools/call the proxy refuses with this code gets an MCP tool
	// error (isError: true) rather than a JSON-RPC error.
	Tool bool
}

// JSON-RPC error codes of the proxy's own errors.
const (
	rpcInvalidRequest = -32600
	rpcInternal       = -32603
	rpcHeaderMismatch = -32020 // the Streamable HTTP transport's HeaderMismatch (2026-07-28)
)

// Lookup returns the registry's entry for code.
func Lookup(code string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(registry, code, func(e Entry, c string) int {
		switch {
		case e.Code < c:
			return -1
		case e.Code > c:
			return 1
		}
		return 0
	})
	if !ok {
		return Entry{}, false
	}
	return registry[i], true
}

// Registry returns every entry, sorted by code.
func Registry() []Entry { return slices.Clone(registry) }

func use(a Area, means string) []Use { return []Use{{a, means}} }

// registry is every code a client or an operator can see, sorted by code
// (TestRegistrySorted).
var registry = []Entry{
	{Code: "agent_credential_invalid", RPC: rpcInvalidRequest, HTTP: 401, Uses: use(AreaProxyHTTP, "The agent token or client certificate is not one the proxy accepts.")},
	{Code: "agent_unauthenticated", RPC: rpcInvalidRequest, HTTP: 401, Uses: use(AreaProxyHTTP, "The proxy authenticates agents and the request names none (no token, no client certificate).")},
	{Code: "ambiguous_envelope", Uses: use(AreaEngine, "A result object carries a JSON-RPC envelope of its own: which one a reader takes for the result is anyone's guess, so neither is hashed.")},
	{Code: "ambiguous_member", Uses: use(AreaEngine, "Member names that differ only in case, or a member a case-insensitive reader takes for a hashed field: the item reads two ways.")},
	{Code: "api_unreachable", Uses: use(AreaDriftctl, "The drift service's admin API did not answer, or broke off the verdict stream.")},
	{Code: "approval_conflict", Uses: use(AreaAdmin, "A held call's approval request changed while it was resolved: look again.")},
	{Code: "approval_expired", Uses: use(AreaAdmin, "The held call's proxy stopped waiting and refused the call.")},
	{Code: "approval_invalid", Uses: use(AreaAdmin, "An approval request that does not check out.")},
	{Code: "approval_resolved", Uses: use(AreaAdmin, "The held call was already approved or denied.")},
	{Code: "approvals_unavailable", Uses: use(AreaAdmin, "This drift service serves no approvals.")},
	{Code: "approved", Uses: use(AreaVerdict, "An admin approved the live surface: a new baseline version.")},
	{Code: "approved_items", Uses: use(AreaVerdict, "An admin approved the live definitions of some items (driftctl approve --item) as a new baseline version, and differences remain that nobody approved: the variant keeps its status (changed, pending, quarantined). A per-item approve after which the baseline is the live surface is an approve (approved).")},
	{Code: "audit_unavailable", Uses: use(AreaAdmin, "The action could not be audited, so it was not done (or was done and could not be audited).")},
	{Code: "auto_approved", Uses: use(AreaVerdict, "A benign drift under the guard posture became a new baseline version.")},
	{Code: "backup_invalid", Uses: use(AreaDriftctl, "driftctl unwrap: the wrap's backup or its record is unreadable or does not match.")},
	{Code: "bad_request", Uses: use(AreaAdmin, "The request's body or parameters are not of the documented shape.")},
	{Code: "baseline_downgrade", Uses: use(AreaAdmin, "A baseline import refused: the lockfile's baseline of a variant was approved no later than the baseline installed (an older lockfile, or another baseline of the same time); nothing was changed.")},
	{Code: "baseline_hashing_mismatch", Uses: use(AreaAdmin, "A baseline import refused: the lockfile's baseline was hashed with other settings (algorithm, annotations) than the installed variant's; re-baseline the variant first; nothing was changed.")},
	{Code: "bus_incomplete", Uses: use(AreaBus, "A stream, bucket or object store a service needs is missing (--bus-setup check): run the bus setup first.")},
	{Code: "capture_failed", Uses: use(AreaDriftctl, "driftctl capture could not capture the server.")},
	{Code: "clickhouse_error", Uses: use(AreaAudit, "ClickHouse refused an audit query or a row could not be read.")},
	{Code: "clickhouse_unreachable", Uses: use(AreaAudit, "ClickHouse could not be reached.")},
	{Code: "client_backlog", Uses: use(AreaProxy, "A notification or a request of the server's found the messages waiting to be delivered to the agent in order (behind a decision that waits) over their bound: dropped (a request so dropped is answered with this code in the agent's stead).")},
	{Code: "config_changed", Uses: use(AreaDriftctl, "driftctl wrap/unwrap: the configuration changed since the last wrap in a way the backup cannot undo; nothing was written.")},
	{Code: "config_invalid", Uses: use(AreaDriftctl, "driftctl wrap/unwrap: the host's MCP configuration is not JSON of the host's shape, or names a server the proxy cannot front.")},
	{Code: "config_unreadable", Uses: use(AreaDriftctl, "driftctl wrap/unwrap: the host's MCP configuration file could not be read.")},
	{Code: "creds_unreadable", Uses: use(AreaDriftctl, "The NATS credentials file could not be read.")},
	{Code: "csrf_invalid", Uses: use(AreaAdmin, "The review console refused a form from another site, or without its token.")},
	{Code: "drift", Uses: use(AreaVerdict, "The live surface differs from the approved baseline.")},
	{Code: "duplicate_item", Uses: use(AreaEngine, "Two items with the same name in one listing.")},
	{Code: "duplicate_key", Uses: use(AreaEngine, "A JSON object names the same member twice.")},
	{Code: "first_baseline", Uses: use(AreaVerdict, "The first complete manifest of a server became baseline v1 (trust on first use).")},
	{Code: "forbidden", Uses: use(AreaAdmin, "The token's role may not do this (a write needs the write role).")},
	{Code: "framing_invalid", RPC: rpcInternal, HTTP: 502, Uses: use(AreaProxy, "The transport could not frame the server's message exactly as a client would (a line over the stdio limit, an SSE stream, a Content-Type or Content-Encoding it cannot read the clients' way): dropped; a request it answered gets this error.")},
	{Code: "header_mismatch", RPC: rpcHeaderMismatch, HTTP: 400, Uses: use(AreaProxyHTTP, "A request metadata header (Mcp-Method, Mcp-Name, Mcp-Param-*) disagrees with the body, or is missing.")},
	{Code: "held_again", Uses: use(AreaAdmin, "The server was quarantined again while an approve lifted its hold: approve again.")},
	{Code: "host_not_allowed", RPC: rpcInvalidRequest, HTTP: 403, Uses: use(AreaProxyHTTP, "The request's Host is not one the listener allows (DNS rebinding).")},
	{Code: "imported", Uses: use(AreaVerdict, "A baseline was installed from a signed lockfile (driftctl baseline import); a variant never seen is verified before its first sight.")},
	{Code: "incomplete", Uses: use(AreaEngine, "The last page of a listing still had a nextCursor.")},
	{Code: "input_unreadable", Uses: use(AreaDriftctl, "driftctl could not read its input file.")},
	{Code: "internal", Uses: use(AreaAdmin, "The drift service failed on its side; the sentence says what.")},
	{Code: "invalid_capture", Uses: use(AreaEngine, "A capture not in the documented shape.")},
	{Code: "invalid_database", Uses: use(AreaAudit, "The ClickHouse database name is not a plain identifier.")},
	{Code: "invalid_destination", Uses: use(AreaNotify, "A --name that cannot name a destination's consumers (1 to 47 of A-Z a-z 0-9 _ -), or two destinations with one name.")},
	{Code: "invalid_event_id", Uses: use(AreaBus, "An event id too long to be stored.")},
	{Code: "invalid_field", Uses: use(AreaEngine, "A covered field of the wrong JSON type.")},
	{Code: "invalid_filter", Uses: use(AreaNotify, "A --filter that does not parse: an unknown field, kind, status or severity, a clause without an operator, an ordering on another field than severity.")},
	{Code: "invalid_id", Uses: []Use{
		{AreaBus, "A tenant, server or variant that is not 1 to 64 characters of A-Z a-z 0-9 _ -, or an event id that cannot be a message id."},
		{AreaAdmin, "A tenant, server, variant or approval id in a request that is not a valid id."},
	}},
	{Code: "invalid_json", Uses: use(AreaEngine, "Not JSON per RFC 8259.")},
	{Code: "invalid_message", RPC: rpcInvalidRequest, HTTP: 400, Uses: use(AreaProxy, "The agent's message is not a JSON-RPC message the proxy can read (invalid JSON, duplicate or case-variant members, not JSON-RPC 2.0), or an HTTP request names more than one Mcp-Session-Id.")},
	{Code: "invalid_replicas", Uses: use(AreaDriftctl, "--replicas is not a number from 1 to 5.")},
	{Code: "invalid_risk", Uses: use(AreaAdmin, "A risk band or mode the API does not know.")},
	{Code: "invalid_time", Uses: use(AreaBus, "An event time before 1970 or after 2100.")},
	{Code: "invalid_utf8", Uses: use(AreaEngine, "A string is not valid UTF-8.")},
	{Code: "invalid_webhook", Uses: use(AreaNotify, "A --webhook that is not an http or https URL with a host.")},
	{Code: "item_invalid", Uses: use(AreaAdmin, "A per-item approve named no item, or an item not as KIND:NAME (tool, prompt, resource, resourceTemplate, uiContent, promptMessages), instructions or server.")},
	{Code: "item_not_object", Uses: use(AreaEngine, "A tool, prompt or resource that is not a JSON object.")},
	{Code: "item_unchanged", Uses: use(AreaAdmin, "A per-item approve named an item whose live definition is its approved one: nothing of it to approve; nothing was changed.")},
	{Code: "item_unknown", Uses: use(AreaAdmin, "A per-item approve named an item that is neither in the baseline nor in the live surface; nothing was changed.")},
	{Code: "jetstream_unavailable", Uses: use(AreaDriftctl, "JetStream is not enabled for this NATS account.")},
	{Code: "jsonrpc_error", Uses: use(AreaEngine, "A JSON-RPC response that carries an error, not a listing.")},
	{Code: "key_invalid", Uses: use(AreaDriftctl, "driftctl baseline: a key file that is not an ed25519 key in PEM (a private key where a public one is expected, or the other way round); the drift service refuses to start on such a --baseline-keys file.")},
	{Code: "list_changed_coalesced", Uses: use(AreaProxy, "A list_changed of the server's while one of the same listings is held until the proxy has re-listed: dropped, the one held is delivered once the same re-listing is done.")},
	{Code: "listing_invalid", Tool: true, RPC: rpcInternal, Uses: use(AreaProxy, "The server's last tools listing could not be assembled (a hostile or broken page, a duplicate name, past the page limit, a repeated cursor), whatever the verdict: its calls are refused; a page the proxy cannot read as a client would is withheld whole with this error.")},
	{Code: "listing_pending", Tool: true, RPC: rpcInvalidRequest, Uses: use(AreaProxy, "The server announced a change of what it offers and the proxy's own re-listing did not complete within the first-sight bound.")},
	{Code: "lockfile_hash_mismatch", Uses: []Use{
		{AreaDriftctl, "driftctl baseline verify: a lockfile whose signature holds but an item definition of which does not hash to its item hash, or whose items do not make up the baseline hash (checked with the fingerprint engine)."},
		{AreaAdmin, "A baseline import refused for the same reason; nothing was changed."},
	}},
	{Code: "lockfile_key_unknown", Uses: []Use{
		{AreaDriftctl, "driftctl baseline verify/import: the lockfile is signed by a key that is not among the trusted ones (--key)."},
		{AreaAdmin, "A baseline import refused: the lockfile is signed by a key the drift service does not trust (--baseline-keys), or it trusts none; nothing was changed."},
	}},
	{Code: "lockfile_malformed", Uses: []Use{
		{AreaDriftctl, "driftctl baseline verify/import: not a lockfile of the format (not strict JSON, an unknown or missing field, an invalid id, a variant twice)."},
		{AreaAdmin, "A baseline import refused for the same reason, or naming another tenant or server than its path; nothing was changed."},
	}},
	{Code: "lockfile_signature_invalid", Uses: []Use{
		{AreaDriftctl, "driftctl baseline verify/import: the lockfile is not signed, or its signature does not verify: it was changed after it was signed."},
		{AreaAdmin, "A baseline import refused for the same reason; nothing was changed."},
	}},
	{Code: "lone_surrogate", Uses: use(AreaEngine, "A \\u escape is half a surrogate pair.")},
	{Code: "malformed_event", Uses: use(AreaBus, "Not the event (or encoding) its subject carries, or without a field it needs.")},
	{Code: "message_too_large", RPC: rpcInvalidRequest, HTTP: 413, Uses: use(AreaProxy, "The agent's message is over the limit (a stdio line, an HTTP body; 64 MiB by default): dropped unread.")},
	{Code: "method_not_allowed", RPC: rpcInvalidRequest, HTTP: 405, Uses: use(AreaProxyHTTP, "An HTTP method the route does not take.")},
	{Code: "missing_name", Uses: use(AreaEngine, "An item with no name (uri, uriTemplate), or an empty one.")},
	{Code: "missing_tools", Uses: use(AreaEngine, "A surface with no tools/list at all.")},
	{Code: "nats_error", Uses: use(AreaDriftctl, "NATS answered the bus setup with an error it does not explain otherwise.")},
	{Code: "nats_unreachable", Uses: use(AreaDriftctl, "No NATS server answered in time.")},
	{Code: "no_baseline", Uses: use(AreaAdmin, "A diff was asked of a variant that has never been approved.")},
	{Code: "no_endpoint", RPC: rpcInvalidRequest, HTTP: 409, Uses: use(AreaProxyHTTP, "HTTP+SSE: the server has not named its message endpoint yet.")},
	{Code: "not_found", Uses: use(AreaAdmin, "No such server, variant, approval request, endpoint or page.")},
	{Code: "not_verified", Uses: use(AreaAdmin, "A re-baseline of a variant that is not verified at its baseline: approve or quarantine it first.")},
	{Code: "not_wrapped", Uses: use(AreaDriftctl, "driftctl unwrap: the configuration has no backup of a wrap to restore.")},
	{Code: "nothing_to_approve", Uses: use(AreaAdmin, "No live manifest to approve.")},
	{Code: "nothing_to_rebaseline", Uses: use(AreaAdmin, "The policy asks for the hashing settings the variant already has, or the manifest for the new ones is not at hand yet.")},
	{Code: "number_inexact", Uses: use(AreaEngine, "A number, in any notation, whose exact value is not the double it reads as (9007199254740993, 1.00000000000000000001, 0.30000000000000000000001).")},
	{Code: "number_out_of_range", Uses: use(AreaEngine, "A number that overflows to infinity, underflows to zero, or is below the smallest normal double (a subnormal such as 5e-324).")},
	{Code: "oauth_metadata_invalid", RPC: rpcInvalidRequest, HTTP: 502, Uses: use(AreaProxyHTTP, "The upstream's protected-resource or authorization server metadata could not be read or was refused (a resource that is not the upstream's).")},
	{Code: "oauth_metadata_missing", RPC: rpcInvalidRequest, HTTP: 404, Uses: use(AreaProxyHTTP, "The upstream publishes no protected-resource metadata.")},
	{Code: "origin_not_allowed", RPC: rpcInvalidRequest, HTTP: 403, Uses: use(AreaProxyHTTP, "The request's Origin is not one the listener allows (a browser on another site).")},
	{Code: "other", Uses: use(AreaProxyOps, "The code label of a refusal whose code the proxy's metrics do not know.")},
	{Code: "output_unwritable", Uses: use(AreaDriftctl, "driftctl could not write its output file (baseline keygen: the file exists; a key is never overwritten).")},
	{Code: "partitions_mismatch", Uses: use(AreaBus, "The streams' partition count differs from --partitions.")},
	{Code: "pending_approval", Uses: use(AreaVerdict, "Never seen before; the strict posture waits for an admin to approve it.")},
	{Code: "permission_denied", Uses: use(AreaDriftctl, "NATS refused the bus setup a request: it needs the NATS administrator's rights.")},
	{Code: "policy_approval_denied", Tool: true, Uses: use(AreaProxy, "The call was held for approval and an admin denied it.")},
	{Code: "policy_approval_in_batch", Tool: true, Uses: use(AreaProxy, "A call that needs approval inside a JSON-RPC batch, whose answer cannot wait apart from the others.")},
	{Code: "policy_approval_timeout", Tool: true, Uses: use(AreaProxy, "The call was held for approval and nobody resolved it within the proxy's bound (--approval-wait).")},
	{Code: "policy_approval_unavailable", Tool: true, Uses: use(AreaProxy, "The call needed approval and the request could not be delivered to the drift service, or the agent went away.")},
	{Code: "policy_bad_action", Uses: use(AreaPolicy, "A missing or unknown action.")},
	{Code: "policy_bad_band", Uses: use(AreaPolicy, "An unknown risk band.")},
	{Code: "policy_bad_cidr", Uses: use(AreaPolicy, "A cidr_match value that is no CIDR or address.")},
	{Code: "policy_bad_glob", Uses: use(AreaPolicy, "A server, tool or agent glob that can match nothing valid.")},
	{Code: "policy_bad_id", Uses: use(AreaPolicy, "A rule id outside the name rules.")},
	{Code: "policy_bad_mode", Uses: use(AreaPolicy, "An unknown risk mode.")},
	{Code: "policy_bad_op", Uses: use(AreaPolicy, "An unknown operator.")},
	{Code: "policy_bad_path", Uses: use(AreaPolicy, "An argument path outside the supported JSONPath subset.")},
	{Code: "policy_bad_redact", Uses: use(AreaPolicy, "Sanitize without redact paths, or redact on another action.")},
	{Code: "policy_bad_regex", Uses: use(AreaPolicy, "A regex RE2 does not compile.")},
	{Code: "policy_bad_server", Uses: use(AreaPolicy, "A setting's server outside the name rules.")},
	{Code: "policy_bad_setting", Uses: use(AreaPolicy, "An unknown posture, on_drift or hash.")},
	{Code: "policy_bad_syntax", Uses: use(AreaPolicy, "Not YAML or JSON, or more than one document.")},
	{Code: "policy_bad_tenant", Uses: use(AreaPolicy, "A tenant outside the name rules.")},
	{Code: "policy_bad_type", Uses: use(AreaPolicy, "A field of the wrong type.")},
	{Code: "policy_bad_value", Uses: use(AreaPolicy, "A clause value that does not fit its operator.")},
	{Code: "policy_clear_named", Uses: use(AreaAdmin, "A tenant both cleared and named by the policy document.")},
	{Code: "policy_conflict", Uses: use(AreaAdmin, "A tenant's policy changed while the apply was writing: nothing was applied; apply again.")},
	{Code: "policy_deny", Tool: true, Uses: use(AreaProxy, "A deny rule of the tenant's policy matched the call.")},
	{Code: "policy_duplicate_id", Uses: use(AreaPolicy, "Two rules of a tenant with the same id.")},
	{Code: "policy_duplicate_setting", Uses: use(AreaPolicy, "Two drift or risk settings for the same tenant and server.")},
	{Code: "policy_invalid", Tool: true, Uses: []Use{
		{AreaProxy, "The only stored policy the proxy has seen is invalid, or a rule's action is unknown: no call is forwarded."},
		{AreaAdmin, "The policy document was refused; its errors list says why (the policy codes)."},
	}},
	{Code: "policy_missing_id", Uses: use(AreaPolicy, "A rule without an id.")},
	{Code: "policy_missing_tenant", Uses: use(AreaPolicy, "A rule or setting without a tenant.")},
	{Code: "policy_risk_block", Tool: true, Uses: use(AreaProxy, "The server's risk mode is block (or unknown, read as block).")},
	{Code: "policy_risk_quarantine", Uses: use(AreaProxy, "The server's risk mode is quarantine: the call is held for an admin's approval (the action a policy test reports).")},
	{Code: "policy_sanitize_failed", Tool: true, Uses: use(AreaProxy, "A sanitize rule matched and the arguments could not be redacted: the call is not forwarded unredacted.")},
	{Code: "policy_stored_invalid", Uses: use(AreaAdmin, "The stored policy of the tenant does not compile.")},
	{Code: "policy_too_large", Uses: use(AreaPolicy, "A document past the limits (bytes, rules, clauses).")},
	{Code: "policy_unavailable", Uses: use(AreaAdmin, "This drift service has no policy bucket.")},
	{Code: "policy_unknown", Tool: true, Uses: use(AreaProxy, "The proxy has never known its tenant's policy (NATS unreachable since it started and no copy on disk): no call is forwarded.")},
	{Code: "policy_unknown_field", Uses: use(AreaPolicy, "A field the document format does not have.")},
	{Code: "policy_unreadable_arguments", Tool: true, Uses: use(AreaProxy, "A rule needed the call's arguments and they cannot be read one way only.")},
	{Code: "prompt_get_limit", Uses: use(AreaProxy, "The proxy's own prompts/get of a server's prompts that take no arguments went past their bound (32 prompts, or 16 MiB shared with the ui:// reads): what is past it is not got, and the surface published fails, so the server is held.")},
	{Code: "prompt_messages_not_approved", RPC: rpcInvalidRequest, Uses: use(AreaProxy, "prompts/get of a prompt that declares no arguments whose returned messages (what a host puts into the model's context) are not the approved ones, new or changed, or cannot be judged; under on_drift alert they are passed on and published.")},
	{Code: "prompt_not_approved", RPC: rpcInvalidRequest, Uses: use(AreaProxy, "prompts/get of a prompt the baseline does not approve (new, or changed since; under on_drift withhold_changed also one the server no longer lists).")},
	{Code: "proxy_url_required", Uses: use(AreaDriftctl, "driftctl wrap: the configuration has HTTP servers and no --proxy-url was given.")},
	{Code: "quarantined", Uses: use(AreaVerdict, "An admin quarantined the server.")},
	{Code: "rebaselined", Uses: use(AreaVerdict, "The baseline was hashed again with the settings the tenant's policy asks for.")},
	{Code: "replicas_unavailable", Uses: use(AreaDriftctl, "The NATS server or cluster cannot place the replicas asked for.")},
	{Code: "request_ambiguous", Tool: true, RPC: rpcInvalidRequest, Uses: use(AreaProxy, "The request's params have member names that differ only in case: the proxy and a case-insensitive server would read two different requests. Or its id is that of another request of the session still in flight: the server's answer would be taken for either's.")},
	{Code: "request_unroutable", Uses: use(AreaProxy, "A request of the server's sent where no agent reads it (on the answer to a request of the proxy's own): not delivered; the server gets an error with this code in the agent's stead (a ping, an empty result), so that it does not wait for an answer that cannot come.")},
	{Code: "resource_not_approved", RPC: rpcInvalidRequest, Uses: use(AreaProxy, "resources/read (or subscribe) of a resource the server lists but the baseline does not approve; under on_drift withhold_changed also one it no longer lists, and one read through a changed resource template.")},
	{Code: "response_missing", RPC: rpcInternal, Uses: use(AreaProxyHTTP, "The server's answer (a JSON body, an event stream that ended) held no response to a forwarded request.")},
	{Code: "response_unmatched", Uses: use(AreaProxy, "A response from the server to no request the agent has pending: dropped.")},
	{Code: "retries_exhausted", Uses: use(AreaBus, "A transient failure outlasted the consumer's deliveries.")},
	{Code: "secret_unreadable", Uses: use(AreaNotify, "The --secret-file cannot be read, or is empty.")},
	{Code: "server_backlog", Uses: use(AreaProxy, "A message of the proxy's own to the server (a re-listing, an answer in the agent's stead) found its queue full (stdio: a server that does not read its input) or its requests in flight at their bound (HTTP): not sent; a listing it was for is distrusted until listed again.")},
	{Code: "server_changed", Tool: true, RPC: rpcInvalidRequest, Uses: use(AreaProxy, "The server's listing differs from the approved baseline (or its status is changed); under on_drift withhold_changed: its instructions changed, or the request names no item.")},
	{Code: "server_closed", RPC: rpcInternal, Uses: use(AreaProxy, "A notification of any kind or a request of a server whose status does not serve (closed: a closed server is silent on every channel): dropped and counted; a request gets this error in the agent's stead (a ping, the proxy's own empty answer).")},
	{Code: "server_id_conflict", Uses: use(AreaDriftctl, "driftctl wrap: two server entries would get the same proxy server id.")},
	{Code: "server_pending", Tool: true, RPC: rpcInvalidRequest, Uses: use(AreaProxy, "The server has no approved baseline yet (strict posture).")},
	{Code: "server_quarantined", Tool: true, RPC: rpcInvalidRequest, Uses: use(AreaProxy, "An admin quarantined the server.")},
	{Code: "server_unknown", Tool: true, RPC: rpcInvalidRequest, Uses: use(AreaProxy, "No verdict on the server's listing variant yet (or a session that has not sent initialize).")},
	{Code: "session_conflict", RPC: rpcInternal, HTTP: 502, Uses: use(AreaProxyHTTP, "An initialize answer named a session already open through the proxy.")},
	{Code: "session_forbidden", RPC: rpcInvalidRequest, HTTP: 403, Uses: use(AreaProxyHTTP, "A request of one agent on a session another agent opened.")},
	{Code: "session_unknown", RPC: rpcInvalidRequest, HTTP: 404, Uses: use(AreaProxyHTTP, "An Mcp-Session-Id the proxy did not register (or the server ended): initialize a new session.")},
	{Code: "sessions_unavailable", Uses: use(AreaAdmin, "The review console could not read or write its sessions in NATS (the mcpdrift_sessions bucket): a console login is refused with 503 until it can; bearer tokens still work.")},
	{Code: "setup_failed", Uses: use(AreaDriftctl, "An object of the bus is missing right after the setup.")},
	{Code: "setup_refused", Uses: use(AreaDriftctl, "JetStream refused to create or update an object of the bus.")},
	{Code: "site_mirror_mismatch", Uses: use(AreaBus, "A bucket of a site exists but does not mirror what the setup would: delete it and set up the site again.")},
	{Code: "stale_hash", Uses: use(AreaAdmin, "The hash approved is not the live manifest's: review what is live and approve that hash.")},
	{Code: "status_permission_denied", Uses: use(AreaProxyOps, "NATS refuses the proxy its tenant's status watch or the baselines' item hashes: its user lacks the proxy role's permissions.")},
	{Code: "stream_closed", RPC: rpcInvalidRequest, HTTP: 410, Uses: use(AreaProxyHTTP, "HTTP+SSE: the agent's event stream ended, so the proxy's answer cannot reach it.")},
	{Code: "subject_mismatch", Uses: use(AreaBus, "The event names another tenant, server or service than its subject.")},
	{Code: "timeout", Uses: use(AreaDriftctl, "NATS did not answer the bus setup within --timeout.")},
	{Code: "too_deep", Uses: use(AreaEngine, "JSON nesting past the limit.")},
	{Code: "too_large", Uses: []Use{
		{AreaEngine, "Input past the size limit."},
		{AreaDriftctl, "An input file over driftctl's limit."},
	}},
	{Code: "too_many_items", Uses: use(AreaEngine, "More items than the limit.")},
	{Code: "tool_not_approved", Tool: true, Uses: use(AreaProxy, "tools/call of a tool the baseline does not approve (new, or changed since; under on_drift withhold_changed also one the server no longer lists).")},
	{Code: "trailing_data", Uses: use(AreaEngine, "Bytes after the top-level JSON value.")},
	{Code: "ui_content_not_approved", RPC: rpcInvalidRequest, Uses: use(AreaProxy, "resources/read of a ui:// resource (MCP Apps) whose returned contents (the HTML a host renders, each content's _meta) are not the approved ones, new or changed, or cannot be judged; under on_drift alert they are passed on and published.")},
	{Code: "ui_link_not_approved", Tool: true, Uses: use(AreaProxy, "tools/call of a tool whose UI link (_meta.ui.resourceUri, ui/resourceUri, openai/outputTemplate) names a resource the baseline does not approve or the server's last listing does not list as approved.")},
	{Code: "ui_read_limit", Uses: use(AreaProxy, "The proxy's own reads of a server's ui:// resources went past their bound (32 resources, or 16 MiB shared with the prompts/get of prompts that take no arguments): what is past it is not read, and the surface published fails, so the server is held.")},
	{Code: "unauthenticated", Uses: use(AreaAdmin, "A valid bearer token (or console session) is required.")},
	{Code: "unavailable", Uses: use(AreaAdmin, "A part of the drift service the request needs is not running (the verdict stream, the audit queries).")},
	{Code: "unfingerprintable", Uses: []Use{
		{AreaFingerprint, "The engine failed without a code of its own: fail closed."},
		{AreaVerdict, "The live manifest could not be fingerprinted."},
		{AreaAdmin, "An approve of a live manifest that could not be fingerprinted: nothing sound to approve."},
	}},
	{Code: "unknown_client", Uses: use(AreaDriftctl, "driftctl wrap/unwrap: --client names no agent host it knows (claude-desktop, claude-code, cursor, vscode).")},
	{Code: "unknown_format", Uses: []Use{
		{AreaEngine, "Not a list result, a JSON-RPC response or a capture."},
		{AreaNotify, "A --format other than json, slack or cloudevents."},
	}},
	{Code: "unknown_hashing", Uses: use(AreaFingerprint, "The server's settings name a hash algorithm the fingerprint service does not know.")},
	{Code: "unknown_route", RPC: rpcInvalidRequest, HTTP: 404, Uses: use(AreaProxyHTTP, "The server id is known but the route is not one of its.")},
	{Code: "unknown_server", RPC: rpcInvalidRequest, HTTP: 404, Uses: use(AreaProxyHTTP, "No MCP server with this id behind the proxy.")},
	{Code: "unknown_session", RPC: rpcInvalidRequest, HTTP: 404, Uses: use(AreaProxyHTTP, "HTTP+SSE: no open event stream with this session id.")},
	{Code: "unknown_subject", Uses: use(AreaBus, "A subject in a consumed stream that carries no event the service knows.")},
	{Code: "unsupported_by_server", Uses: use(AreaAudit, "The ClickHouse server is too old for a setting asked for (a retention needs 19.6).")},
	{Code: "upstream_ambiguous", RPC: rpcInternal, Uses: use(AreaProxy, "The server's message parses but reads two ways (a result with an envelope of its own, an id a client coerces): dropped; a request it answered gets this error.")},
	{Code: "upstream_http_error", RPC: rpcInternal, Uses: use(AreaProxyHTTP, "The server answered other than 2xx: each forwarded request gets this error, under the server's status.")},
	{Code: "upstream_message_too_large", RPC: rpcInternal, HTTP: 502, Uses: use(AreaProxyHTTP, "The server's answer is over the limit (decoded).")},
	{Code: "upstream_unreachable", RPC: rpcInvalidRequest, HTTP: 502, Uses: use(AreaProxyHTTP, "The server behind the proxy could not be reached.")},
	{Code: "upstream_unreadable", RPC: rpcInternal, Uses: use(AreaProxy, "The proxy's strict parser refuses the server's message (invalid JSON or UTF-8, duplicate members, lone surrogates, absurd nesting): dropped; a request it answered gets this error.")},
	{Code: "variant_ambiguous", Uses: use(AreaAdmin, "The action needs one listing variant and the server has several it could mean: name one (--variant).")},
	{Code: "variant_matched", Uses: use(AreaVerdict, "A new listing variant whose every item equals a definition approved for another variant: verified without an admin.")},
	{Code: "variant_unmatched", Uses: use(AreaVerdict, "A new listing variant with an item no other variant approved: withheld.")},
	{Code: "write_failed", Uses: use(AreaDriftctl, "driftctl wrap/unwrap: the configuration or its backup could not be written; the file is as it was.")},
}
