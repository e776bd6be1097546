package fpsvc

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
)

// FuzzUnmarshalObservation holds unmarshalObservation to proto.Unmarshal:
// the same inputs fail, and the others decode to equal messages.
func FuzzUnmarshalObservation(f *testing.F) {
	full, err := proto.Marshal(observation("obs-1", []byte(`{"tools":{"pages":[]}}`)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte{})
	f.Add([]byte("\xff\xff\xff not protobuf"))
	f.Add([]byte(`{"event_id":"x"}`))
	f.Add(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xc3\x28"))       // invalid UTF-8
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7))               // known number, other type
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), []byte("future"))) // unknown field
	f.Add(append(bytes.Clone(full), protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), []byte("second"))...))
	f.Add(protowire.AppendTag(nil, 0, protowire.VarintType))
	f.Add(protowire.AppendTag(nil, 5, protowire.StartGroupType))
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got mcpdriftv1.ListObservation
		wantErr := proto.Unmarshal(data, &want)
		gotErr := unmarshalObservation(data, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("proto.Unmarshal: %v; unmarshalObservation: %v", wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		want.ProtoReflect().SetUnknown(nil) // skipped, not kept
		if !proto.Equal(&want, &got) {
			t.Fatalf("decoded %v, want %v", &got, &want)
		}
	})
}
