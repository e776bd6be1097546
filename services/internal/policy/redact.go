package policy

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// redactedJSON is Redacted as a JSON string.
var redactedJSON = canonjson.AppendString(nil, Redacted)

// Redact returns args with the value at each path replaced by the string
// Redacted; every other byte is kept as it was. A path that selects nothing
// is skipped; a path inside a value already redacted is covered by it.
// Arguments that are empty or null are returned as they are. Arguments the
// engine cannot read unambiguously (see Evaluate), and a path outside the
// supported subset or naming the whole object, are an error: the caller
// must deny the call, never forward it unredacted.
func Redact(args []byte, paths []string) ([]byte, error) {
	compiled := make([][]step, 0, len(paths))
	for _, p := range paths {
		steps, msg := parsePath(p)
		if msg == "" && len(steps) == 0 {
			msg = "the whole arguments object cannot be redacted"
		}
		if msg != "" {
			return nil, &Error{Code: CodeBadPath, Field: "redact", Msg: fmt.Sprintf("%q: %s", clip(p), msg)}
		}
		compiled = append(compiled, steps)
	}
	var a argState
	a.read(args)
	if a.doc != nil {
		defer canonjson.Return(a.doc)
	}
	switch a.state {
	case 2:
		return args, nil
	case 3:
		return nil, &Error{Code: CodeUnreadableArgs, Msg: a.why}
	}
	type span struct{ start, end int }
	var spans []span
	for _, steps := range compiled {
		n, ok := lookup(a.doc, steps)
		if !ok {
			continue
		}
		start := a.doc.Offset(n)
		spans = append(spans, span{start, start + len(a.doc.Raw(n))})
	}
	slices.SortFunc(spans, func(x, y span) int { return x.start - y.start })
	out := make([]byte, 0, len(args)+len(spans)*len(redactedJSON))
	last := 0
	for _, sp := range spans {
		if sp.start < last {
			continue // inside (or equal to) a span already redacted
		}
		out = append(out, args[last:sp.start]...)
		out = append(out, redactedJSON...)
		last = sp.end
	}
	out = append(out, args[last:]...)
	if bytes.Equal(out, args) {
		return args, nil
	}
	return out, nil
}
