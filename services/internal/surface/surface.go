// Package surface is the fingerprint engine: it turns what an MCP server
// advertises (tools, prompts, resources, resource templates, the
// initialize instructions and, in form mcpdrift/v2, the server's own
// description and what its MCP Apps UI resources return when read), as the
// raw bytes the server sent, into canonical
// items with SHA-256 (or SHA-512) hashes, and classifies the difference between two such
// surfaces.
//
// The canonical form is specified in docs/canonical-form.md; it is RFC 8785
// applied to the covered fields of each item, with JSON Schema's set-valued
// keywords ("required", an array "type") written order-free. Input from a
// server is hostile by assumption: everything that is not exactly one
// well-formed surface is rejected with a stable [Code].
//
// The package does no I/O and holds no NATS or MCP session state; the proxy
// and the fingerprint service both use it.
package surface

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// Kind is a kind of advertised item.
type Kind uint8

// The item kinds, in the order a Surface lists them.
const (
	KindTool Kind = iota + 1
	KindPrompt
	KindResource
	KindResourceTemplate
	KindInstructions
	// KindServer is the server's own description (serverInfo of the
	// initialize or server/discover result, version left out), one per
	// surface like the instructions; canonical form mcpdrift/v2 only.
	KindServer
	// KindUIContent is what a resources/read of a ui:// resource returns
	// (MCP Apps: the HTML a host renders, and each content's _meta), one
	// item per resource uri; canonical form mcpdrift/v2 only, and only the
	// contents of resources the surface lists (docs/canonical-form.md).
	KindUIContent
	// KindPromptMessages is what a prompts/get of a listed prompt that
	// declares no arguments returns (the messages a host puts into the
	// model's context, and the result's description), one item per prompt
	// name; canonical form mcpdrift/v2 only (docs/adr/0017).
	KindPromptMessages
	numKinds = iota
)

var kindInfo = [...]struct {
	name    string // singular, for messages and reports
	listKey string // member of the list result (and of the capture, and of the surface document)
	nameKey string // member naming an item
}{
	KindTool:             {"tool", "tools", "name"},
	KindPrompt:           {"prompt", "prompts", "name"},
	KindResource:         {"resource", "resources", "uri"},
	KindResourceTemplate: {"resourceTemplate", "resourceTemplates", "uriTemplate"},
	KindInstructions:     {"instructions", "instructions", ""},
	KindServer:           {"server", "server", ""},
	KindUIContent:        {"uiContent", "uiContents", "uri"},
	KindPromptMessages:   {"promptMessages", "promptMessages", "name"},
}

