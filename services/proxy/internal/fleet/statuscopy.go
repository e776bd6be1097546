package fleet

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// The status copy: the last status a gate knew of its server, kept on disk
// so that a proxy restarted while NATS is unreachable serves what was
// verified (docs/services/proxy-fleet.md, "The status copy").
const (
	copyFormat      = "mcpdrift-status-copy/1"
	copyKeyName     = "key"
	copySuffix      = ".copy"
	minCopyKeyBytes = 16
	// maxCopyBytes bounds what is read of a copy: records take at most
	// status.MaxRecordBytes each, and a server has few variants.
	maxCopyBytes = 64 << 20
	// copyClockSkew: a copy last live this far in the future is not
	// believed (a clock set back, or a forged time).
	copyClockSkew       = time.Minute
	defaultCopyDebounce = 250 * time.Millisecond
	defaultCopyRefresh  = time.Minute
)

// Why a copy was ignored: the reason label of
// mcpdrift_proxy_status_copies_ignored_total.
const (
	CopyCorrupt = "corrupt" // does not parse, or its MAC does not match its content
	CopyForeign = "foreign" // the copy of another tenant, server or proxy
	CopyExpired = "expired" // last live longer ago than MaxAge (or in the future)
)

// CopyReasons are the reasons a copy is ignored, in a stable order.
var CopyReasons = []string{CopyCorrupt, CopyForeign, CopyExpired}

// CopyConfig configures the on-disk status copies of a proxy's gates.
type CopyConfig struct {
	// Dir holds one copy per tenant and server (<tenant>.<server>.copy),
	// and the generated key when Key is nil. The proxy uses
	// <outbox dir>/status.
	Dir   string
	Proxy string // this proxy's id: a copy is bound to it
	// Key is the HMAC-SHA256 key (at least 16 bytes); nil: a random key
	// generated on first use in Dir/key (0600), which protects against
	// corruption and misplaced copies, not against whoever can write Dir.
	Key []byte
	// MaxAge: a copy whose watch was last live and in sync longer ago is
	// ignored. It must be positive (a proxy that keeps no copy makes no
	// StatusCopies).
	MaxAge time.Duration
	// Debounce coalesces the writes of changes that come together (250 ms
	// when 0); Refresh rewrites the copy while the watch is live, so that
	// its time stays fresh (1 minute when 0).
	Debounce, Refresh time.Duration
	Now               func() time.Time // time.Now when nil
}

// StatusCopies is where a proxy's gates keep their status copies
// (Gate.UseCopies). It is safe for concurrent use.
type StatusCopies struct {
	cfg CopyConfig
	key []byte
}

// OpenStatusCopies makes Dir (0700) and, without a configured key, reads
// or generates the key in it.
func OpenStatusCopies(cfg CopyConfig) (*StatusCopies, error) {
	if cfg.Dir == "" {
		return nil, errors.New("status copies: no directory")
	}
	if cfg.MaxAge <= 0 {
		return nil, errors.New("status copies: max age must be positive")
	}
	if err := bus.ValidID("proxy", cfg.Proxy); err != nil {
		return nil, fmt.Errorf("status copies: %w", err)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = defaultCopyDebounce
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = defaultCopyRefresh
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the status copy directory: %w", err)
	}
	removeStaleTemps(cfg.Dir, cfg.Now())
	key := cfg.Key
	if key == nil {
		var err error
		if key, err = generatedKey(cfg.Dir); err != nil {
			return nil, err
		}
	}
	if len(key) < minCopyKeyBytes {
		return nil, fmt.Errorf("status copies: the key has %d bytes, want at least %d", len(key), minCopyKeyBytes)
	}
	return &StatusCopies{cfg: cfg, key: bytes.Clone(key)}, nil
}

// staleTemp is the age from which a temporary file in the copies'
// directory is a crashed writer's, not a running proxy's.
const staleTemp = 10 * time.Minute

// removeStaleTemps removes the temporary files that writers which crashed
// left in dir; a running proxy's, younger, are left alone.
func removeStaleTemps(dir string, now time.Time) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range des {
		name := de.Name()
		if !strings.HasPrefix(name, ".") || (!strings.HasSuffix(name, tmpSuffix) && !strings.HasPrefix(name, ".key-")) {
			continue
		}
		if fi, err := de.Info(); err == nil && now.Sub(fi.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}

// ReadCopyKey reads a status copy key file: its content, surrounding white
// space removed, at least 16 bytes (e.g. `openssl rand -hex 32`).
func ReadCopyKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the status copy key: %w", err)
	}
	key := bytes.TrimSpace(data)
	if len(key) < minCopyKeyBytes {
		return nil, fmt.Errorf("status copy key %s: %d bytes, want at least %d", path, len(key), minCopyKeyBytes)
	}
	return key, nil
}

