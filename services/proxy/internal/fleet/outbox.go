package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// The outbox is a directory of one file per message, named by a sequence
// number that only grows (zero-padded, so that names sort in order) and the
// kind of observation it carries (list: a whole listing; call: calls; seen:
// compact listings, ListingsSeen), with their number when more than one:
//
//	00000000000000000042.list
//	00000000000000000043.call
//	00000000000000000044.call-17
//	00000000000000000045.seen-3
//
// A file holds one header line and the payload:
//
//	mcpdrift-outbox/1 <subject> <message id> <payload length> <crc32c of payload, 8 hex>\n<payload>
//
// It is written to "<name>.tmp", synced, and renamed, so a name that exists
// is complete; a crash leaves at most a .tmp file, which opening removes.
// docs/services/proxy-fleet.md describes it for operators.

const (
	outboxMagic = "mcpdrift-outbox/1"
	kindList    = "list"
	kindCall    = "call"
	kindSeen    = "seen"
	tmpSuffix   = ".tmp"
	lockName    = ".lock"
	maxSlots    = 64
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrOutboxBusy is returned when every outbox slot under the directory is
// held by a running publisher.
var ErrOutboxBusy = errors.New("fleet: every outbox slot is in use by another publisher")

// errOutboxClosed is returned by an outbox after close.
var errOutboxClosed = errors.New("outbox closed")

// event is one message ready to publish: a whole listing, or a batch of
// calls or of compact listings.
type event struct {
	id      string // the message id: the event id, or for a batch see mergeBatches
	subject string
	kind    string // kindList, kindCall or kindSeen
	n       int    // observations it carries: 1, or the calls or compact listings of a batch
	data    []byte
}

// batched reports a kind published in batches (calls, compact listings):
// what lingers to be joined, and what the outbox evicts first.
func batched(kind string) bool { return kind != kindList }

// count is the number of observations ev carries.
func (ev *event) count() int { return max(ev.n, 1) }

// entry is one message file of the outbox.
type entry struct {
	seq      uint64
	kind     string
	n        int // observations
	size     int64
	inflight bool // being published by the replayer: not evicted
}

func (e *entry) name() string {
	if batched(e.kind) && e.n > 1 {
		return fmt.Sprintf("%020d.%s-%d", e.seq, e.kind, e.n)
	}
	return fmt.Sprintf("%020d.%s", e.seq, e.kind)
}

// parseKind reads the kind part of a file name: the kind of observation it
// holds, and how many.
func parseKind(name string) (kind string, n int, ok bool) {
	switch name {
	case kindList, kindCall, kindSeen:
		return name, 1, true
	}
	kind, num, found := strings.Cut(name, "-")
	if !found || (kind != kindCall && kind != kindSeen) {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 2 || strconv.Itoa(n) != num {
		return "", 0, false
	}
	return kind, n, true
}

// outbox is one locked slot directory. Its methods are safe for concurrent use.
type outbox struct {
	dir       string
	maxEvents int // bound on the observations held
	maxBytes  int64
	onDrop    func(kind string, n int) // called with mu held: must not call back
	added     chan struct{}            // signalled (non-blocking) when an event is added

	mu      lockorder.Mutex[lockorder.OutboxMu]
	unlock  func() error
	entries []*entry // by seq
	events  int      // observations in entries
	bytes   int64
	next    uint64
	closed  bool
}

// openOutbox takes the first free slot under root ("root/0", "root/1", ...),
// removes leftover temporary files, indexes the events left by an earlier
// publisher and applies the bounds (which may have shrunk).
func openOutbox(root string, maxEvents int, maxBytes int64, onDrop func(kind string, n int)) (*outbox, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating outbox %s: %w", root, err)
	}
	for slot := range maxSlots {
		dir := filepath.Join(root, strconv.Itoa(slot))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating outbox slot %s: %w", dir, err)
		}
		unlock, err := lockDir(dir)
		if errors.Is(err, errLocked) {
			continue
		}
		if err != nil {
			return nil, err
		}
		o := &outbox{dir: dir, maxEvents: maxEvents, maxBytes: maxBytes, onDrop: onDrop, added: make(chan struct{}, 1), unlock: unlock}
		if err := o.scan(); err != nil {
			_ = unlock()
			return nil, err
		}
		return o, nil
	}
	return nil, fmt.Errorf("%w (%s, %d slots)", ErrOutboxBusy, root, maxSlots)
}

