package main

import (
	"crypto/ed25519"
	"fmt"
	"os"

	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
)

// readBaselineKeys reads the trusted baseline signing keys: a file of one
// or more PEM public keys (driftctl baseline keygen writes FILE.pub).
func readBaselineKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading baseline keys: %w", err)
	}
	keys, err := lockfile.ParsePublicKeys(data)
	if err != nil {
		return nil, fmt.Errorf("baseline keys %s: %w", path, err)
	}
	return keys, nil
}
