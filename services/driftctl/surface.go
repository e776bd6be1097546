package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// maxInput bounds what driftctl reads from a file or stdin; the engine's own
// limits apply on top.
const maxInput = 64 << 20

// command is a driftctl command: its synopsis, its flags (the ones without
// a variable are flags only) and where its arguments go.
func command(name, synopsis string, args options.Args, opts ...options.Option) options.Command {
	return options.Command{Name: "driftctl " + name, Header: "Usage: driftctl " + synopsis + "\n\n", Options: opts, Args: args}
}

// noEnv is the environment of the commands on files: they read none.
func noEnv(string) string { return "" }

// usageOf writes c's usage and returns a usage error saying what is wrong.
func usageOf(c options.Command, stderr io.Writer, format string, a ...any) error {
	options.Usage(stderr, c.Header, c.Options)
	return options.Usagef(format, a...)
}

func readInput(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	var b []byte
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, coded.Errorf("input_unreadable", "%w", err)
		}
		defer f.Close()
		r = f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() <= maxInput {
			b = make([]byte, 0, st.Size()+1) // read once, not in doubling copies (a 7.6 MiB manifest: 14)
		}
	}
	b, err := readAll(b, io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, coded.Errorf("input_unreadable", "reading %s: %w", name, err)
	}
	if len(b) > maxInput {
		return nil, coded.Errorf("too_large", "%s is over %d bytes", name, maxInput)
	}
	return b, nil
}

// readAll is io.ReadAll appending to b.
func readAll(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
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
	var asJSON, noAnn bool
	algName, formName := "sha256", surface.FormLatest.String()
	c := command("fingerprint", "fingerprint [--json] [--no-annotations] [--hash sha256|sha512] [--form mcpdrift/v1|mcpdrift/v2] FILE|-", options.Interleaved,
		options.Opt("json", "", "", "print every item's hash too, as JSON", options.Bool(&asJSON)),
		options.Opt("no-annotations", "", "", "leave tool annotations out of the hashes", options.Bool(&noAnn)),
		options.Opt("hash", "", "ALG", "the hash algorithm: sha256 or sha512 (a server's drift settings say which it is judged by)", options.String(&algName)),
		formOpt(&formName))
	pos, err := options.Parse(c, args, noEnv, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageOf(c, stderr, "fingerprint takes one FILE (or - for stdin)")
	}
	alg, ok := surface.AlgNamed(algName)
	if !ok {
		return usageOf(c, stderr, "--hash %q: want sha256 or sha512", algName)
	}
	form, ok := surface.FormNamed(formName)
	if !ok {
		return usageOf(c, stderr, "--form %q: want mcpdrift/v1 or mcpdrift/v2", formName)
	}
	s, err := loadSurface(pos[0], stdin, surface.Options{ExcludeAnnotations: noAnn, Hash: alg, Form: form})
	if err != nil {
		return err
	}
	if !asJSON {
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
	var noAnn bool
	formName := surface.FormLatest.String()
	c := command("diff", "diff [--no-annotations] [--form mcpdrift/v1|mcpdrift/v2] OLD NEW", options.Interleaved,
		options.Opt("no-annotations", "", "", "leave tool annotations out of the comparison", options.Bool(&noAnn)),
		formOpt(&formName))
	pos, err := options.Parse(c, args, noEnv, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageOf(c, stderr, "diff takes two files, OLD (the baseline) and NEW")
	}
	if pos[0] == "-" && pos[1] == "-" {
		return options.Usagef("only one of OLD and NEW can be - (stdin)")
	}
	form, ok := surface.FormNamed(formName)
	if !ok {
		return usageOf(c, stderr, "--form %q: want mcpdrift/v1 or mcpdrift/v2", formName)
	}
	opt := surface.Options{ExcludeAnnotations: noAnn, Form: form}
	old, err := loadSurface(pos[0], stdin, opt)
	if err != nil {
		return err
	}
	cur, err := loadSurface(pos[1], stdin, opt)
	if err != nil {
		return err
	}
	rep := surface.Diff(old, cur)
	if err := writeJSON(stdout, rep); err != nil {
		return err
	}
	if rep.Drift {
		return options.ExitStatus(1) // a finding
	}
	return nil
}

// formOpt is the --form option: the canonical form, the newest unless
// named (a server's drift settings say which it is judged by).
func formOpt(name *string) options.Option {
	return options.Opt("form", "", "FORM", "the canonical form: mcpdrift/v2 (the default, what new servers are hashed in) or mcpdrift/v1 (baselines made before it)", options.String(name))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