func (o *outbox) scan() error {
	des, err := os.ReadDir(o.dir)
	if err != nil {
		return fmt.Errorf("reading outbox %s: %w", o.dir, err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") || !de.Type().IsRegular() {
			continue
		}
		if strings.HasSuffix(name, tmpSuffix) {
			_ = os.Remove(filepath.Join(o.dir, name)) // a write a crash interrupted
			continue
		}
		num, kind, ok := strings.Cut(name, ".")
		seq, err := strconv.ParseUint(num, 10, 64)
		kind, n, known := parseKind(kind)
		if !ok || err != nil || !known {
			continue // not ours; left alone
		}
		info, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		o.entries = append(o.entries, &entry{seq: seq, kind: kind, n: n, size: info.Size()})
		o.events += n
		o.bytes += info.Size()
		o.next = max(o.next, seq+1)
	}
	slices.SortFunc(o.entries, func(a, b *entry) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.events > o.maxEvents || o.bytes > o.maxBytes {
		if !o.evictLocked(false) {
			break
		}
	}
	if len(o.entries) > 0 {
		o.signal()
	}
	return nil
}

func (o *outbox) signal() {
	select {
	case o.added <- struct{}{}:
	default:
	}
}

// depth returns the number of observations and bytes in the outbox.
func (o *outbox) depth() (int, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events, o.bytes
}

// add writes events in order, making room as the bounds require: the
// oldest batched observations (calls, compact listings) go first, then, for
// a whole listing only, the oldest whole listings; a batch never evicts a
// whole listing. It returns how many
// observations were written; those it could not keep are reported to
// onDrop. An error is a failure of the disk: the events from the failing one
// on are lost (and reported to onDrop).
func (o *outbox) add(evs []*event) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		for _, ev := range evs {
			o.onDrop(ev.kind, ev.count())
		}
		return 0, errOutboxClosed
	}
	written := 0
	var err error
	for i, ev := range evs {
		head := header(ev)
		size := int64(len(head) + len(ev.data))
		if !o.makeRoomLocked(batched(ev.kind), ev.count(), size) {
			o.onDrop(ev.kind, ev.count())
			continue
		}
		e := &entry{seq: o.next, kind: ev.kind, n: ev.count(), size: size}
		if err = writeAtomic(o.dir, e.name(), head, ev.data); err != nil {
			for _, rest := range evs[i:] {
				o.onDrop(rest.kind, rest.count())
			}
			err = fmt.Errorf("writing outbox event %s: %w", e.name(), err)
			break
		}
		o.next++
		o.entries = append(o.entries, e)
		o.events += e.n
		o.bytes += size
		written += e.n
	}
	if written > 0 {
		if serr := syncDir(o.dir); serr != nil && err == nil {
			err = fmt.Errorf("syncing outbox %s: %w", o.dir, serr)
		}
		o.signal()
	}
	return written, err
}

// makeRoomLocked evicts until a message of n observations and size bytes
// fits, or reports that it cannot be kept.
func (o *outbox) makeRoomLocked(batch bool, n int, size int64) bool {
	if size > o.maxBytes || n > o.maxEvents {
		return false
	}
	for o.events+n > o.maxEvents || o.bytes+size > o.maxBytes {
		if !o.evictLocked(batch) {
			return false
		}
	}
	return true
}

