package streamhttp

import (
	"net/http"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/edgeauth"
)

// A session belongs to the agent that opened it (edgeauth: the request's
// authenticated agent, "" when the proxy does not authenticate agents):
// its session's config names that agent, so that every call and listing
// it reports carries it, and a request of another agent naming its
// Mcp-Session-Id (or HTTP+SSE session) is refused with 403
// session_forbidden, whatever it holds.

// agentOf is the authenticated agent of a request.
func agentOf(r *http.Request) string { return edgeauth.Agent(r.Context()) }

// ownedBy reports whether r's agent is owner, the agent that opened the
// session r names; when it is not, the request is refused.
func (f *front) ownedBy(w http.ResponseWriter, r *http.Request, owner string) bool {
	agent := agentOf(r)
	if agent == owner {
		return true
	}
	f.log.Warn().Str("code", string(edgeauth.CodeSessionForbidden)).Str("agent", agent).Str("owner", owner).
		Msg("a request on another agent's session refused")
	f.p.cfg.Refuse(w, http.StatusForbidden, edgeauth.CodeSessionForbidden)
	return false
}

// owned returns the tracked session sid names when r's agent opened it;
// otherwise it answers r (404 for a session the proxy does not know, with
// id as the error's id; 403 for another agent's) and returns nil.
func (f *front) owned(w http.ResponseWriter, r *http.Request, sid string, id []byte) *tracked {
	t := f.session(sid)
	if t == nil {
		unknownSession(w, id)
		return nil
	}
	if !f.ownedBy(w, r, t.agent) {
		return nil
	}
	return t
}
