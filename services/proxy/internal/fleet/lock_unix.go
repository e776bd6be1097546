//go:build unix

package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// errLocked is returned by lockDir for a directory another publisher holds.
var errLocked = errors.New("locked")

// lockDir takes an exclusive lock on dir (flock of dir/.lock), held until
// the returned function is called or the process ends, so that a crashed
// proxy never leaves a stale lock.
func lockDir(dir string) (func() error, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening outbox lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("locking outbox %s: %w", dir, err)
	}
	return f.Close, nil // closing the file releases the lock
}