// evictLocked removes the oldest batch (calls, compact listings) not being
// published, or when there is none and forBatch is false, the oldest whole
// listing.
func (o *outbox) evictLocked(forBatch bool) bool {
	victim := -1
	for i, e := range o.entries {
		if batched(e.kind) && !e.inflight {
			victim = i
			break
		}
	}
	if victim < 0 && !forBatch {
		for i, e := range o.entries {
			if !e.inflight {
				victim = i
				break
			}
		}
	}
	if victim < 0 {
		return false
	}
	e := o.entries[victim]
	_ = os.Remove(filepath.Join(o.dir, e.name()))
	o.entries = slices.Delete(o.entries, victim, victim+1)
	o.events -= e.n
	o.bytes -= e.size
	o.onDrop(e.kind, e.n)
	return true
}

// head marks and returns the oldest events not in flight, at most n of
// them and, beyond the first, at most maxBytes.
func (o *outbox) head(n int, maxBytes int64) []*entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*entry
	var size int64
	for _, e := range o.entries {
		if len(out) == n || (len(out) > 0 && size+e.size > maxBytes) {
			break
		}
		if e.inflight {
			continue
		}
		e.inflight = true
		out = append(out, e)
		size += e.size
	}
	return out
}

// read loads an entry's event. An error means the file is unusable.
func (o *outbox) read(e *entry) (*event, error) {
	raw, err := os.ReadFile(filepath.Join(o.dir, e.name()))
	if err != nil {
		return nil, err
	}
	ev, err := parseEvent(raw)
	if err != nil {
		return nil, fmt.Errorf("outbox event %s: %w", e.name(), err)
	}
	ev.kind, ev.n = e.kind, e.n
	return ev, nil
}

// done settles entries the replayer took with head: published ones are
// deleted, the others are left for the next attempt.
func (o *outbox) done(e *entry, published bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e.inflight = false
	if !published {
		return
	}
	i := slices.Index(o.entries, e)
	if i < 0 {
		return
	}
	o.entries = slices.Delete(o.entries, i, i+1)
	o.events -= e.n
	o.bytes -= e.size
	// If the file cannot be removed it is published again after a restart;
	// the message id makes that harmless within the duplicate window.
	_ = os.Remove(filepath.Join(o.dir, e.name()))
}

// close releases the slot. Events added later are dropped.
func (o *outbox) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	return o.unlock()
}

func header(ev *event) []byte {
	return fmt.Appendf(nil, "%s %s %s %d %08x\n", outboxMagic, ev.subject, ev.id, len(ev.data), crc32.Checksum(ev.data, crcTable))
}

func parseEvent(raw []byte) (*event, error) {
	line, payload, ok := bytes.Cut(raw, []byte{'\n'})
	if !ok {
		return nil, errors.New("no header line")
	}
	f := strings.Fields(string(line))
	if len(f) != 5 || f[0] != outboxMagic {
		return nil, fmt.Errorf("header %q: want %s <subject> <id> <length> <crc32c>", clipHeader(line), outboxMagic)
	}
	n, err := strconv.Atoi(f[3])
	if err != nil || n != len(payload) {
		return nil, fmt.Errorf("payload is %d bytes, header says %s", len(payload), f[3])
	}
	if want := fmt.Sprintf("%08x", crc32.Checksum(payload, crcTable)); want != f[4] {
		return nil, fmt.Errorf("payload checksum %s, header says %s", want, f[4])
	}
	return &event{subject: f[1], id: f[2], data: payload}, nil
}

func clipHeader(b []byte) string {
	if len(b) > 100 {
		return string(b[:100]) + "..."
	}
	return string(b)
}

// writeAtomic writes head and data to dir/name via a synced temporary file.
func writeAtomic(dir, name string, head, data []byte) error {
	tmp := filepath.Join(dir, name+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(head)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, fs.ErrInvalid) {
		return nil // directories cannot be synced on this platform
	}
	return err
}
