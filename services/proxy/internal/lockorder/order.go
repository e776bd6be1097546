package lockorder

// The lock classes of the proxy: one per mutex field, named type.field as
// the field is declared in its package.
type (
	SessionMu       struct{} // session.Session.mu
	SessionPubMu    struct{} // session.Session.pubMu
	RequestsMu      struct{} // session.requests.mu
	InitPinMu       struct{} // session.initPin.mu
	ToolsMemoryMu   struct{} // session.toolsMemory.mu
	RelistsMu       struct{} // session.relists.mu
	ParamBookMu     struct{} // streamhttp.paramBook.mu
	FrontMu         struct{} // streamhttp.front.mu
	TrackedMu       struct{} // streamhttp.tracked.mu
	MonitorMu       struct{} // streamhttp.monitor.mu
	LegacySessionMu struct{} // streamhttp.legacySession.mu
	QueueMu         struct{} // ordered.Queue.mu
	QueueWriting    struct{} // ordered.Queue.writing
	BoundMu         struct{} // stdio.Bound.mu
	LineWriterMu    struct{} // stdio.lineWriter.mu
	OwnQueueMu      struct{} // stdio.ownQueue.mu
	PublisherMu     struct{} // fleet.Publisher.mu
	PublisherWarnMu struct{} // fleet.Publisher.warnMu
	OutboxMu        struct{} // fleet.outbox.mu
	GateMu          struct{} // fleet.Gate.mu
	GateCopyMu      struct{} // fleet.Gate.copyMu
	PolicyCopyMu    struct{} // fleet.Policy.copyMu
	StatusWatchMu   struct{} // fleet.StatusWatch.mu
	StatusWatchNeed struct{} // fleet.StatusWatch.needMu
	ApprovalsMu     struct{} // fleet.Approvals.mu
	EdgeReloadMu    struct{} // edgeauth.Edge.mu
)

func (SessionMu) LockClass() string       { return "session.Session.mu" }
func (SessionPubMu) LockClass() string    { return "session.Session.pubMu" }
func (RequestsMu) LockClass() string      { return "session.requests.mu" }
func (InitPinMu) LockClass() string       { return "session.initPin.mu" }
func (ToolsMemoryMu) LockClass() string   { return "session.toolsMemory.mu" }
func (RelistsMu) LockClass() string       { return "session.relists.mu" }
func (ParamBookMu) LockClass() string     { return "streamhttp.paramBook.mu" }
func (FrontMu) LockClass() string         { return "streamhttp.front.mu" }
func (TrackedMu) LockClass() string       { return "streamhttp.tracked.mu" }
func (MonitorMu) LockClass() string       { return "streamhttp.monitor.mu" }
func (LegacySessionMu) LockClass() string { return "streamhttp.legacySession.mu" }
func (QueueMu) LockClass() string         { return "ordered.Queue.mu" }
func (QueueWriting) LockClass() string    { return "ordered.Queue.writing" }
func (BoundMu) LockClass() string         { return "stdio.Bound.mu" }
func (LineWriterMu) LockClass() string    { return "stdio.lineWriter.mu" }
func (OwnQueueMu) LockClass() string      { return "stdio.ownQueue.mu" }
func (PublisherMu) LockClass() string     { return "fleet.Publisher.mu" }
func (PublisherWarnMu) LockClass() string { return "fleet.Publisher.warnMu" }
func (OutboxMu) LockClass() string        { return "fleet.outbox.mu" }
func (GateMu) LockClass() string          { return "fleet.Gate.mu" }
func (GateCopyMu) LockClass() string      { return "fleet.Gate.copyMu" }
func (PolicyCopyMu) LockClass() string    { return "fleet.Policy.copyMu" }
func (StatusWatchMu) LockClass() string   { return "fleet.StatusWatch.mu" }
func (StatusWatchNeed) LockClass() string { return "fleet.StatusWatch.needMu" }
func (ApprovalsMu) LockClass() string     { return "fleet.Approvals.mu" }
func (EdgeReloadMu) LockClass() string    { return "edgeauth.Edge.mu" }

// Classes are every class, in the order session/LOCKS.md lists the leaves.
var Classes = []Class{SessionMu{}, SessionPubMu{}, RequestsMu{}, InitPinMu{}, ToolsMemoryMu{}, RelistsMu{}, ParamBookMu{}, FrontMu{}, TrackedMu{}, MonitorMu{}, LegacySessionMu{},
	QueueMu{}, QueueWriting{}, BoundMu{}, LineWriterMu{}, OwnQueueMu{}, PublisherMu{}, PublisherWarnMu{}, OutboxMu{}, GateMu{}, GateCopyMu{},
	PolicyCopyMu{}, StatusWatchMu{}, StatusWatchNeed{}, ApprovalsMu{}, EdgeReloadMu{}}

