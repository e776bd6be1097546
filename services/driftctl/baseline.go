package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

const baselineUsage = `Usage: driftctl baseline keygen|export|verify|import [flags]

Baselines as code: a server's approved baselines as a signed lockfile
(canonical JSON, an embedded ed25519 signature) to keep in git, check in CI
and install into a drift service (docs/operations.md, "Baselines as code"):
  keygen --out FILE          write a signing key pair: FILE (the private key,
                             mode 0600) and FILE.pub (the public key); PEM
  export --sign KEY T S      print the server's approved baselines, read
                             through the admin API (read role), as a lockfile
                             signed with the private key KEY
  verify --key PUB FILE      check a lockfile: its signature by one of the
                             public keys in PUB, and every item definition
                             hashes to its item hash and the items make up the
                             baseline hash (the fingerprint engine's own
                             check); exit 0, or 2 with the error's code
  import --key PUB FILE      verify the lockfile as verify does, then install
                             it through the admin API (write role, audited):
                             the drift service checks the signature against
                             its own trusted keys (--baseline-keys)

Run "driftctl baseline COMMAND --help" for a command's flags.
`

func runBaseline(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, baselineUsage)
		if len(args) == 0 {
			return options.Usagef("baseline needs a command: keygen, export, verify or import")
		}
		return options.ErrHelp
	}
	switch args[0] {
	case "keygen":
		var out string
		c := command("baseline keygen", "baseline keygen --out FILE", options.Interleaved,
			options.Opt("out", "", "FILE", "where the private key goes (mode 0600); the public key goes to FILE.pub; neither is ever overwritten", options.String(&out)))
		pos, err := options.Parse(c, args[1:], noEnv, stderr)
		if err != nil {
			return err
		}
		if out == "" || len(pos) != 0 {
			return usageOf(c, stderr, "baseline keygen takes --out FILE and no argument")
		}
		return keygen(out, stdout)
	case "export":
		conn := newAPIConn()
		var sign string
		c := command("baseline export", "baseline export --sign KEY TENANT SERVER", options.Interleaved, conn.options(
			options.Opt("sign", "", "KEY", "the private key file to sign the lockfile with (driftctl baseline keygen)", options.String(&sign)))...)
		pos, err := options.Parse(c, args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		p, err := serverPath("baseline export", pos)
		if err != nil || sign == "" {
			options.Usage(stderr, c.Header, c.Options)
			return errors.Join(err, errors.New("usage: baseline export needs --sign KEY"))
		}
		key, err := readPrivateKey(sign, stdin)
		if err != nil {
			return err
		}
		return export(ctx, conn.client(), p, key, stdout)
	case "verify", "import":
		name := "baseline " + args[0]
		conn := newAPIConn()
		var keyFile string
		opts := []options.Option{options.Opt("key", "", "PUB", "a file of one or more trusted public keys (PEM; FILE.pub of driftctl baseline keygen)", options.String(&keyFile))}
		env := noEnv
		if args[0] == "import" {
			opts, env = conn.options(opts...), getenv
		}
		c := command(name, name+" --key PUB FILE|-", options.Interleaved, opts...)
		pos, err := options.Parse(c, args[1:], env, stderr)
		if err != nil {
			return err
		}
		if keyFile == "" || len(pos) != 1 {
			return usageOf(c, stderr, "%s takes --key PUB and one FILE (or - for stdin)", name)
		}
		keys, err := readPublicKeys(keyFile)
		if err != nil {
			return err
		}
		data, err := readInput(pos[0], stdin)
		if err != nil {
			return err
		}
		f, err := verify(data, keys)
		if err != nil {
			return err
		}
		if args[0] == "verify" {
			fmt.Fprintln(stdout, summary(f))
			return nil
		}
		var ans json.RawMessage
		if err := conn.client().send(ctx, "POST", "/v1/servers/"+f.Tenant+"/"+f.Server+"/baseline", data, "application/json", &ans); err != nil {
			return err
		}
		return writeJSON(stdout, ans)
	}
	fmt.Fprint(stderr, baselineUsage)
	return options.Usagef("unknown baseline command %q", args[0])
}

