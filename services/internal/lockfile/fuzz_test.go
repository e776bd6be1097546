package lockfile

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// FuzzRead: the reader never panics; a file it accepts is written back
// by Marshal to a file it reads as the same, and its verification ends in
// nil or a coded error of this package, never anything else.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"memory.lock.json", "everything.lock.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"format":"mcpdrift/baseline-lock/v1","tenant":"a","server":"b","exported_at_ms":1,"exported_by":"x","variants":[{"variant":"v","hashing":{"hash":"sha256","annotations":true},"baseline":{"version":1,"hash":"sha256:00","captured_at_ms":1,"approved_at_ms":1,"approved_by":"a","reason":"r"},"listed":["tool"],"items":[{"kind":"tool","name":"t","hash":"sha256:00","definition":{"name":"t"}}]}]}`))
	trusted := []ed25519.PublicKey{pub(testKey(1))}
	f.Fuzz(func(t *testing.T, data []byte) {
		lf, err := Read(data)
		if err != nil {
			if coded.CodeOf(err) != CodeMalformed {
				t.Fatalf("Read refused with %q: %v", coded.CodeOf(err), err)
			}
			return
		}
		out, err := lf.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a file Read accepted: %v", err)
		}
		again, err := Read(out)
		if err != nil {
			t.Fatalf("Read of what Marshal wrote: %v", err)
		}
		a, _ := lf.Signed()
		b, _ := again.Signed()
		if !bytes.Equal(a, b) {
			t.Fatalf("a round trip changed what is signed:\n%s\n%s", a, b)
		}
		if _, err := lf.Verify(trusted); err != nil {
			switch coded.CodeOf(err) {
			case CodeSignatureInvalid, CodeKeyUnknown, CodeHashMismatch, CodeMalformed:
			default:
				t.Fatalf("Verify failed with %q: %v", coded.CodeOf(err), err)
			}
		}
	})
}
