package surface

import (
	"encoding/base64"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Marker kinds: signs of tool poisoning in text a model will read.
const (
	MarkerHiddenInstructions = "hidden_instructions" // text that addresses the model, not the user
	MarkerExfiltration       = "exfiltration"        // asks to send data somewhere
	MarkerSecretPath         = "secret_path"         // names credential files or stores
	MarkerInvisibleChars     = "invisible_chars"     // code points that render as nothing or change how text renders (invisible)
	MarkerEncodedBlob        = "encoded_blob"        // a long base64 or hex run that hides content
)

// A Marker is one sign found in one string of an item.
type Marker struct {
	Kind  string `json:"kind"`
	Path  string `json:"path"`  // where in the item, e.g. inputSchema.properties.path.description
	Match string `json:"match"` // what matched, clipped; invisible characters shown as U+XXXX
}

// markerRules are compiled on first use, not when the package starts: a
// process that only fingerprints (driftctl fingerprint, the fingerprint
// service) never scans for markers, and compiling them took a sixth of
// driftctl's start-up (GODEBUG=inittrace=1: 0.64 ms and 430 KB).
var markerRules = sync.OnceValue(func() []markerRule {
	return []markerRule{
		{MarkerHiddenInstructions, regexp.MustCompile(`(?i)<\s*/?\s*(important|system|instructions?|secret|hidden|admin|assistant)\s*>` +
			`|\bignore\s+(all\s+)?(the\s+)?(previous|prior|above|earlier|other)\s+(instructions|prompts|rules)` +
			`|\b(do\s+not|don't|never)\s+(tell|mention|inform|reveal|show|alert|notify)\b[^.]{0,60}\b(user|human|operator)` +
			`|\bwithout\s+(telling|informing|notifying|alerting)\s+the\s+(user|human)` +
			`|\b(before|prior\s+to)\s+(using|calling|invoking)\s+(this|any|the)\s+tool\b[^.]{0,40}\b(you\s+must|must|always|first)` +
			`|\b(before|prior\s+to)\s+(answering|responding|replying|using|calling)\b[^.]{0,20}\b(read|call|send|include|fetch|open|run)\b` +
			`|\byou\s+(must|should)\s+(first\s+)?(read|call|include|send|pass|fetch|run)\b` +
			`|\bthis\s+is\s+(very\s+)?important\b` +
			`|\b(system|developer)\s+(prompt|message|override)\b`)},
		{MarkerExfiltration, regexp.MustCompile(`(?i)\b(send|post|upload|forward|transmit|exfiltrate|leak|copy|email)\b[^.]{0,80}` +
			`(https?://|\bwebhook\b|\bendpoint\b|\b[a-z0-9._%+-]+@[a-z0-9-]+\.[a-z]{2,}\b)` +
			`|\b(pastebin|requestbin|ngrok|webhook\.site|pipedream|burpcollaborator|interact\.sh)\b` +
			`|\b(pass|put|include|send|append|embed)\s+(it|them|this|that|its\s+contents?|the\s+(contents?|file|key|token|secret))\s+(in|into|as|via|through)\s+(the\s+)?[\w-]+\s+(field|parameter|argument|param)\b` +
			`|\b(include|put|pass|append|embed)\b[^.]{0,40}\b(contents?|full\s+text|entire)\b[^.]{0,40}\b(in|into|as)\b[^.]{0,30}\b(parameter|argument|field|sidenote|notes?)\b`)},
		{MarkerSecretPath, regexp.MustCompile(`(?i)~?/\.ssh\b|\bid_(rsa|dsa|ecdsa|ed25519)\b|\.aws/credentials|/etc/(passwd|shadow|sudoers)\b` +
			`|\.git-credentials|\.netrc\b|\.npmrc\b|\.pypirc\b|\.kube/config|\.docker/config\.json|\.gnupg\b` +
			`|(^|[\s/"'(])\.env\b|\bmcp\.json\b|\.cursor/|claude_desktop_config\.json|\bprivate[\s_-]?key\b|\bkeychain\b`)},
		{MarkerEncodedBlob, regexp.MustCompile(`[A-Za-z0-9+/]{60,}={0,2}|[A-Za-z0-9_-]{80,}|\b[0-9a-fA-F]{64,}\b`)},
	}
})

type markerRule struct {
	kind string
	re   *regexp.Regexp
}

// invisible reports code points that render as nothing or change how the
// text around them renders, so that what a reviewer reads is not what a
// model reads. The sets are Unicode's own (the standard library's tables;
// unicode.Version says which release), never a hand-typed list:
//
//   - Default_Ignorable_Code_Point (defaultIgnorable): zero-width
//     characters, joiners, bidi controls, variation selectors (U+FE00..FE0F,
//     U+E0100..E01EF and the Mongolian ones), the tag characters
//     (U+E0000..E0FFF, used to smuggle ASCII), the Hangul fillers, the
//     combining grapheme joiner, and the reserved code points Unicode keeps
//     ignorable for the future;
//   - every format character (Cf), including those the derivation above
//     leaves out because a renderer is expected to show something for
//     them: the interlinear annotation characters U+FFF9..FFFB (which hide
//     the annotation text between them in most renderers), the Egyptian
//     hieroglyph format controls and the prepended concatenation marks
//     (which reshape the text after them);
//   - Bidi_Control and Join_Control, named although they are Cf today, so
//     that a later Unicode release that moved one would not drop it;
//   - control characters (Cc) that are not White_Space: NUL, backspace,
//     escape (ANSI sequences that hide or rewrite text in a terminal),
//     DEL and the C1 controls. Tab, line feed, carriage return and the
//     other White_Space controls are ordinary text.
func invisible(r rune) bool {
	if r >= 0x20 && r < 0x7F {
		return false // printable ASCII, nearly all of what is scanned
	}
	return defaultIgnorable(r) ||
		unicode.In(r, unicode.Cf, unicode.Bidi_Control, unicode.Join_Control, unicode.Variation_Selector) ||
		unicode.Is(unicode.Cc, r) && !unicode.Is(unicode.White_Space, r)
}

// Invisible reports whether r is one of the code points the marker scan
// flags as invisible_chars (see invisible), for views that must draw them.
func Invisible(r rune) bool { return invisible(r) }

// defaultIgnorable reports Unicode's Default_Ignorable_Code_Point property,
// which the standard library does not export, derived from the properties
// it does export exactly as DerivedCoreProperties.txt defines it:
//
//	  Other_Default_Ignorable_Code_Point
//	+ Cf (format characters)
//	+ Variation_Selector
//	- White_Space
//	- FFF9..FFFB (interlinear annotation format characters)
//	- 13430..1343F (Egyptian hieroglyph format characters)
//	- Prepended_Concatenation_Mark (exceptional format characters that should be visible)
//
// The two ranges are the exceptions that file's header names by code point
// (Unicode 15.0.0); TestDefaultIgnorableMatchesUCD checks the derivation
// against the property as DerivedCoreProperties.txt lists it.
func defaultIgnorable(r rune) bool {
	if !unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector) {
		return false
	}
	return !unicode.Is(unicode.White_Space, r) &&
		!(r >= 0xFFF9 && r <= 0xFFFB) &&
		!(r >= 0x13430 && r <= 0x1343F) &&
		!unicode.Is(unicode.Prepended_Concatenation_Mark, r)
}

