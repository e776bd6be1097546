// Command canonbaseline is the baseline of BenchmarkFingerprintProcess: it
// canonicalizes one JSON file (RFC 8785) with a general implementation and
// prints the SHA-256 of the result, as a process, for comparison with
// `driftctl fingerprint` on the same file in the same run.
//
//	canonbaseline jsontext|jcs FILE
package main

import (
	"crypto/sha256"
	"fmt"
	"os"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: canonbaseline jsontext|jcs FILE")
		os.Exit(2)
	}
	src, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var out []byte
	switch os.Args[1] {
	case "jsontext":
		v := jsontext.Value(src)
		err = v.Canonicalize()
		out = v
	case "jcs":
		out, err = jcs.Transform(src)
	default:
		err = fmt.Errorf("unknown implementation %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("sha256:%x\n", sha256.Sum256(out))
}
