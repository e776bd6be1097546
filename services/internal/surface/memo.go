package surface

import "bytes"

// Memo remembers the raw bytes of the last verified listing and its Surface,
// so that a proxy which sees the same bytes again (the common case: a server
// that did not change) recognizes them by comparing bytes, without parsing or
// hashing. It compares every byte: a weak hash of attacker-chosen bytes is
// never taken as proof of equality. A Memo is not safe for concurrent use.
type Memo struct {
	pages [][]byte
	s     *Surface
}

// Match returns the remembered Surface when pages are byte for byte the
// remembered ones.
func (m *Memo) Match(pages ...[]byte) (*Surface, bool) {
	if m.s == nil || len(pages) != len(m.pages) {
		return nil, false
	}
	for i, p := range pages {
		if !bytes.Equal(p, m.pages[i]) {
			return nil, false
		}
	}
	return m.s, true
}

// Remember stores a copy of pages as the listing that produced s.
func (m *Memo) Remember(s *Surface, pages ...[]byte) {
	m.pages = m.pages[:0]
	for _, p := range pages {
		m.pages = append(m.pages, bytes.Clone(p))
	}
	m.s = s
}

// Forget drops what m remembers, as when the server's status leaves verified.
func (m *Memo) Forget() {
	m.pages, m.s = nil, nil
}