// scanText appends every marker found in s, which sits at path in an item:
// each match of each rule and each distinct invisible character, so that a
// phrase the baseline already had cannot hide a new one after it. Text that
// invisible characters hide is scanned too (reveal): a rule's match there
// that the visible text does not have is reported with "hidden: " before it.
func scanText(dst []Marker, path, s string) []Marker {
	var seen []rune
	for _, r := range s {
		if invisible(r) && !slices.Contains(seen, r) {
			seen = append(seen, r)
			dst = append(dst, Marker{Kind: MarkerInvisibleChars, Path: path, Match: "U+" + strings.ToUpper(hex4(r))})
		}
	}
	var plain []string // the rules' matches in s, when s hides text
	for _, rule := range markerRules() {
		for _, loc := range rule.re.FindAllStringIndex(s, -1) {
			dst = append(dst, Marker{Kind: rule.kind, Path: path, Match: visible(clipText(s[loc[0]:loc[1]]))})
			if len(seen) > 0 {
				plain = append(plain, rule.kind+"\x00"+s[loc[0]:loc[1]])
			}
		}
	}
	if len(seen) == 0 {
		return dst
	}
	hidden := reveal(s)
	for _, rule := range markerRules() {
		for _, loc := range rule.re.FindAllStringIndex(hidden, -1) {
			if m := hidden[loc[0]:loc[1]]; !slices.Contains(plain, rule.kind+"\x00"+m) {
				dst = append(dst, Marker{Kind: rule.kind, Path: path, Match: "hidden: " + clipText(m)})
			}
		}
	}
	return dst
}

