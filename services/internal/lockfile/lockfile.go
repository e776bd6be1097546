// Package lockfile is the signed baseline lockfile: a server's approved
// baselines as a file that can live in git, be reviewed, checked in CI and
// installed into a drift service that has never seen the server
// (docs/operations.md, "Baselines as code").
//
// A lockfile is canonical JSON (RFC 8785, package canonjson) of a tenant,
// a server and, for each listing variant with an approved baseline, the
// baseline (version, surface hash, who approved it and when), the hashing
// settings its hashes were made with, the kinds it lists, and every item
// with its hash and its approved definition (the canonical form of the
// item's covered fields, docs/canonical-form.md). An ed25519 signature
// over the canonical bytes of everything else is embedded in it.
//
// Read checks the shape; Verify checks the signature against a set of
// trusted public keys and then that every definition hashes to its item
// hash and the items make up the baseline hash, with the fingerprint
// engine itself (package surface, parsing the capture the definitions
// make, as the fingerprint service parses a proxy's capture).
package lockfile

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Format names this version of the lockfile; it is the first thing the
// signature covers, so a signature over another kind of document never
// verifies as a lockfile's.
const Format = "mcpdrift/baseline-lock/v1"

// AlgEd25519 is the one signature algorithm.
const AlgEd25519 = "ed25519"

// MaxBytes bounds a lockfile: a manifest is at most 64 MiB
// (surface.DefaultLimits), and a server has few variants.
const MaxBytes = 64 << 20

// The codes of this package's errors (docs/codes.md).
const (
	// CodeMalformed: not a lockfile of Format (not JSON, an unknown or
	// missing field, an invalid id, a variant twice, not canonical).
	CodeMalformed = "lockfile_malformed"
	// CodeSignatureInvalid: no signature, or one that does not verify
	// with the key it names: the file was changed after it was signed.
	CodeSignatureInvalid = "lockfile_signature_invalid"
	// CodeKeyUnknown: signed by a key that is not among the trusted ones.
	CodeKeyUnknown = "lockfile_key_unknown"
	// CodeHashMismatch: a definition does not hash to its item hash, or
	// the items do not make up the baseline hash.
	CodeHashMismatch = "lockfile_hash_mismatch"
	// CodeKeyInvalid: a key file that is not an ed25519 key in PEM.
	CodeKeyInvalid = "key_invalid"
)

// File is a lockfile.
type File struct {
	Format       string    `json:"format"`
	Tenant       string    `json:"tenant"`
	Server       string    `json:"server"`
	ExportedAtMs int64     `json:"exported_at_ms"`
	ExportedBy   string    `json:"exported_by"`
	Variants     []Variant `json:"variants"`
	// Signature is over Signed: nil in an unsigned document (what the
	// drift service hands out for driftctl to sign).
	Signature *Signature `json:"signature,omitempty"`
}

// Variant is the approved baseline of one listing variant.
type Variant struct {
	Variant  string         `json:"variant"`
	Hashing  status.Hashing `json:"hashing"`
	Baseline Baseline       `json:"baseline"`
	// Listed are the kinds the surface lists (tool, prompt, resource,
	// resourceTemplate), a kind possibly with no item in it.
	Listed []string `json:"listed"`
	Items  []Item   `json:"items"`
}

// Baseline is the approved version a variant's items make up.
type Baseline struct {
	Version      int64  `json:"version"`
	Hash         string `json:"hash"`
	CapturedAtMs int64  `json:"captured_at_ms"`
	ApprovedAtMs int64  `json:"approved_at_ms"`
	ApprovedBy   string `json:"approved_by"`
	Reason       string `json:"reason"`
}

// Item is one approved item: its kind, name (empty for instructions),
// hash and definition (the canonical JSON of its covered fields; for
// instructions, the JSON string).
type Item struct {
	Kind       string          `json:"kind"`
	Name       string          `json:"name"`
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
}

// Signature is an ed25519 signature of the canonical bytes of the rest of
// the file, by the key whose KeyID is given.
type Signature struct {
	Alg   string `json:"alg"`
	KeyID string `json:"key_id"`
	Value string `json:"value"` // base64 (standard, padded) of the 64 signature bytes
}

// KeyID names a public key: the hex SHA-256 of its 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

func malformed(format string, args ...any) error {
	return coded.Errorf(CodeMalformed, format, args...)
}