// generatedKey returns the key in dir/key, generating it (32 random bytes,
// hex) when there is none. Two proxies that generate one at once agree: the
// key is published with a hard link, which fails when the name exists.
func generatedKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, copyKeyName)
	if key, err := ReadCopyKey(path); err == nil {
		return key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generating the status copy key: %w", err)
	}
	f, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return nil, fmt.Errorf("generating the status copy key: %w", err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	_, err = io.WriteString(f, hex.EncodeToString(raw)+"\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path)
		if errors.Is(err, os.ErrExist) {
			return ReadCopyKey(path) // another proxy was first
		}
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("generating the status copy key: %w", err)
	}
	return ReadCopyKey(path)
}

// copyDoc is the content of a copy: the server's status records as the
// watch read them from the status bucket, and when the watch was last
// known live and in sync.
type copyDoc struct {
	Tenant   string      `json:"tenant"`
	Server   string      `json:"server"`
	Proxy    string      `json:"proxy"`
	LiveAtMs int64       `json:"live_at_ms"`
	Hold     *copyEntry  `json:"server_record,omitempty"` // <tenant>.<server>; nil: none
	Variants []copyEntry `json:"variants"`                // <tenant>.<server>.<variant>
	// Baselines are the entries of the baselines bucket whose item hashes
	// records name (<tenant>.<server>.<variant>.v<version>).
	Baselines []copyEntry `json:"baselines,omitempty"`
}

// copyEntry is one key of the status bucket as the watch delivered it.
type copyEntry struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	Value    []byte `json:"value"` // base64 in the file
}

// path is the copy of tenant's server.
func (c *StatusCopies) path(tenant, server string) string {
	return filepath.Join(c.cfg.Dir, tenant+"."+server+copySuffix)
}

// mac is the HMAC of a copy's content, bound to its format and to the
// tenant, server ("" for a tenant's policy copy) and proxy it is for.
func (c *StatusCopies) mac(format, tenant, server string, body []byte) []byte {
	h := hmac.New(sha256.New, c.key)
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", format, tenant, server, c.cfg.Proxy)
	h.Write(body)
	return h.Sum(nil)
}

// write replaces the copy of doc's server.
func (c *StatusCopies) write(doc *copyDoc) error {
	body, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encoding the status copy: %w", err)
	}
	return c.writeSigned(c.path(doc.Tenant, doc.Server), "."+doc.Tenant+"."+doc.Server+"-*"+tmpSuffix, copyFormat, doc.Tenant, doc.Server, body)
}

// writeSigned replaces the file at path with body under a header line of
// format and the body's MAC: a temporary file (tmp, a pattern), synced,
// renamed, and the directory synced.
func (c *StatusCopies) writeSigned(path, tmp, format, tenant, server string, body []byte) error {
	f, err := os.CreateTemp(c.cfg.Dir, tmp)
	if err != nil {
		return fmt.Errorf("writing the %s: %w", copyWhat(format), err)
	}
	tmp = f.Name()
	_, err = fmt.Fprintf(f, "%s %s\n", format, hex.EncodeToString(c.mac(format, tenant, server, body)))
	if err == nil {
		_, err = f.Write(body)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(c.cfg.Dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing the %s: %w", copyWhat(format), err)
	}
	return nil
}

func copyWhat(format string) string {
	if format == policyCopyFormat {
		return "policy copy"
	}
	return "status copy"
}

// errNoCopy: there is no copy of the server.
var errNoCopy = errors.New("no status copy")

// copyError is why a copy is ignored: Reason is one of CopyReasons.
type copyError struct {
	Reason string
	err    error
}

func (e *copyError) Error() string { return e.Reason + ": " + e.err.Error() }
func (e *copyError) Unwrap() error { return e.err }

func ignored(reason string, format string, a ...any) error {
	return &copyError{Reason: reason, err: fmt.Errorf(format, a...)}
}

// read returns the copy of tenant's server when its MAC, its names and its
// age check out: errNoCopy when there is none, a *copyError when it is
// ignored, another error when it cannot be read.
func (c *StatusCopies) read(tenant, server string) (*copyDoc, error) {
	body, macOK, err := c.readSigned(c.path(tenant, server), copyFormat, tenant, server)
	if err != nil {
		return nil, err
	}
	if !macOK {
		// Say whose copy it claims to be, for the log: a copy moved from
		// another server, tenant or proxy does not match either.
		var claim copyDoc
		if json.Unmarshal(body, &claim) == nil && (claim.Tenant != tenant || claim.Server != server || claim.Proxy != c.cfg.Proxy) {
			return nil, ignored(CopyForeign, "it is the copy of tenant %q server %q proxy %q", clipBytes([]byte(claim.Tenant)),
				clipBytes([]byte(claim.Server)), clipBytes([]byte(claim.Proxy)))
		}
		return nil, ignored(CopyCorrupt, "its hmac does not match its content (changed, or written with another key)")
	}
	var doc copyDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, ignored(CopyCorrupt, "decoding: %v", err)
	}
	if doc.Tenant != tenant || doc.Server != server || doc.Proxy != c.cfg.Proxy {
		return nil, ignored(CopyForeign, "it is the copy of tenant %q server %q proxy %q", doc.Tenant, doc.Server, doc.Proxy)
	}
	if err := doc.checkKeys(); err != nil {
		return nil, ignored(CopyCorrupt, "%v", err)
	}
	if err := c.fresh(doc.LiveAtMs); err != nil {
		return nil, err
	}
	return &doc, nil
}

