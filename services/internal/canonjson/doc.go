// Package canonjson parses untrusted JSON strictly and writes it in the
// canonical form of RFC 8785 (JSON Canonicalization Scheme).
//
// A [Doc] holds one parsed document as a flat array of nodes that point into
// the source bytes; nothing is decoded until it is written. Parsing rejects,
// with a stable [Code], everything RFC 8785 cannot canonicalize exactly or
// that a hostile peer could use to make two readers disagree: duplicate keys,
// invalid UTF-8, lone surrogates, nesting or size past the limits, numbers
// that overflow or underflow, and numbers, in any notation, whose exact
// value is not that of the double they read as, written shortest (2^53 + 1,
// 1.00000000000000000001, 3e-324): readers that keep numbers exact and
// readers that use doubles would read such a literal differently, so it
// never gets a hash.
//
// Object members are sorted once, at parse time, by the UTF-16 code units of
// their decoded keys, which is also how duplicates are found. Arrays are
// written in order unless marked with [Doc.MarkSet], in which case their
// elements are written sorted by their canonical bytes (for set-valued
// keywords such as JSON Schema's "required").
//
// A Doc is reused across parses: its buffers keep their capacity, so steady
// state parsing and writing does not allocate, whatever the nesting depth.
package canonjson