// Read parses a lockfile strictly (canonjson's rules: no duplicate member,
// valid UTF-8, exact numbers) and checks its shape. It checks neither the
// signature nor the hashes: Verify does.
func Read(data []byte) (*File, error) {
	if len(data) > MaxBytes {
		return nil, malformed("the file is over the limit of %d bytes", MaxBytes)
	}
	var d canonjson.Doc
	if err := d.Parse(data, canonjson.Limits{MaxBytes: MaxBytes, MaxDepth: canonjson.DefaultLimits.MaxDepth}); err != nil {
		return nil, malformed("not strict JSON: %w", err)
	}
	if d.Kind(canonjson.Root) != canonjson.Object {
		return nil, malformed("the file is a JSON %s, want an object", d.Kind(canonjson.Root))
	}
	if a, b, ok := d.FoldTwin(canonjson.Root); ok {
		return nil, malformed("members %q and %q differ only in case", a, b)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	f := new(File)
	if err := dec.Decode(f); err != nil {
		return nil, malformed("not a lockfile: %w", err)
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	// What the signature covers is what was read: the file, less its
	// signature, in canonical form, must be what this package writes for
	// the values read (nothing in it that a reader of the values would not
	// see: a member in another case, say).
	got, err := signedOf(&d)
	if err != nil {
		return nil, err
	}
	want, err := f.Signed()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(got, want) {
		return nil, malformed("the file holds something its fields do not (a member that differs from a field's name only in case, or a null)")
	}
	return f, nil
}

// signedOf returns the canonical bytes of the parsed document without its
// signature member.
func signedOf(d *canonjson.Doc) ([]byte, error) {
	out := []byte{'{'}
	wrote := false
	for i := range d.Len(canonjson.Root) {
		k, v := d.Member(canonjson.Root, i)
		if d.StringIs(k, "signature") {
			continue
		}
		if wrote {
			out = append(out, ',')
		}
		out = d.Append(out, k)
		out = append(out, ':')
		out = d.Append(out, v)
		wrote = true
	}
	return append(out, '}'), nil
}

// check checks the shape of f: what Read refuses beside JSON.
func (f *File) check() error {
	if f.Format != Format {
		return malformed("format %q, want %q", f.Format, Format)
	}
	for _, id := range [][2]string{{"tenant", f.Tenant}, {"server", f.Server}} {
		if err := bus.ValidID(id[0], id[1]); err != nil {
			return malformed("%s", coded.MessageOf(err))
		}
	}
	if len(f.Variants) == 0 {
		return malformed("no variant: a lockfile holds at least one approved baseline")
	}
	seen := map[string]bool{}
	for i := range f.Variants {
		v := &f.Variants[i]
		if err := bus.ValidID("variant", v.Variant); err != nil {
			return malformed("%s", coded.MessageOf(err))
		}
		if seen[v.Variant] {
			return malformed("variant %s is given twice", v.Variant)
		}
		seen[v.Variant] = true
		if i > 0 && f.Variants[i-1].Variant > v.Variant {
			return malformed("variants must be ordered by name (%s after %s)", v.Variant, f.Variants[i-1].Variant)
		}
		if _, err := v.Hashing.Options(); err != nil {
			return malformed("variant %s: %w", v.Variant, err)
		}
		if v.Baseline.Version < 1 {
			return malformed("variant %s: baseline version %d, want 1 or more", v.Variant, v.Baseline.Version)
		}
		d, err := surface.ParseDigest(v.Baseline.Hash)
		if err != nil {
			return malformed("variant %s: baseline hash: %w", v.Variant, err)
		}
		if d.Alg().String() != v.Hashing.Hash {
			return malformed("variant %s: a baseline hash of %s under hashing %s", v.Variant, d.Alg(), v.Hashing.Hash)
		}
		if v.Baseline.ApprovedBy == "" || v.Baseline.ApprovedAtMs <= 0 {
			return malformed("variant %s: the baseline names no approver or approval time", v.Variant)
		}
		if v.Listed == nil || v.Items == nil {
			return malformed("variant %s: listed and items must be given (empty lists when there are none)", v.Variant)
		}
		for _, it := range v.Items {
			if _, ok := surface.KindNamed(it.Kind); !ok {
				return malformed("variant %s: item %q of kind %q, which is not a kind", v.Variant, it.Name, it.Kind)
			}
			if len(it.Definition) == 0 {
				return malformed("variant %s: %s %q has no definition", v.Variant, it.Kind, it.Name)
			}
		}
	}
	if s := f.Signature; s != nil && (s.Alg != AlgEd25519 || s.KeyID == "" || s.Value == "") {
		return malformed("a signature needs alg %q, a key_id and a value", AlgEd25519)
	}
	return nil
}

// Signed returns the bytes the signature covers: the canonical JSON of f
// without its signature.
func (f *File) Signed() ([]byte, error) {
	c := *f
	c.Signature = nil
	raw, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encoding the lockfile: %w", err)
	}
	out, err := canonjson.Canonicalize(raw)
	if err != nil {
		return nil, malformed("not canonical JSON: %w", err)
	}
	return out, nil
}

// Sign signs f with key, replacing any signature it had.
func (f *File) Sign(key ed25519.PrivateKey) error {
	if err := f.check(); err != nil {
		return err
	}
	msg, err := f.Signed()
	if err != nil {
		return err
	}
	pub := key.Public().(ed25519.PublicKey)
	f.Signature = &Signature{Alg: AlgEd25519, KeyID: KeyID(pub), Value: base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg))}
	return nil
}

