// Package options reads a service command's settings from its flags and the
// environment (a flag wins over its variable) and writes the --help that
// lists every one with its variable and built-in default.
package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Option is one setting, as a flag and an environment variable.
type Option struct {
	Flag, Env, Arg, Usage string
	Value                 flag.Value
}

// Parse applies the environment, then args, to opts. On --help it writes
// header and the table of options (with the built-in defaults, before the
// environment applied) to stderr and returns help true.
func Parse(name, header string, opts []Option, args []string, getenv func(string) string, stderr io.Writer) (help bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, o := range opts {
		fs.Var(o.Value, o.Flag, o.Usage)
	}
	var text strings.Builder
	Usage(&text, header, opts)
	for _, o := range opts {
		if v := getenv(o.Env); v != "" {
			if err := o.Value.Set(v); err != nil {
				return false, fmt.Errorf("usage: %s=%q: %v", o.Env, v, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, text.String())
			return true, nil
		}
		return false, fmt.Errorf("usage: %v (see --help)", err)
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("usage: unexpected argument %q (see --help)", fs.Arg(0))
	}
	return false, nil
}

// Usage writes header and one line per option.
func Usage(w io.Writer, header string, opts []Option) {
	fmt.Fprint(w, header)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, o := range opts {
		def := o.Value.String()
		if def == "" {
			def = "none"
		}
		fmt.Fprintf(tw, "  --%s %s\t%s\t%s (default %s)\n", o.Flag, o.Arg, o.Env, o.Usage, def)
	}
	tw.Flush()
}

// String, Int and Duration make a flag.Value of a settings field.
func String(p *string) flag.Value          { return (*stringValue)(p) }
func Int(p *int) flag.Value                { return (*intValue)(p) }
func Duration(p *time.Duration) flag.Value { return (*durationValue)(p) }

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intValue(n)
	return nil
}

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (like 500ms, 30s, 1m)")
	}
	*v = durationValue(d)
	return nil
}

// Opt is an Option: the flag's name, its variable, the word shown for its
// value in --help, what it sets, and where it is stored.
func Opt(flag, env, arg, usage string, v flag.Value) Option {
	return Option{Flag: flag, Env: env, Arg: arg, Usage: usage, Value: v}
}