func (k Kind) String() string {
	if k >= KindTool && k <= KindPromptMessages {
		return kindInfo[k].name
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ListKey is the JSON member that carries this kind in a list result.
func (k Kind) ListKey() string { return kindInfo[k].listKey }

// Form is a version of the canonical form (docs/canonical-form.md): what
// each item covers and how, and the tag written into the surface document.
// The zero value is FormV1, the form every baseline made before FormV2 was
// hashed with, so that a caller that says nothing keeps comparing with
// them; the settings a server is judged by name the form explicitly
// (status.Hashing), and new servers get FormV2 (docs/adr/0015).
type Form uint8

// The forms of the canonical form.
const (
	// FormV1, "mcpdrift/v1": tools' name, title, description, schemas and
	// annotations; prompts', resources' and templates' names, texts and
	// mime types; the instructions (docs/adr/0002).
	FormV1 Form = iota
	// FormV2, "mcpdrift/v2": FormV1 and every field a host shows or acts
	// on: icons, tool execution, resource and template annotations, _meta
	// of every item (its volatile keys left out), and the server's own
	// description (serverInfo but its version) as the item KindServer
	// (docs/adr/0015), and the read contents of the ui:// resources a
	// capture carries as the items KindUIContent, and the messages of its
	// argument-less prompts as the items KindPromptMessages.
	FormV2
	numForms = iota
)

// FormLatest is the form new servers are hashed with.
const FormLatest = FormV2

var formTags = [...]string{FormV1: "mcpdrift/v1", FormV2: "mcpdrift/v2"}

func (f Form) String() string {
	if int(f) < len(formTags) {
		return formTags[f]
	}
	return fmt.Sprintf("form(%d)", f)
}

// FormNamed returns the form whose tag is name ("mcpdrift/v1",
// "mcpdrift/v2").
func FormNamed(name string) (Form, bool) {
	for f, tag := range formTags {
		if tag == name {
			return Form(f), true
		}
	}
	return 0, false
}

// Alg is the hash algorithm of a fingerprint. Hashes are always written
// tagged with it ("sha256:<hex>", "sha512:<hex>"); the zero value is
// SHA-256, the default, whose hashes are the ones mcpdrift always made.
type Alg uint8

// The hash algorithms.
const (
	SHA256 Alg = iota // the default
	SHA512            // for deployments that require it
)

var algInfo = [...]struct {
	name   string
	prefix string // the tag of a hash, with its colon
	size   int
}{
	SHA256: {"sha256", "sha256:", sha256.Size},
	SHA512: {"sha512", "sha512:", sha512.Size},
}

func (a Alg) String() string {
	if int(a) < len(algInfo) {
		return algInfo[a].name
	}
	return fmt.Sprintf("alg(%d)", a)
}

// Size is the length of a's sums in bytes.
func (a Alg) Size() int { return algInfo[a].size }

// AlgNamed returns the algorithm named name ("sha256", "sha512"); "" is
// the default, SHA-256.
func AlgNamed(name string) (Alg, bool) {
	switch name {
	case "", "sha256":
		return SHA256, true
	case "sha512":
		return SHA512, true
	}
	return 0, false
}

// Sum hashes b with a.
func (a Alg) Sum(b []byte) Digest {
	d := Digest{alg: a}
	if a == SHA512 {
		d.sum = sha512.Sum512(b)
	} else {
		*(*[sha256.Size]byte)(d.sum[:]) = sha256.Sum256(b)
	}
	return d
}

// Digest is a hash tagged with its algorithm. It prints as
// "sha256:<64 lowercase hex digits>" (or "sha512:<128 ...>"). Digests are
// comparable: two are equal when algorithm and sum are, so a SHA-256 hash
// never equals a SHA-512 one.
type Digest struct {
	alg Alg
	sum [sha512.Size]byte // the first alg.Size() bytes; the rest zero
}

// Alg is d's algorithm.
func (d Digest) Alg() Alg { return d.alg }

// Sum is d's bytes.
func (d *Digest) Sum() []byte { return d.sum[:d.alg.Size()] }

func (d Digest) String() string { return string(d.AppendText(nil)) }

// AppendText appends the tagged hex form of d.
func (d Digest) AppendText(b []byte) []byte {
	b = append(b, algInfo[d.alg].prefix...)
	return hex.AppendEncode(b, d.sum[:algInfo[d.alg].size])
}

// MarshalText implements encoding.TextMarshaler.
func (d Digest) MarshalText() ([]byte, error) { return d.AppendText(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	*d = p
	return err
}

// ParseDigest parses the tagged form written by Digest.String.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	for a := range algInfo {
		hexPart, ok := strings.CutPrefix(s, algInfo[a].prefix)
		if !ok {
			continue
		}
		d.alg = Alg(a)
		if size := algInfo[a].size; len(hexPart) != 2*size {
			return Digest{}, fmt.Errorf("parsing digest %q: want %s followed by %d hex digits", s, algInfo[a].prefix, 2*size)
		}
		if _, err := hex.Decode(d.sum[:], []byte(hexPart)); err != nil || strings.ToLower(hexPart) != hexPart {
			return Digest{}, fmt.Errorf("parsing digest %q: want lowercase hex digits", s)
		}
		return d, nil
	}
	return d, fmt.Errorf("parsing digest %q: want %s or %s followed by hex digits", s, algInfo[SHA256].prefix, algInfo[SHA512].prefix)
}

// Item is one advertised thing: a tool, prompt, resource, resource template,
// or the server's instructions.
type Item struct {
	Kind Kind
	// Name identifies the item within its kind: a tool's or prompt's name, a
	// resource's uri, a template's uriTemplate; empty for instructions.
	Name string
	// Hash is the hash of Canonical (SHA-256 unless Options.Hash says
	// otherwise).
	Hash Digest
	// Canonical is the canonical JSON of the item's covered fields (for
	// instructions, the canonical JSON string).
	Canonical []byte
}

// Surface is everything a server advertised, canonicalized and hashed.
type Surface struct {
	// Hash is the hash of the surface document (docs/canonical-form.md),
	// with the algorithm of its items:
	// it changes exactly when an item of a listed kind is added, removed or
	// changed, or a kind starts or stops being listed.
	Hash Digest
	// Items holds every item, ordered by kind and then by name in UTF-16
	// code unit order.
	Items  []Item
	listed [numKinds + 1]bool
	form   Form
}

// Form is the version of the canonical form s was made with.
func (s *Surface) Form() Form { return s.form }

// Listed reports whether the surface includes a listing of kind k (a capture
// may leave out prompts, say, which is not the same as an empty list).
func (s *Surface) Listed(k Kind) bool { return s.listed[k] }

// Of returns the items of kind k.
func (s *Surface) Of(k Kind) []Item {
	lo, _ := slices.BinarySearchFunc(s.Items, k, func(it Item, k Kind) int { return int(it.Kind) - int(k) })
	hi := lo
	for hi < len(s.Items) && s.Items[hi].Kind == k {
		hi++
	}
	return s.Items[lo:hi]
}

// Find returns the item of kind k named name.
func (s *Surface) Find(k Kind, name string) (Item, bool) {
	items := s.Of(k)
	i, ok := slices.BinarySearchFunc(items, name, func(it Item, name string) int {
		return canonjson.CompareUTF16(it.Name, name)
	})
	if !ok {
		return Item{}, false
	}
	return items[i], true
}

// Limits bound what the engine accepts from a server.
type Limits struct {
	MaxBytes      int // bytes of one input (a page, or a whole capture)
	MaxTotalBytes int // bytes of all the pages a Builder is fed
	MaxDepth      int // JSON nesting
	MaxItems      int // items of one kind, over all pages
}

// DefaultLimits accept real manifests of 8 MiB and 10,000 tools with room to
// spare, and stop absurd ones.
var DefaultLimits = Limits{MaxBytes: 32 << 20, MaxTotalBytes: 64 << 20, MaxDepth: 128, MaxItems: 20_000}

// Options configure what the fingerprint covers.
type Options struct {
	// ExcludeAnnotations leaves tool annotations out of the hashes. They
	// are hints a server sets, but clients act on them (auto-approving a
	// read-only tool, say), so they are covered by default.
	ExcludeAnnotations bool
	// Hash is the algorithm of every hash: SHA256 (the zero value) or
	// SHA512. The canonical bytes do not depend on it.
	Hash Alg
	// Form is the version of the canonical form: FormV1 (the zero value)
	// or FormV2. Hashes made with different forms are not comparable; the
	// surface document names its form.
	Form   Form
	Limits Limits // zero fields take DefaultLimits
}

func (o Options) limits() Limits {
	l := o.Limits
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultLimits.MaxTotalBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxItems <= 0 {
		l.MaxItems = DefaultLimits.MaxItems
	}
	return l
}

func (o Options) jsonLimits() canonjson.Limits {
	l := o.limits()
	return canonjson.Limits{MaxBytes: l.MaxBytes, MaxDepth: l.MaxDepth}
}
