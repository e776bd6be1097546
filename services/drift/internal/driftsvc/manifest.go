package driftsvc

import (
	"context"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Manifest returns the stored manifest whose surface hash is hash, parsed
// and checked against it (through the service's manifest cache): what the
// review console shows side by side.
func (s *Service) Manifest(ctx context.Context, hash string) (*surface.Surface, error) {
	return s.surfaceOf(ctx, hash)
}