// Marshal returns the file as written: its canonical JSON and a newline.
func (f *File) Marshal() ([]byte, error) {
	raw, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encoding the lockfile: %w", err)
	}
	out, err := canonjson.Canonicalize(raw)
	if err != nil {
		return nil, malformed("not canonical JSON: %w", err)
	}
	return append(out, '\n'), nil
}

// Verify checks that f is signed by one of keys, and that each variant's
// definitions hash to their item hashes and make up its baseline hash. It
// returns the key that signed it.
func (f *File) Verify(keys []ed25519.PublicKey) (ed25519.PublicKey, error) {
	pub, err := f.VerifySignature(keys)
	if err != nil {
		return nil, err
	}
	for i := range f.Variants {
		if _, err := f.Variants[i].Surface(); err != nil {
			return nil, err
		}
	}
	return pub, nil
}

// VerifySignature checks the signature alone.
func (f *File) VerifySignature(keys []ed25519.PublicKey) (ed25519.PublicKey, error) {
	s := f.Signature
	if s == nil {
		return nil, coded.New(CodeSignatureInvalid, "the lockfile is not signed")
	}
	i := slices.IndexFunc(keys, func(k ed25519.PublicKey) bool { return KeyID(k) == s.KeyID })
	if i < 0 {
		return nil, coded.Errorf(CodeKeyUnknown, "the lockfile is signed by key %s, which is not among the %d trusted", shortID(s.KeyID), len(keys))
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Value)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, coded.Errorf(CodeSignatureInvalid, "the signature is not %d bytes of base64", ed25519.SignatureSize)
	}
	msg, err := f.Signed()
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(keys[i], msg, sig) {
		return nil, coded.Errorf(CodeSignatureInvalid, "the signature by key %s does not verify: the lockfile was changed after it was signed", shortID(s.KeyID))
	}
	return keys[i], nil
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
}

// Capture returns the variant's definitions as a capture (the format the
// fingerprint engine reads from proxies): a listing of each kind listed,
// one page each, the instructions and the server item (form v2: the
// serverInfo it covers) in an initialize result, the UI contents (form v2)
// under uiContents, each as the read result its definition is, and the
// prompts' messages (form v2) under promptMessages, each as the
// prompts/get result its definition is. Parsed
// with the variant's hashing it is the approved surface; the drift
// service stores it under the baseline hash for diffs.
func (v *Variant) Capture() ([]byte, error) {
	init := map[string]json.RawMessage{}
	byKind := map[string][]json.RawMessage{}
	got := map[string]map[string]json.RawMessage{}
	for _, it := range v.Items {
		if it.Kind == surface.KindUIContent.String() || it.Kind == surface.KindPromptMessages.String() {
			// A UI content's or prompt's messages' definition is its
			// canonical form, itself a resources/read (prompts/get) result
			// that hashes to the same item.
			if got[it.Kind][it.Name] != nil {
				return nil, coded.Errorf(CodeHashMismatch, "variant %s: %s %q given twice", v.Variant, it.Kind, it.Name)
			}
			if got[it.Kind] == nil {
				got[it.Kind] = map[string]json.RawMessage{}
			}
			got[it.Kind][it.Name] = it.Definition
			continue
		}
		if member, ok := initMembers[it.Kind]; ok {
			if init[member] != nil {
				return nil, coded.Errorf(CodeHashMismatch, "variant %s: %s given twice", v.Variant, it.Kind)
			}
			init[member] = it.Definition
			continue
		}
		byKind[it.Kind] = append(byKind[it.Kind], it.Definition)
	}
	c := map[string]any{}
	if len(init) > 0 {
		c["initialize"] = init
	}
	for kind := range byKind {
		if !slices.Contains(v.Listed, kind) {
			return nil, coded.Errorf(CodeHashMismatch, "variant %s: items of kind %s, which it does not list", v.Variant, kind)
		}
	}
	for _, name := range v.Listed {
		k, ok := surface.KindNamed(name)
		if !ok || k > surface.KindResourceTemplate {
			return nil, coded.Errorf(CodeHashMismatch, "variant %s: listed kind %q has no listing", v.Variant, name)
		}
		if _, dup := c[k.ListKey()]; dup {
			return nil, coded.Errorf(CodeHashMismatch, "variant %s: kind %s listed twice", v.Variant, name)
		}
		items := byKind[name]
		if items == nil {
			items = []json.RawMessage{}
		}
		c[k.ListKey()] = map[string]any{"pages": []any{map[string]any{k.ListKey(): items}}}
	}
	for _, k := range []surface.Kind{surface.KindUIContent, surface.KindPromptMessages} {
		if m := got[k.String()]; len(m) > 0 {
			c[k.ListKey()] = m
		}
	}
	out, err := json.Marshal(c)
	if err != nil {
		return nil, coded.Errorf(CodeHashMismatch, "variant %s: a definition is not JSON: %w", v.Variant, err)
	}
	return out, nil
}

