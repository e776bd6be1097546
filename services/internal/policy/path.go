package policy

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxIndex bounds an array index in a path.
const maxIndex = 1 << 20

// step is one step of a path: a member name or an array index.
type step struct {
	name  string
	index int // -1 for a member
}

// parsePath reads the JSONPath subset of clauses and redact lists: $, then
// steps .name (letters, digits, _ and -, and any non-ASCII letter),
// ['name'] or ["name"] (any name; \\ and the quote escaped with a
// backslash), and [n] (an array index, 0 up). Wildcards, recursive descent,
// slices, filters and negative indexes are refused.
func parsePath(p string) ([]step, string) {
	if !strings.HasPrefix(p, "$") {
		return nil, "a path starts with $ (the arguments object), as in $.query"
	}
	var steps []step
	i := 1
	for i < len(p) {
		switch p[i] {
		case '.':
			i++
			if i < len(p) && p[i] == '.' {
				return nil, "recursive descent (..) is not supported"
			}
			j := i
			for j < len(p) {
				r, size := utf8.DecodeRuneInString(p[j:])
				if r != '_' && r != '-' && (r == utf8.RuneError || !unicode.IsLetter(r) && !unicode.IsDigit(r)) {
					break
				}
				j += size
			}
			if j == i {
				if i < len(p) && p[i] == '*' {
					return nil, "wildcards are not supported"
				}
				return nil, "a member name after . is letters, digits, _ and -; write ['name'] for others"
			}
			steps = append(steps, step{name: p[i:j], index: -1})
			i = j
		case '[':
			i++
			if i >= len(p) {
				return nil, "unterminated ["
			}
			switch q := p[i]; {
			case q == '\'' || q == '"':
				i++
				var b strings.Builder
				closed := false
				for i < len(p) {
					c := p[i]
					if c == '\\' {
						if i+1 >= len(p) || (p[i+1] != '\\' && p[i+1] != q) {
							return nil, "in a quoted name only \\\\ and the quote can be escaped"
						}
						b.WriteByte(p[i+1])
						i += 2
						continue
					}
					if c == q {
						closed = true
						i++
						break
					}
					b.WriteByte(c)
					i++
				}
				if !closed || i >= len(p) || p[i] != ']' {
					return nil, "a quoted name is closed by its quote and ]"
				}
				i++
				if !utf8.ValidString(b.String()) {
					return nil, "a member name must be valid UTF-8"
				}
				steps = append(steps, step{name: b.String(), index: -1})
			case q >= '0' && q <= '9':
				j := i
				for j < len(p) && p[j] >= '0' && p[j] <= '9' {
					j++
				}
				if j >= len(p) || p[j] != ']' {
					return nil, "an index is digits closed by ]"
				}
				if j-i > 1 && p[i] == '0' {
					return nil, "an index has no leading zeros"
				}
				n, err := strconv.Atoi(p[i:j])
				if err != nil || n > maxIndex {
					return nil, "an index is at most " + strconv.Itoa(maxIndex)
				}
				steps = append(steps, step{index: n})
				i = j + 1
			case q == '*':
				return nil, "wildcards are not supported"
			case q == '-':
				return nil, "negative indexes are not supported"
			default:
				return nil, "after [ comes an index, or a name in quotes"
			}
		default:
			return nil, "after $ come steps .name, ['name'] or [n]"
		}
	}
	return steps, ""
}