// reveal returns s as a model may read it: each tag character that mirrors
// printable ASCII (U+E0020..U+E007E, the Tags block is ASCII plus U+E0000)
// as that ASCII character, every other invisible character dropped. A
// phrase spelled in tags, or broken up by zero-width characters so that no
// rule matches it, reads whole there.
func reveal(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r >= 0xE0020 && r <= 0xE007E:
			b.WriteByte(byte(r - 0xE0000))
		case !invisible(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// visible shows invisible and bidi characters as <U+XXXX>, so that a
// reviewer reading a report sees where a payload hides.
func visible(s string) string {
	if !strings.ContainsFunc(s, invisible) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if invisible(r) {
			b.WriteString("<U+" + strings.ToUpper(hex4(r)) + ">")
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hex4(r rune) string {
	const digits = "0123456789abcdef"
	var b []byte
	for shift := 20; shift >= 0; shift -= 4 {
		if d := (r >> shift) & 0xF; d != 0 || len(b) > 0 || shift <= 12 {
			b = append(b, digits[d])
		}
	}
	return string(b)
}

// A textScanner appends the markers found in s, at path (scanText).
type textScanner func(dst []Marker, path, s string) []Marker

// scanValue walks a decoded JSON value and scans every string in it, member
// names included (a property name is text the model reads, too).
func scanValue(dst []Marker, path string, v any) []Marker {
	return scanValueWith(dst, path, v, scanText)
}

func scanValueWith(dst []Marker, path string, v any, scan textScanner) []Marker {
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			break
		}
		if media, payload, ok := imageDataURI(v); ok {
			// An image given inline (an icon): its base64 is no text that
			// hides text, so the media type is scanned and, for SVG, the
			// markup the payload decodes to; a payload that does not
			// decode is scanned as it is.
			img, err := base64.StdEncoding.DecodeString(payload)
			if err != nil {
				img, err = base64.RawStdEncoding.DecodeString(payload)
			}
			if err == nil {
				dst = scan(dst, path, media)
				if strings.HasPrefix(strings.ToLower(media), "data:image/svg+xml") && utf8.Valid(img) {
					dst = scan(dst, path+"(svg)", string(img))
				}
				break
			}
		}
		dst = scan(dst, path, v)
	case []any:
		for _, e := range v {
			dst = scanValueWith(dst, path+"[]", e, scan)
		}
	case map[string]any:
		// In key order, so that the markers, and the first of each kind
		// that Rate reports, come in the same order every time.
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := KeyPath(path, k)
			dst = scan(dst, p+"(name)", k)
			dst = scanValueWith(dst, p, v[k], scan)
		}
	}
	return dst
}

// imageDataURI splits a data: URI of an image in base64 (RFC 2397, as MCP
// icons carry them inline) into its media part ("data:image/png;base64,")
// and its payload.
func imageDataURI(s string) (media, payload string, ok bool) {
	const prefix = "data:image/"
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", "", false
	}
	comma := strings.IndexByte(s, ',')
	if comma < 0 || !strings.HasSuffix(strings.ToLower(s[:comma]), ";base64") {
		return "", "", false
	}
	return s[:comma+1], s[comma+1:], true
}

// MarkerMemo remembers the markers found in each string it scanned, by the
// string itself (a map key compared whole, never a digest that a crafted
// string could collide with), within a budget of bytes: the markers of a
// string are a function of the string, and the manifests of a fleet share
// most of theirs (the same server at many hosts; a new release that
// changes a few descriptions). Safe for concurrent use.
type MarkerMemo struct {
	mu     sync.Mutex
	budget int // bytes of strings and matches the two generations hold at most
	used   int // bytes in cur
	// cur and old are two generations: a string found in old moves to cur;
	// when cur is full, old is dropped and cur becomes old.
	cur, old map[string][]foundMarker
}

// foundMarker is a marker found in a string, without the string's path.
type foundMarker struct{ kind, match string }

// NewMarkerMemo returns a MarkerMemo that keeps at most budget bytes of
// strings and their markers.
func NewMarkerMemo(budget int) *MarkerMemo {
	return &MarkerMemo{budget: max(budget, 2), cur: map[string][]foundMarker{}, old: map[string][]foundMarker{}}
}

// scanText is the package's scanText for s, from memory when s was scanned
// before.
func (m *MarkerMemo) scanText(dst []Marker, path, s string) []Marker {
	found, ok := m.get(s)
	if !ok {
		for _, mk := range scanText(nil, "", s) {
			found = append(found, foundMarker{mk.Kind, mk.Match})
		}
		m.put(s, found)
	}
	for _, f := range found {
		dst = append(dst, Marker{Kind: f.kind, Path: path, Match: f.match})
	}
	return dst
}

func (m *MarkerMemo) get(s string) ([]foundMarker, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.cur[s]; ok {
		return f, true
	}
	f, ok := m.old[s]
	if ok {
		m.keep(s, f)
	}
	return f, ok
}

func (m *MarkerMemo) put(s string, f []foundMarker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keep(s, f)
}

// keep adds s to cur, starting a new generation when cur is full.
func (m *MarkerMemo) keep(s string, f []foundMarker) {
	size := len(s)
	for _, x := range f {
		size += len(x.kind) + len(x.match)
	}
	if size > m.budget/2 {
		return // larger than a generation: scanned every time
	}
	if m.used+size > m.budget/2 {
		m.old, m.cur, m.used = m.cur, make(map[string][]foundMarker, len(m.cur)), 0
	}
	m.cur[s] = f
	m.used += size
}

// KeyPath is the path of member key under path, as markers name it: an
// invisible character in the member name shown as <U+XXXX> (raw, a bidi
// control would reorder the report a reviewer reads).
func KeyPath(path, key string) string { return joinPath(path, visible(key)) }

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
