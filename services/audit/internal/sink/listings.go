package sink

import (
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// listing is what a row of list_observations says beside the common
// columns, tenant and server.
type listing struct {
	variant, proxy, agent, session, hash string
	captureBytes                         uint32
	captureSHA                           string // "" for a compact listing
	compact                              bool
}

// addListing appends one listing's row.
func (r *listRows) addListing(id string, atMs int64, seq uint64, tenant, server string, l listing) {
	r.add(id, atMs, seq)
	r.tenant, r.server = append(r.tenant, tenant), append(r.server, server)
	r.variant, r.proxy = append(r.variant, l.variant), append(r.proxy, l.proxy)
	r.captureBytes, r.captureSHA = append(r.captureBytes, l.captureBytes), append(r.captureSHA, l.captureSHA)
	r.agent, r.session, r.surfaceHash = append(r.agent, l.agent), append(r.session, l.session), append(r.surfaceHash, l.hash)
	r.compact = append(r.compact, b2u(l.compact))
}

// decodeSeen adds a ListingsSeen batch to r: one row of list_observations
// per compact listing (no capture: capture_bytes 0, compact 1, naming the
// surface hash), so that every listing a proxy observed, whole or compact,
// has its row. As with a batch of calls (decodeCalls), every listing is
// checked before the first is added, a listing without an event id takes
// the message's fallback id followed by "#<index>", and a batch of none
// adds nothing.
func (s *Service) decodeSeen(env envelope, data []byte, tenant, server string, r *listRows) error {
	ev := new(mcpdriftv1.ListingsSeen)
	if err := proto.Unmarshal(data, ev); err != nil {
		return bus.Poisonf(bus.CodeMalformedEvent, "decoding ListingsSeen: %w", err)
	}
	rows, err := checkBatch(env, data, tenant, server, len(ev.Seen), "compact listing", func(i int) batchItem {
		l := ev.Seen[i]
		return batchItem{l.Tenant, l.Server, l.EventId, l.ObservedAtUnixMs}
	})
	if err != nil {
		return err
	}
	for i, l := range ev.Seen {
		r.addListing(rows[i].id, rows[i].atMs, env.seq, tenant, server, listing{variant: l.Variant, proxy: l.Proxy,
			agent: l.Agent, session: l.Session, hash: l.SurfaceHash, compact: true})
	}
	return nil
}
