package bus

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Reads by batch direct get. A KV listing (ListKeysFiltered) and an object
// store read (ObjectStore.Get) each create an ordered consumer, and on a
// clustered JetStream every consumer created or deleted is a proposal of
// the meta group, which one leader applies one at a time for the whole
// cluster: a service that does either for every message it handles makes
// the meta group its limit. A batch direct get is one request that any
// replica answers from its store, with no consumer and no proposal:
// LastPerSubject stands for a filtered listing with its values, ReadObject
// for an object's chunks.
//
// A direct get may be answered by a replica a moment behind the leader:
// what it returns was true at some sequence, as a read of a KV value is.
// Callers that write decide with compare-and-set (a stale read is a
// conflict, not a wrong write); ReadObject's caller falls back to the
// leader's consumer when an object just written is not found yet.

// ErrDirectGetUnavailable is returned when the stream does not allow direct
// gets (AllowDirect off): the caller reads the usual way.
var ErrDirectGetUnavailable = errors.New("direct get not allowed on the stream")

// StoredMsg is one message returned by a direct get.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	Header   nats.Header
	Data     []byte
}

// maxDirectBatch is the most messages one batch direct get returns: the
// server's own bound on a multi_last answer.
const maxDirectBatch = 1024

// ErrTooManyResults is returned when a LastPerSubject filter matches more
// subjects than one batch returns.
var ErrTooManyResults = errors.New("more subjects match than one direct get returns")

// LastPerSubject returns the last message of every subject of stream that
// one of filters (wildcards allowed) matches, in one batch direct get,
// ordered by sequence. No match is an empty result.
func LastPerSubject(ctx context.Context, js jetstream.JetStream, stream string, filters ...string) ([]StoredMsg, error) {
	return directBatch(ctx, js, stream, map[string]any{"multi_last": filters, "batch": maxDirectBatch})
}

// ReadObject reads the object name of the object store bucket with direct
// gets: its info, then its chunks in one batch. It checks the bytes against
// the info's size and SHA-256 digest, as ObjectStore.Get does. An object
// not found is jetstream.ErrObjectNotFound, a deleted one too.
func ReadObject(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, bucket, name string) ([]byte, error) {
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	if info.Deleted {
		return nil, jetstream.ErrObjectNotFound
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, fmt.Errorf("object %s is a link: not read by direct get", name)
	}
	out := make([]byte, 0, info.Size)
	if info.Chunks > 0 {
		msgs, err := directBatch(ctx, js, "OBJ_"+bucket, map[string]any{
			"seq": 1, "next_by_subj": "$O." + bucket + ".C." + info.NUID, "batch": int(info.Chunks)})
		if err != nil {
			return nil, fmt.Errorf("reading the chunks of object %s: %w", name, err)
		}
		if len(msgs) != int(info.Chunks) {
			return nil, fmt.Errorf("object %s: %d chunks read, its info says %d", name, len(msgs), info.Chunks)
		}
		for _, m := range msgs {
			out = append(out, m.Data...)
		}
	}
	if uint64(len(out)) != info.Size {
		return nil, fmt.Errorf("object %s: %d bytes read, its info says %d", name, len(out), info.Size)
	}
	sum := sha256.Sum256(out)
	if want := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]); info.Digest != want {
		return nil, fmt.Errorf("object %s: digest %s, its info says %s", name, want, info.Digest)
	}
	return out, nil
}

// directBatch sends one batch direct get request and gathers its answer up
// to the end-of-batch marker.
func directBatch(ctx context.Context, js jetstream.JetStream, stream string, req map[string]any) ([]StoredMsg, error) {
	nc := js.Conn()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	opts := js.Options()
	prefix := opts.APIPrefix
	switch {
	case opts.Domain != "":
		prefix = "$JS." + opts.Domain + ".API."
	case prefix == "":
		prefix = jetstream.DefaultAPIPrefix
	case !strings.HasSuffix(prefix, "."):
		prefix += "."
	}
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(prefix+"DIRECT.GET."+stream, inbox, body); err != nil {
		return nil, err
	}
	// A request the server refuses (a permission) gets no answer at all:
	// wait as long as any JetStream request of the connection does.
	if _, ok := ctx.Deadline(); !ok && opts.DefaultTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.DefaultTimeout)
		defer cancel()
	}
	var out []StoredMsg
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("direct get on %s: %w", stream, ctx.Err())
		case m = <-ch:
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "204": // end of batch
			return out, nil
		case "404":
			if len(out) == 0 && strings.HasPrefix(m.Header.Get("Description"), "No Results") {
				return nil, nil
			}
			return nil, fmt.Errorf("direct get on %s: %s %s", stream, st, m.Header.Get("Description"))
		case "413":
			return nil, fmt.Errorf("direct get on %s: %w", stream, ErrTooManyResults)
		case "503":
			return nil, fmt.Errorf("direct get on %s: %w", stream, ErrDirectGetUnavailable)
		default:
			return nil, fmt.Errorf("direct get on %s: %s %s", stream, st, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("direct get on %s: a message without its sequence", stream)
		}
		out = append(out, StoredMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: m.Header, Data: m.Data})
		if len(out) > maxDirectBatch {
			return nil, fmt.Errorf("direct get on %s: %w", stream, ErrTooManyResults)
		}
	}
}

// objectChunkSize is the object store's own default chunk size.
const objectChunkSize = 128 << 10

// PutObject stores data as the object name of the object store bucket, in
// the object store's own format (chunks on $O.<bucket>.C.<nuid>, the info
// on $O.<bucket>.M.<name> with a subject rollup), every message published
// at once and their acknowledgements awaited together: one round trip,
// where ObjectStore.Put first reads the object's info to purge an earlier
// version's chunks. It is for a content-addressed name the caller found
// absent a moment before: a name written twice at once leaves the first
// writer's chunks unreferenced (as ObjectStore.Put racing itself does).
func PutObject(ctx context.Context, js jetstream.JetStream, bucket, name string, data []byte) error {
	id := nuid.Next()
	chunkSubj := "$O." + bucket + ".C." + id
	var futures []jetstream.PubAckFuture
	for off := 0; off < len(data); off += objectChunkSize {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: chunkSubj, Data: data[off:min(off+objectChunkSize, len(data))]})
		if err != nil {
			return fmt.Errorf("storing object %s: %w", name, err)
		}
		futures = append(futures, f)
	}
	sum := sha256.Sum256(data)
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: objectChunkSize}},
		Bucket:     bucket, NUID: id, Size: uint64(len(data)), ModTime: time.Now().UTC(),
		Chunks: uint32(len(futures)), Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]),
	}
	meta, err := json.Marshal(info)
	if err != nil {
		return err
	}
	mm := nats.NewMsg("$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name)))
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	mm.Data = meta
	f, err := js.PublishMsgAsync(mm)
	if err != nil {
		return fmt.Errorf("storing object %s: %w", name, err)
	}
	futures = append(futures, f)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("storing object %s: %w", name, err)
		case <-ctx.Done():
			return fmt.Errorf("storing object %s: %w", name, ctx.Err())
		}
	}
	return nil
}
