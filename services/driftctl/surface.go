package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// maxInput bounds what driftctl reads from a file or stdin; the engine's own
// limits apply on top.
const maxInput = 64 << 20

func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: driftctl %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; --help exits 0, a bad flag is a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return exitError{0}
	}
	if err != nil {
		return exitError{2} // the flag package has printed the problem and the usage
	}
	return nil
}

func readInput(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("input_unreadable: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("input_unreadable: reading %s: %w", name, err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("too_large: %s is over %d bytes", name, maxInput)
	}
	return b, nil
}

func loadSurface(name string, stdin io.Reader, opt surface.Options) (*surface.Surface, error) {
	raw, err := readInput(name, stdin)
	if err != nil {
		return nil, err
	}
	s, err := surface.Parse(raw, opt)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, name)
	}
	return s, nil
}

func runFingerprint(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("fingerprint", "fingerprint [--json] [--no-annotations] FILE|-", stderr)
	asJSON := fs.Bool("json", false, "print every item's hash too, as JSON")
	noAnn := fs.Bool("no-annotations", false, "leave tool annotations out of the hashes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("usage: fingerprint takes one FILE (or - for stdin)")
	}
	s, err := loadSurface(fs.Arg(0), stdin, surface.Options{ExcludeAnnotations: *noAnn})
	if err != nil {
		return err
	}
	if !*asJSON {
		_, err = fmt.Fprintln(stdout, s.Hash)
		return err
	}
	type item struct {
		Kind string         `json:"kind"`
		Name string         `json:"name"`
		Hash surface.Digest `json:"hash"`
	}
	out := struct {
		Hash  surface.Digest `json:"hash"`
		Items []item         `json:"items"`
	}{Hash: s.Hash, Items: []item{}}
	for _, it := range s.Items {
		out.Items = append(out.Items, item{it.Kind.String(), it.Name, it.Hash})
	}
	return writeJSON(stdout, out)
}

func runDiff(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("diff", "diff [--no-annotations] OLD NEW", stderr)
	noAnn := fs.Bool("no-annotations", false, "leave tool annotations out of the comparison")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errors.New("usage: diff takes two files, OLD (the baseline) and NEW")
	}
	if fs.Arg(0) == "-" && fs.Arg(1) == "-" {
		return errors.New("usage: only one of OLD and NEW can be - (stdin)")
	}
	opt := surface.Options{ExcludeAnnotations: *noAnn}
	old, err := loadSurface(fs.Arg(0), stdin, opt)
	if err != nil {
		return err
	}
	cur, err := loadSurface(fs.Arg(1), stdin, opt)
	if err != nil {
		return err
	}
	rep := surface.Diff(old, cur)
	if err := writeJSON(stdout, rep); err != nil {
		return err
	}
	if rep.Drift {
		return exitError{1}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