// Nesting is a lock taken while another is held: Outer first.
type Nesting struct {
	Outer, Inner string
	Where        string // where in the code, and why
}

// Order is the proxy's lock order: the only nestings there are. Every
// other class is a leaf, taken and released without taking another. A
// change that takes a lock under another adds the pair here (keeping the
// order acyclic, TestOrderAcyclic) and regenerates session/LOCKS.md
// (go test ./proxy/internal/lockorder -run TestLocksDoc -update), or is not
// made.
var Order = []Nesting{
	{"session.Session.mu", "session.requests.mu",
		"The proxy's own listings and gets are booked (`requests.addOwn`) under the session's lock, with the listing's generation or the round of gets they belong to, so that an answer is never booked against a listing or round begun after it. The book takes nothing under its lock."},
	{"session.Session.mu", "session.initPin.mu",
		"`adoptHashing` hashes the initialize result's items again, and `captureLocked` reads them, under the session's lock, with the listings' items, so that a capture's items are all hashed with one setting. The pin takes nothing under its lock."},
	{"session.Session.mu", "session.toolsMemory.mu",
		"`finishListing` and `adoptHashing` remember a tools listing (or the same listing hashed again) under the session's lock, with the listing it was assembled from. The memory takes nothing under its lock."},
	{"session.Session.mu", "session.relists.mu",
		"`relistDropped` marks a kind's re-listing dropped under the session's lock, once it has checked that no newer listing of the kind started (the listing's generation). The re-listings take nothing under their lock."},
	{"session.Session.mu", "streamhttp.paramBook.mu",
		"`addPage` hands each tools page to `Config.ToolsPage` (`paramBook.note`) under the session's lock, so that `ToolListed` true means the book has the page (a follower's leader learns the page from `followPage` only after, under the leader's lock alone). `ToolsPage` must not block or call the session."},
	{"session.Session.pubMu", "fleet.Publisher.mu",
		"`publish` reports a listing to the observer (`Listing`, `Seen`) under `pubMu`, so the last publication recorded is the last one published; `Publisher.enqueue` holds `mu` for reading while it queues."},
	{"session.Session.pubMu", "fleet.outbox.mu",
		"... and spools to the outbox when the queue is full (under `Publisher.mu` too: below)."},
	{"fleet.Publisher.mu", "fleet.outbox.mu",
		"`Publisher.enqueue` spools an event to the outbox when the queue is full, holding `mu` for reading."},
	{"fleet.Publisher.mu", "fleet.Publisher.warnMu",
		"`spool` and `noteDrop`, reached from `enqueue` under `mu`, rate-limit their warnings (spooled, dropped) under `warnMu`, which takes nothing."},
	{"fleet.outbox.mu", "fleet.Publisher.warnMu",
		"The outbox reports the events it evicts to make room (`noteDrop`) under its lock."},
	{"streamhttp.front.mu", "session.Session.mu",
		"`startMonitor` (under `front.mu`, which keeps one monitor per variant) makes the monitor's session and hands it the opening message (`ownClient`): a session nobody else holds yet, and an opening message, which the session decides without asking its gate. `addLocked`, forgetting sessions past the limit, tells each it ended (`Session.End`, which takes only the session's lock)."},
	{"streamhttp.front.mu", "streamhttp.tracked.mu",
		"`register` names a tracked session with the id the upstream gave."},
	{"fleet.Gate.mu", "fleet.StatusWatch.needMu",
		"`Gate.apply` asks the watch for a baseline's item hashes it lacks (`StatusWatch.request`) while it applies a record; `request` only notes the need and wakes the fetcher without waiting."},
	{"fleet.Gate.copyMu", "fleet.Gate.mu",
		"`writeCopy` takes a snapshot of the gate's records while it writes the status copy."},
	{"ordered.Queue.writing", "ordered.Queue.mu",
		"`settle` takes the head of the queue."},
	{"ordered.Queue.writing", "fleet.Publisher.mu",
		"`settle` reports each message it wrote (`Seen.Report`: the calls it answered, `Publisher.Call`, which holds `mu` for reading while it queues) before the next, one writer at a time."},
	{"ordered.Queue.writing", "stdio.lineWriter.mu",
		"`settle` writes each settled message in order, one writer at a time: the write target's lock on stdio."},
	{"ordered.Queue.writing", "streamhttp.legacySession.mu",
		"... and on HTTP+SSE, the client's stream."},
}
