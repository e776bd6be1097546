//go:build !unix

package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// errLocked is returned by lockDir for a directory another publisher holds.
var errLocked = errors.New("locked")

// lockDir takes an exclusive lock on dir by creating dir/.lock. Without
// flock a lock left by a crashed process is not released by itself: the
// slot is then skipped, and an operator removes the file.
func lockDir(dir string) (func() error, error) {
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, errLocked
	}
	if err != nil {
		return nil, fmt.Errorf("locking outbox %s: %w", dir, err)
	}
	return func() error {
		_ = f.Close()
		return os.Remove(p)
	}, nil
}