// keygen writes a new key pair: out (the private key, 0600) and out.pub.
// Neither file may exist: a key is never overwritten.
func keygen(out string, stdout io.Writer) error {
	priv, pub, err := lockfile.GenerateKey()
	if err != nil {
		return err
	}
	for _, p := range []string{out, out + ".pub"} {
		if _, err := os.Lstat(p); err == nil {
			return coded.Errorf("output_unwritable", "%s exists; a key is never overwritten (remove it or choose another --out)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return coded.Errorf("output_unwritable", "%w", err)
		}
	}
	if err := writeNew(out, priv, 0o600); err != nil {
		return err
	}
	if err := writeNew(out+".pub", pub, 0o644); err != nil {
		return err
	}
	keys, err := lockfile.ParsePublicKeys(pub)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (private, 0600) and %s.pub (public); key id %s\n", out, out, lockfile.KeyID(keys[0]))
	return nil
}

// writeNew creates path with mode perm (never over an existing file) and
// writes data.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return coded.Errorf("output_unwritable", "%w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return coded.Errorf("output_unwritable", "writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return coded.Errorf("output_unwritable", "writing %s: %w", path, err)
	}
	return nil
}

func readPrivateKey(path string, stdin io.Reader) (ed25519.PrivateKey, error) {
	data, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	key, err := lockfile.ParsePrivateKey(data)
	if err != nil {
		return nil, coded.Errorf(lockfile.CodeKeyInvalid, "%s: %s", path, coded.MessageOf(err))
	}
	return key, nil
}

func readPublicKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := readInput(path, nil)
	if err != nil {
		return nil, err
	}
	keys, err := lockfile.ParsePublicKeys(data)
	if err != nil {
		return nil, coded.Errorf(lockfile.CodeKeyInvalid, "%s: %s", path, coded.MessageOf(err))
	}
	return keys, nil
}

// export reads the server's unsigned lockfile from the admin API, checks
// every variant's hashes with the engine (nothing is signed that would not
// verify), signs it and prints it.
func export(ctx context.Context, c *apiClient, path string, key ed25519.PrivateKey, stdout io.Writer) error {
	var raw json.RawMessage
	if err := c.do(ctx, "GET", path+"/baseline", nil, &raw); err != nil {
		return ambiguityHint(err)
	}
	f, err := lockfile.Read(raw)
	if err != nil {
		return coded.Errorf(coded.CodeOf(err), "the drift service's answer: %s", coded.MessageOf(err))
	}
	for i := range f.Variants {
		if _, err := f.Variants[i].Surface(); err != nil {
			return err
		}
	}
	if err := f.Sign(key); err != nil {
		return err
	}
	data, err := f.Marshal()
	if err != nil {
		return err
	}
	_, err = stdout.Write(data)
	return err
}

// verify reads a lockfile and checks it against keys.
func verify(data []byte, keys []ed25519.PublicKey) (*lockfile.File, error) {
	f, err := lockfile.Read(data)
	if err != nil {
		return nil, err
	}
	if _, err := f.Verify(keys); err != nil {
		return nil, err
	}
	return f, nil
}

// summary is verify's line: what the lockfile holds and who signed it.
func summary(f *lockfile.File) string {
	var vs []string
	for _, v := range f.Variants {
		vs = append(vs, fmt.Sprintf("%s v%d %s (%d items, approved by %s)", v.Variant, v.Baseline.Version, short(v.Baseline.Hash), len(v.Items), v.Baseline.ApprovedBy))
	}
	return fmt.Sprintf("ok: %s/%s, signed by key %.16s: %s", f.Tenant, f.Server, f.Signature.KeyID, strings.Join(vs, "; "))
}