// initMembers are the item kinds an initialize result carries, and the
// member of it each is written as.
var initMembers = map[string]string{surface.KindInstructions.String(): "instructions", surface.KindServer.String(): "serverInfo"}

// Surface parses the variant's definitions with the fingerprint engine,
// with its hashing settings, and checks that every item hashes to its
// item hash and the surface to the baseline hash: the approved surface.
func (v *Variant) Surface() (*surface.Surface, error) {
	opt, err := v.Hashing.Options()
	if err != nil {
		return nil, malformed("variant %s: %w", v.Variant, err)
	}
	raw, err := v.Capture()
	if err != nil {
		return nil, err
	}
	sf, err := surface.Parse(raw, opt)
	if err != nil {
		return nil, coded.Errorf(CodeHashMismatch, "variant %s: the definitions are not a surface the engine accepts: %w", v.Variant, err)
	}
	if len(sf.Items) != len(v.Items) {
		return nil, coded.Errorf(CodeHashMismatch, "variant %s: %d items, the definitions make %d", v.Variant, len(v.Items), len(sf.Items))
	}
	for _, it := range v.Items {
		k, _ := surface.KindNamed(it.Kind)
		got, ok := sf.Find(k, it.Name)
		if !ok {
			return nil, coded.Errorf(CodeHashMismatch, "variant %s: no definition is the %s %q", v.Variant, it.Kind, it.Name)
		}
		if got.Hash.String() != it.Hash {
			return nil, coded.Errorf(CodeHashMismatch, "variant %s: the definition of %s %q hashes to %s, not %s", v.Variant, it.Kind, it.Name, got.Hash, it.Hash)
		}
	}
	if sf.Hash.String() != v.Baseline.Hash {
		return nil, coded.Errorf(CodeHashMismatch, "variant %s: the items make up %s, not the baseline hash %s", v.Variant, sf.Hash, v.Baseline.Hash)
	}
	return sf, nil
}

// ItemHashes returns the variant's item hashes as the status contract keeps a
// baseline's (status.Items).
func (v *Variant) ItemHashes() *status.Items {
	out := &status.Items{Surface: v.Baseline.Hash, Listed: slices.Clone(v.Listed), Items: make([]status.Item, len(v.Items))}
	for i, it := range v.Items {
		out.Items[i] = status.Item{Kind: it.Kind, Name: it.Name, Hash: it.Hash}
	}
	return out
}

// VariantOf returns the lockfile form of an approved baseline: b, made
// with hashing h, whose surface sf is (parsed from its stored manifest).
// It fails when sf is not b's surface.
func VariantOf(variant string, h status.Hashing, b status.Baseline, sf *surface.Surface) (Variant, error) {
	if sf.Hash.String() != b.Hash {
		return Variant{}, fmt.Errorf("the manifest of variant %s hashes to %s, not its baseline %s", variant, sf.Hash, b.Hash)
	}
	its := status.ItemsOf(sf)
	v := Variant{Variant: variant, Hashing: h, Listed: its.Listed, Items: make([]Item, len(sf.Items)),
		Baseline: Baseline{Version: b.Version, Hash: b.Hash, CapturedAtMs: b.CapturedAtMs, ApprovedAtMs: b.ApprovedAtMs, ApprovedBy: b.ApprovedBy, Reason: b.Reason}}
	if v.Listed == nil {
		v.Listed = []string{}
	}
	for i, it := range sf.Items {
		v.Items[i] = Item{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String(), Definition: slices.Clone(it.Canonical)}
	}
	return v, nil
}
