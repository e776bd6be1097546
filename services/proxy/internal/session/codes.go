package session

import (
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// Code is a stable code the proxy gives what it refuses or drops. One type
// for both ends: the agent reads it (under jsonrpc.MetaCode, in a tool
// error's _meta or a JSON-RPC error's data), and the proxy's metrics count
// by it (the code label of mcpdrift_proxy_refused_calls_total,
// _alerted_calls_total and _dropped_messages_total). The transports define
// the codes particular to them with this type too.
type Code string

// Refusals: requests the proxy answers itself rather than forwarding.
const (
	// RefuseServerChanged: the server's listing differs from the approved
	// baseline (or its status is changed).
	RefuseServerChanged Code = "server_changed"
	// RefuseServerPending and RefuseServerQuarantined: the status of the
	// server (RefuseServer names any other).
	RefuseServerPending     Code = "server_pending"
	RefuseServerQuarantined Code = "server_quarantined"
	// RefuseServerUnknown: no verdict on the server's listing variant.
	RefuseServerUnknown Code = "server_unknown"
	// RefuseToolNotApproved: tools/call of a tool the baseline does not
	// approve (new, or changed since).
	RefuseToolNotApproved Code = "tool_not_approved"
	// RefusePromptNotApproved: prompts/get of a prompt the baseline does not
	// approve (new, or changed since).
	RefusePromptNotApproved Code = "prompt_not_approved"
	// RefuseResourceNotApproved: resources/read (or subscribe) of a
	// resource the server lists but the baseline does not approve.
	RefuseResourceNotApproved Code = "resource_not_approved"
	// RefuseUIContentNotApproved: resources/read of a ui:// resource
	// (MCP Apps) whose returned contents are not the approved ones (new or
	// changed), or cannot be judged.
	RefuseUIContentNotApproved Code = "ui_content_not_approved"
	// RefusePromptMessagesNotApproved: prompts/get of a prompt that
	// declares no arguments whose returned messages are not the approved
	// ones (new or changed), or cannot be judged.
	RefusePromptMessagesNotApproved Code = "prompt_messages_not_approved"
	// RefuseUILinkNotApproved: tools/call of a tool whose UI link names a
	// resource the baseline does not approve or the server does not list.
	RefuseUILinkNotApproved Code = "ui_link_not_approved"
	// RefuseListingInvalid: the server's last tools listing could not be
	// assembled, whatever the verdict; also what a listing page the proxy
	// cannot read as a client would is withheld with.
	RefuseListingInvalid Code = "listing_invalid"
	// RefuseListingPending: the server announced a change of its listing
	// and the proxy's own re-listing did not complete within the bound.
	RefuseListingPending Code = "listing_pending"
	// RefuseAmbiguous: the request's params have member names that differ
	// only in case ("name" and "Name"): the proxy and a case-insensitive
	// server (Go's encoding/json) would read two different requests. Or
	// its id is that of another request of the client's still in flight:
	// the server's answer would be taken for either's.
	RefuseAmbiguous Code = "request_ambiguous"
)

// Policy refusals: a tools/call the per-call policy does not let through
// (docs/policy-enforcement.md). Each answers a tool error whose text begins
// "policy deny: ".
const (
	// PolicyDeny: a deny rule matched.
	PolicyDeny Code = "policy_deny"
	// PolicyRiskBlock: the server's risk mode is block (policy.CodeRiskBlock).
	PolicyRiskBlock Code = policy.CodeRiskBlock
	// PolicyUnreadableArguments: a rule's clauses needed the arguments and
	// they cannot be read one way only (policy.CodeUnreadableArgs).
	PolicyUnreadableArguments Code = policy.CodeUnreadableArgs
	// PolicyApprovalDenied: the call was held for approval and an admin
	// denied it.
	PolicyApprovalDenied Code = "policy_approval_denied"
	// PolicyApprovalTimeout: the call was held for approval and nobody
	// resolved it within the proxy's bound (--approval-wait).
	PolicyApprovalTimeout Code = "policy_approval_timeout"
	// PolicyApprovalUnavailable: the call needed approval and the request
	// could not be delivered to the drift service (NATS or the drift
	// service unreachable for the whole bound), or the client went away.
	PolicyApprovalUnavailable Code = "policy_approval_unavailable"
	// PolicyApprovalInBatch: a call that needs approval inside a JSON-RPC
	// batch (2025-03-26), whose answer cannot wait apart from the others.
	PolicyApprovalInBatch Code = "policy_approval_in_batch"
	// PolicyUnknown: the proxy has never known its tenant's policy (NATS
	// unreachable since it started and no valid copy on disk).
	PolicyUnknown Code = "policy_unknown"
	// PolicyInvalid: the only stored policy the proxy has seen is invalid
	// (no good one to keep), or a rule's action is unknown.
	PolicyInvalid Code = "policy_invalid"
	// PolicySanitizeFailed: a sanitize rule matched and the arguments could
	// not be redacted: the call is not forwarded unredacted.
	PolicySanitizeFailed Code = "policy_sanitize_failed"
)

// PolicyCodes lists the policy refusal codes.
var PolicyCodes = []Code{PolicyDeny, PolicyRiskBlock, PolicyUnreadableArguments, PolicyApprovalDenied, PolicyApprovalTimeout, PolicyApprovalUnavailable,
	PolicyApprovalInBatch, PolicyUnknown, PolicyInvalid, PolicySanitizeFailed}

// RefuseServer is the refusal of a request to a server whose status does
// not serve: server_<status>.
func RefuseServer(status string) Code { return Code("server_" + status) }

// RefusalCodes are the codes a tools/call is refused with.
var RefusalCodes = []Code{RefuseServerChanged, RefuseServerPending, RefuseServerQuarantined, RefuseServerUnknown,
	RefuseToolNotApproved, RefuseUILinkNotApproved, RefuseListingInvalid, RefuseListingPending, RefuseAmbiguous,
	PolicyDeny, PolicyRiskBlock, PolicyUnreadableArguments, PolicyApprovalDenied, PolicyApprovalTimeout,
	PolicyApprovalUnavailable, PolicyApprovalInBatch, PolicyUnknown, PolicyInvalid, PolicySanitizeFailed}

// AlertCodes are the refusals the alert posture forwards a call despite
// (Call.AlertCode).
var AlertCodes = []Code{RefuseServerChanged, RefuseToolNotApproved, RefuseUILinkNotApproved}

// Drops: why a message from upstream is dropped rather than delivered (the
// error a pending request gets instead carries the code).
const (
	// DropUnreadable: the proxy's strict parser refuses the message
	// (invalid JSON or UTF-8, duplicate or case-variant member names, lone
	// surrogates, absurd nesting or size): a client's parser might read it
	// some other way, so nobody reads it.
	DropUnreadable Code = "upstream_unreadable"
	// DropAmbiguous: the message parses but can be read two ways (a result
	// that carries a JSON-RPC envelope of its own, ids a client coerces).
	DropAmbiguous Code = "upstream_ambiguous"
	// DropUnmatched: a response for no request the client has pending (a
	// second answer, an answer to nothing, an id written another way).
	DropUnmatched Code = "response_unmatched"
	// DropFraming: the transport could not frame a message exactly as a
	// client would (an SSE stream, a Content-Type or Content-Encoding it
	// cannot read the clients' way).
	DropFraming Code = "framing_invalid"
	// DropServerClosed: a notification of any kind, or a request, of a
	// server whose status does not serve: a closed server is silent on
	// every channel (logging, progress, resource updates, list_changed,
	// sampling, elicitation, roots, ping).
	DropServerClosed Code = "server_closed"
	// DropServerBacklog: a message of the proxy's own to the server (a
	// re-listing, an answer in the agent's stead) found the queue to the
	// server full (a server that does not read what it is sent): not
	// sent; a listing it was for is distrusted until listed again.
	DropServerBacklog Code = "server_backlog"
	// DropCoalesced: a list_changed of listings a list_changed held until
	// the proxy has re-listed already covers: not delivered, the one held
	// says the same once the same re-listing is done.
	DropCoalesced Code = "list_changed_coalesced"
	// DropBacklog: a notification or a request of the server's found the
	// messages waiting to be delivered to the client in order over their
	// bound (behind a decision that waits): not delivered.
	DropBacklog Code = "client_backlog"
	// DropUIReadLimit: the proxy's own reads of the server's UI resources
	// went past their bound (MaxUIReads resources, MaxUIReadBytes bytes):
	// what is past it is not read, and the surface published fails (its
	// capture holds a placeholder the engine refuses), so the server is
	// held.
	DropUIReadLimit Code = "ui_read_limit"
	// DropPromptGetLimit: the proxy's own gets of the server's
	// argument-less prompts went past their bound (MaxPromptGets prompts,
	// or MaxUIReadBytes bytes shared with the UI reads): what is past it is
	// not got, and the surface published fails, so the server is held.
	DropPromptGetLimit Code = "prompt_get_limit"
	// DropUnroutable: a request of the server's sent where no client
	// reads (on the answer to a request of the proxy's own): not
	// delivered; the server gets an error with this code in the client's
	// stead (a ping, the proxy's own empty result), so that it does not
	// wait for an answer that cannot come.
	DropUnroutable Code = "request_unroutable"
)

// DropCodes lists every drop code.
var DropCodes = []Code{DropUnreadable, DropAmbiguous, DropUnmatched, DropFraming, DropServerClosed, DropServerBacklog, DropCoalesced, DropBacklog, DropUIReadLimit, DropPromptGetLimit, DropUnroutable}
