package session

// VariantOf returns the listing variant that params declare: the params of
// an initialize, or of any 2026-07-28 request, whose _meta names the
// protocol version and the client's capabilities. It is the variant a
// session opened with such params decides and publishes in, for a
// transport that keeps listings of its own per variant.
func VariantOf(params []byte) string { return variantOf(params) }
