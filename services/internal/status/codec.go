package status

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MaxRecordBytes is the largest value the status bucket takes (its
// MaxValueSize, set by bus.Setup).
const MaxRecordBytes = 1 << 20

// ErrRecordTooLarge: a record does not fit in the status bucket even
// without its item hashes.
var ErrRecordTooLarge = errors.New("record_too_large")

// Encode returns the JSON of rec to store in the status bucket, within
// MaxRecordBytes. A record does not grow with its manifest: it never stores
// the live items, nor the baseline's when its baseline version's entry holds
// them (ItemsInBaseline). Only a baseline kept before versions held items
// stays in the record; if that would not fit, it is left out too, and
// ItemsOmitted says so. What is left out is cleared from rec too, so that
// rec is what was stored. A variant whose baseline items are not known is
// not served (Serve): the proxy could not compare them with anything, and
// fails closed.
func Encode(rec *Record) ([]byte, error) {
	rec.ItemsOmitted = false
	rec.LiveItems = nil
	if rec.ItemsInBaseline() {
		rec.BaselineItems = nil
	} else {
		rec.BaselineItemsVersion = 0
	}
	for {
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encoding status of %s/%s variant %s: %w", rec.Tenant, rec.Server, rec.Variant, err)
		}
		if len(data) <= MaxRecordBytes {
			return data, nil
		}
		if rec.BaselineItems == nil {
			return nil, fmt.Errorf("%w: the status of %s/%s variant %s takes %d bytes, more than the bucket's %d",
				ErrRecordTooLarge, rec.Tenant, rec.Server, rec.Variant, len(data), MaxRecordBytes)
		}
		rec.BaselineItems, rec.ItemsOmitted = nil, true
	}
}

// DecodeBaseline reads a baseline version as stored.
func DecodeBaseline(data []byte) (Baseline, error) {
	var b Baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return Baseline{}, fmt.Errorf("decoding baseline: %w", err)
	}
	if b.Version <= 0 || b.Hash == "" {
		return Baseline{}, errors.New("decoding baseline: no version or hash")
	}
	return b, nil
}

// DecodeRecord reads a variant's record as stored. A value without a
// status is not a record (a reader fails closed on it).
func DecodeRecord(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("decoding status record: %w", err)
	}
	if r.Status == "" {
		return Record{}, errors.New("decoding status record: no status")
	}
	return r, nil
}

// DecodeServer reads a server record as stored. A value that does not say
// whether the server is held is not a server record (a reader holds the
// server on it: fail closed).
func DecodeServer(data []byte) (Server, error) {
	var probe struct {
		Held *bool `json:"held"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return Server{}, fmt.Errorf("decoding server record: %w", err)
	}
	if probe.Held == nil {
		return Server{}, errors.New("decoding server record: no held")
	}
	var s Server
	if err := json.Unmarshal(data, &s); err != nil {
		return Server{}, fmt.Errorf("decoding server record: %w", err)
	}
	return s, nil
}
