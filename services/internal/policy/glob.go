package policy

import "unicode/utf8"

// isGlob reports whether p has a wildcard.
func isGlob(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '*' || p[i] == '?' {
			return true
		}
	}
	return false
}

// globMatch reports whether name matches the whole pattern p: * matches any
// run of characters (also none), ? exactly one character (a rune), anything
// else itself. Linear in len(p)*len(name) at worst, without allocating.
func globMatch(p, name string) bool {
	px, nx := 0, 0
	star, mark := -1, 0
	for nx < len(name) {
		if px < len(p) {
			switch c := p[px]; c {
			case '*':
				star, mark = px, nx
				px++
				continue
			case '?':
				_, size := utf8.DecodeRuneInString(name[nx:])
				px++
				nx += size
				continue
			default:
				if c == name[nx] {
					px++
					nx++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		// Let the last * take one more character and retry.
		_, size := utf8.DecodeRuneInString(name[mark:])
		mark += size
		px, nx = star+1, mark
	}
	for px < len(p) && p[px] == '*' {
		px++
	}
	return px == len(p)
}
