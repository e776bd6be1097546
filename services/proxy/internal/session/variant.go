package session

import (
	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// VariantOf returns the listing variant that params declare: the params of
// an initialize, or of any 2026-07-28 request, whose _meta names the
// protocol version and the client's capabilities. It is the variant a
// session opened with such params decides and publishes in, for a
// transport that keeps listings of its own per variant.
func VariantOf(params []byte) string { return variantOf(&jsonrpc.Message{Params: params}) }

// MetaVersion returns the protocol version a 2026-07-28 request names in
// the _meta of its params ("" when it names none, or not as a string);
// named reports that the _meta has the key at all, whatever its value (the
// request then declares its variant there: variantOf).
func MetaVersion(params []byte) (version string, named bool) {
	d := object(params)
	if d == nil {
		return "", false
	}
	meta, ok := d.Get(canonjson.Root, jsonrpc.MetaKey)
	if !ok || d.Kind(meta) != canonjson.Object {
		return "", false
	}
	v, ok := d.Get(meta, jsonrpc.MetaProtocolVersion)
	if ok && d.Kind(v) == canonjson.String {
		version = d.Text(v)
	}
	return version, ok
}

// metaNames reports params whose _meta names a protocol version.
func metaNames(params []byte) bool {
	_, named := MetaVersion(params)
	return named
}
