package fpsvc

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
)

// ListObservation field numbers (proto/mcpdrift/v1/events.proto).
const (
	obsEventID    protowire.Number = 1
	obsTenant     protowire.Number = 2
	obsServer     protowire.Number = 3
	obsProxy      protowire.Number = 4
	obsVariant    protowire.Number = 5
	obsObservedAt protowire.Number = 6
	obsCapture    protowire.Number = 7
)

// unmarshalObservation decodes a ListObservation as proto.Unmarshal does,
// except that capture aliases data instead of copying it: a capture is
// most of an observation (up to 16 MiB), and the message buffer is ours.
// FuzzUnmarshalObservation holds it to proto.Unmarshal's results.
func unmarshalObservation(data []byte, obs *mcpdriftv1.ListObservation) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return wireError(n)
		}
		if !num.IsValid() {
			return fmt.Errorf("field number %d out of range", num)
		}
		data = data[n:]
		var known bool
		switch {
		case typ == protowire.BytesType && (num >= obsEventID && num <= obsVariant || num == obsCapture):
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return wireError(n)
			}
			data = data[n:]
			known = true
			if num == obsCapture {
				obs.Capture = v[:len(v):len(v)]
				continue
			}
			if !utf8.Valid(v) {
				return fmt.Errorf("field %d: string is not valid UTF-8", num)
			}
			s := string(v)
			switch num {
			case obsEventID:
				obs.EventId = s
			case obsTenant:
				obs.Tenant = s
			case obsServer:
				obs.Server = s
			case obsProxy:
				obs.Proxy = s
			case obsVariant:
				obs.Variant = s
			}
		case num == obsObservedAt && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return wireError(n)
			}
			data = data[n:]
			obs.ObservedAtUnixMs = int64(v)
			known = true
		}
		if !known { // unknown, or a known number with another wire type: skipped
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return wireError(n)
			}
			data = data[n:]
		}
	}
	return nil
}

func wireError(n int) error {
	if err := protowire.ParseError(n); err != nil {
		return err
	}
	return errors.New("invalid wire format")
}
