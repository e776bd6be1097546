//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on the data directory, so two stacks never
// share one JetStream store.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "stack.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another stack (stop it, or give another --data-dir)", dir)
	}
	return func() { f.Close() }, nil
}
