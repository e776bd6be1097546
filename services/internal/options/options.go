// Package options is the skeleton every mcpdrift command shares: it reads a
// command's settings from its flags and the environment (a flag wins over
// its variable), writes the --help that lists every setting with its
// variable and built-in default (never a value from the environment: they
// can hold passwords), makes the logger, and turns the command's error into
// its exit status (docs/operations.md#exit-status).
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

// Option is one setting, as a flag and an environment variable (Env empty:
// a flag only).
type Option struct {
	Flag, Env, Arg, Usage string
	Value                 flag.Value
}

// Opt is an Option: the flag's name, its variable, the word shown for its
// value in --help, what it sets, and where it is stored.
func Opt(flag, env, arg, usage string, v flag.Value) Option {
	return Option{Flag: flag, Env: env, Arg: arg, Usage: usage, Value: v}
}

// Args says which positional arguments a command takes.
type Args int

const (
	NoArgs      Args = iota // none: one is a usage error
	Positional              // after the flags; "--" ends the flags (proxy -- COMMAND ARGS...)
	Interleaved             // flags may also come between and after them
)

// Command is what Parse reads for one command or subcommand.
type Command struct {
	Name    string // as the user types it: "drift", "driftctl bus-setup"
	Header  string // the --help text above the table of options
	Options []Option
	Args    Args
}

// ErrHelp is returned by Parse when --help (or -h) was asked for and
// written: the command stops with exit status 0.
var ErrHelp = flag.ErrHelp

// ErrUsage and ErrConfig start the errors of a bad command line or
// variable, and of settings that do not validate: exit status 2.
var (
	ErrUsage  = errors.New("usage")
	ErrConfig = errors.New("config")
)

// Usagef is a usage error: "usage: <sentence>".
func Usagef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, a...))
}

// Invalid is a configuration error ("config: <err>"), or nil when err is.
func Invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, err)
}

// Parse applies the environment, then args, to the command's options and
// returns its positional arguments. On --help it writes the header and the
// table of options (with the built-in defaults, as they were before the
// environment applied) to stderr and returns ErrHelp.
func Parse(c Command, args []string, getenv func(string) string, stderr io.Writer) ([]string, error) {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, o := range c.Options {
		fs.Var(o.Value, o.Flag, o.Usage)
	}
	var help strings.Builder
	Usage(&help, c.Header, c.Options)
	var envErr error // reported after the flags: --help works whatever the environment
	for _, o := range c.Options {
		if o.Env == "" {
			continue
		}
		if v := getenv(o.Env); v != "" {
			if err := o.Value.Set(v); err != nil && envErr == nil {
				envErr = Usagef("%s=%q (--%s): %v", o.Env, v, o.Flag, err)
			}
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stderr, help.String())
				return nil, ErrHelp
			}
			return nil, Usagef("%v (see --help)", err)
		}
		if envErr != nil {
			return nil, envErr
		}
		rest := fs.Args()
		done := len(args) - len(rest)
		switch {
		case len(rest) == 0:
			return pos, nil
		case c.Args == NoArgs:
			return nil, Usagef("unexpected arguments %q (see --help)", rest)
		case c.Args == Positional, done > 0 && args[done-1] == "--":
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0]) // Interleaved: flags may follow
		args = rest[1:]
	}
}

// Usage writes header and one line per option: its flag, variable, what it
// sets and its built-in default.
func Usage(w io.Writer, header string, opts []Option) {
	fmt.Fprint(w, header)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, o := range opts {
		def := o.Value.String()
		if def == "" {
			def = "none"
		}
		env := o.Env
		if env == "" {
			env = "-"
		}
		fmt.Fprintf(tw, "  --%s %s\t%s\t%s (default %s)\n", o.Flag, o.Arg, env, o.Usage, def)
	}
	tw.Flush()
}

// String, Int, Bool, Duration and List make a flag.Value of a settings field.
func String(p *string) flag.Value          { return (*stringValue)(p) }
func Int(p *int) flag.Value                { return (*intValue)(p) }
func Bool(p *bool) flag.Value              { return (*boolValue)(p) }
func Duration(p *time.Duration) flag.Value { return (*durationValue)(p) }

// List is a repeatable setting: each flag, and the variable, add their
// comma-separated items, each checked by parse.
func List[T any](p *[]T, parse func(string) (T, error)) flag.Value {
	return &listValue[T]{p: p, parse: parse}
}

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intValue(n)
	return nil
}

type boolValue bool

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v = boolValue(b)
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

type listValue[T any] struct {
	p     *[]T
	parse func(string) (T, error)
}

// String is empty: --help shows a list's default as none.
func (v *listValue[T]) String() string { return "" }
func (v *listValue[T]) Set(s string) error {
	for _, one := range strings.Split(s, ",") {
		x, err := v.parse(strings.TrimSpace(one))
		if err != nil {
			return err
		}
		*v.p = append(*v.p, x)
	}
	return nil
}
