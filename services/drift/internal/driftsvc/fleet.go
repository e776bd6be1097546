package driftsvc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// List returns every server with its variants, ordered by tenant and
// server (variants by name), read in one pass over the status bucket (a
// watch that delivers each key's latest value and stops) rather than a
// request per key: at 10,000 servers a request per key took most of a
// second (the review console's fleet page, the admin API's status).
func (s *Service) List(ctx context.Context) ([]state.View, error) {
	w, err := s.h.Status.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watching the status bucket: %w", err)
	}
	defer w.Stop()
	var out []state.View
	at := map[string]int{}
	view := func(tenant, server string) *state.View {
		id := tenant + "." + server
		i, ok := at[id]
		if !ok {
			i = len(out)
			at[id] = i
			out = append(out, state.View{Tenant: tenant, Server: server})
		}
		return &out[i]
	}
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil { // every key's latest value was delivered
			break
		}
		parts := strings.Split(e.Key(), ".")
		switch len(parts) {
		case 2:
			srv, err := status.DecodeServer(e.Value())
			if err != nil {
				return nil, fmt.Errorf("status %s: %w", e.Key(), err)
			}
			view(parts[0], parts[1]).Hold = &srv
		case 3:
			rec, err := status.DecodeRecord(e.Value())
			if err != nil {
				return nil, fmt.Errorf("status %s: %w", e.Key(), err)
			}
			v := view(parts[0], parts[1])
			v.Variants = append(v.Variants, rec)
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Variants, func(a, b state.Record) int { return strings.Compare(a.Variant, b.Variant) })
	}
	slices.SortFunc(out, func(a, b state.View) int {
		return strings.Compare(a.Tenant+"\x00"+a.Server, b.Tenant+"\x00"+b.Server)
	})
	if out == nil {
		out = []state.View{}
	}
	return out, nil
}
