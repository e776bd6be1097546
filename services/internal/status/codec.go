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
// MaxRecordBytes. A record that would not fit leaves out its live items,
// then its baseline's, and says so (ItemsOmitted); they are cleared from
// rec too, so that rec is what was stored. A variant whose baseline items
// were left out is not served (Serve): with more items than fit, the proxy
// could not compare them with anything, and fails closed.
func Encode(rec *Record) ([]byte, error) {
	rec.ItemsOmitted = false
	for {
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encoding status of %s/%s variant %s: %w", rec.Tenant, rec.Server, rec.Variant, err)
		}
		if len(data) <= MaxRecordBytes {
			return data, nil
		}
		switch {
		case rec.LiveItems != nil:
			rec.LiveItems, rec.ItemsOmitted = nil, true
		case rec.BaselineItems != nil:
			rec.BaselineItems, rec.ItemsOmitted = nil, true
		default:
			return nil, fmt.Errorf("%w: the status of %s/%s variant %s takes %d bytes, more than the bucket's %d",
				ErrRecordTooLarge, rec.Tenant, rec.Server, rec.Variant, len(data), MaxRecordBytes)
		}
	}
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