// fresh checks a copy's live time against MaxAge.
func (c *StatusCopies) fresh(liveAtMs int64) error {
	switch age := c.cfg.Now().Sub(time.UnixMilli(liveAtMs)); {
	case liveAtMs <= 0:
		return ignored(CopyCorrupt, "no live time")
	case age > c.cfg.MaxAge:
		return ignored(CopyExpired, "last live %s ago, more than the maximum age %s", age.Round(time.Second), c.cfg.MaxAge)
	case age < -copyClockSkew:
		return ignored(CopyExpired, "last live %s in the future", (-age).Round(time.Second))
	}
	return nil
}

// readSigned reads the file at path written by writeSigned with format:
// its body, and whether the body's MAC (for tenant and server) matches.
// errNoCopy when there is none, a *copyError when it is corrupt, another
// error when it cannot be read.
func (c *StatusCopies) readSigned(path, format, tenant, server string) (body []byte, macOK bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, errNoCopy
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the %s: %w", copyWhat(format), err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxCopyBytes+1))
	if err != nil {
		return nil, false, fmt.Errorf("reading the %s: %w", copyWhat(format), err)
	}
	if len(data) > maxCopyBytes {
		return nil, false, ignored(CopyCorrupt, "larger than %d bytes", maxCopyBytes)
	}
	head, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return nil, false, ignored(CopyCorrupt, "no header line")
	}
	got, sum, ok := strings.Cut(string(head), " ")
	if !ok || got != format {
		return nil, false, ignored(CopyCorrupt, "header %q: want %s <hmac>", clipBytes(head), format)
	}
	mac, err := hex.DecodeString(sum)
	if err != nil || len(mac) != sha256.Size {
		return nil, false, ignored(CopyCorrupt, "header %q: the hmac is not 64 hex digits", clipBytes(head))
	}
	return body, hmac.Equal(mac, c.mac(format, tenant, server, body)), nil
}

// checkKeys checks that every entry is a key of the copy's server, once.
func (doc *copyDoc) checkKeys() error {
	if doc.Hold != nil && doc.Hold.Key != bus.ServerKey(doc.Tenant, doc.Server) {
		return fmt.Errorf("server record key %q", doc.Hold.Key)
	}
	prefix := bus.ServerKey(doc.Tenant, doc.Server) + "."
	seen := make(map[string]bool, len(doc.Variants))
	for _, e := range doc.Variants {
		v, ok := strings.CutPrefix(e.Key, prefix)
		if !ok || v == "" || strings.ContainsAny(v, ".*> ") || seen[v] {
			return fmt.Errorf("variant record key %q", e.Key)
		}
		seen[v] = true
	}
	for _, e := range doc.Baselines {
		rest, ok := strings.CutPrefix(e.Key, prefix)
		v, version, two := strings.Cut(rest, ".")
		if !ok || !two || v == "" || !strings.HasPrefix(version, "v") || strings.ContainsAny(rest, "*> ") || strings.Count(rest, ".") != 1 || seen[rest] {
			return fmt.Errorf("baseline version key %q", e.Key)
		}
		seen[rest] = true
	}
	return nil
}

func clipBytes(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
