package options_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

type settings struct {
	name  string
	n     int
	on    bool
	wait  time.Duration
	items []string
}

func command(s *settings, args options.Args) options.Command {
	s.name, s.n, s.wait = "built-in", 1, time.Second
	return options.Command{Name: "cmd", Header: "cmd: a test\n\nUsage: cmd [flags]\n\n", Args: args, Options: []options.Option{
		options.Opt("name", "T_NAME", "NAME", "a name", options.String(&s.name)),
		options.Opt("n", "T_N", "N", "a number", options.Int(&s.n)),
		options.Opt("on", "T_ON", "", "a switch", options.Bool(&s.on)),
		options.Opt("wait", "", "DURATION", "a duration, no variable", options.Duration(&s.wait)),
		options.Opt("item", "T_ITEMS", "X", "items", options.List(&s.items, func(v string) (string, error) {
			if v == "" {
				return "", errors.New("empty item")
			}
			return v, nil
		})),
	}}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    options.Args
		args    []string
		env     map[string]string
		wantPos []string
		wantErr string
		check   func(settings) bool
	}{
		{name: "defaults", check: func(s settings) bool { return s.name == "built-in" && s.n == 1 && !s.on && s.wait == time.Second }},
		{name: "env", env: map[string]string{"T_NAME": "e", "T_N": "7", "T_ON": "true", "T_ITEMS": "a,b"},
			check: func(s settings) bool {
				return s.name == "e" && s.n == 7 && s.on && slices.Equal(s.items, []string{"a", "b"})
			}},
		{name: "flag_wins", args: []string{"--name", "f", "--on=false"}, env: map[string]string{"T_NAME": "e", "T_ON": "1"},
			check: func(s settings) bool { return s.name == "f" && !s.on }},
		{name: "list_adds", args: []string{"--item", "c", "--item", "d"}, env: map[string]string{"T_ITEMS": "a"},
			check: func(s settings) bool { return slices.Equal(s.items, []string{"a", "c", "d"}) }},
		{name: "bad_env", env: map[string]string{"T_N": "many"}, wantErr: `usage: T_N="many" (--n): not an integer`},
		{name: "bad_list", args: []string{"--item", ""}, wantErr: "empty item"},
		{name: "bad_flag", args: []string{"--nope"}, wantErr: "usage: flag provided but not defined: -nope"},
		{name: "no_args", args: []string{"x"}, wantErr: `usage: unexpected arguments ["x"]`},
		{name: "positional", mode: options.Positional, args: []string{"--n", "2", "--", "cmd", "--n", "3"}, wantPos: []string{"cmd", "--n", "3"},
			check: func(s settings) bool { return s.n == 2 }},
		{name: "interleaved", mode: options.Interleaved, args: []string{"a", "--n", "2", "b", "--on", "--", "--c", "-d"},
			wantPos: []string{"a", "b", "--c", "-d"}, check: func(s settings) bool { return s.n == 2 && s.on }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s settings
			pos, err := options.Parse(command(&s, tc.mode), tc.args, func(k string) string { return tc.env[k] }, &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || options.Status(err) != options.ExitUsage {
					t.Fatalf("err = %v, want a usage error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(pos, tc.wantPos) || (tc.check != nil && !tc.check(s)) {
				t.Fatalf("pos %q err %v settings %+v", pos, err, s)
			}
		})
	}
}

// TestHelp: --help lists every option with its variable and the built-in
// default, never a value of the environment, even a malformed one.
func TestHelp(t *testing.T) {
	var s settings
	var stderr bytes.Buffer
	env := map[string]string{"T_NAME": "nats://u:pw-from-env@h", "T_N": "not-a-number"}
	_, err := options.Parse(command(&s, options.NoArgs), []string{"--help"}, func(k string) string { return env[k] }, &stderr)
	if !errors.Is(err, options.ErrHelp) || options.Status(err) != options.ExitOK {
		t.Fatalf("--help: %v", err)
	}
	help := stderr.String()
	for _, want := range []string{"Usage: cmd", "--name NAME", "T_NAME", "(default built-in)", "--n N", "(default 1)", "--on ", "(default false)", "--wait DURATION", "(default 1s)", "(default none)"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "pw-from-env") || strings.Contains(help, "not-a-number") {
		t.Errorf("--help shows the environment:\n%s", help)
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  int
		print string
	}{
		{nil, options.ExitOK, ""},
		{fmt.Errorf("wrapped: %w", options.ErrHelp), options.ExitOK, ""},
		{options.Usagef("bad"), options.ExitUsage, "cmd: usage: bad\n"},
		{options.Invalid(errors.New("replicas 9")), options.ExitUsage, "cmd: config: replicas 9\n"},
		{options.ExitStatus(3), 3, ""},
		{errors.New("connecting to NATS"), options.ExitFailure, "cmd: connecting to NATS\n"},
		{context.Canceled, options.ExitFailure, "cmd: context canceled\n"},
	} {
		var w bytes.Buffer
		if code := options.Report(&w, "cmd", tc.err); code != tc.code || w.String() != tc.print {
			t.Errorf("Report(%v) = %d %q, want %d %q", tc.err, code, w.String(), tc.code, tc.print)
		}
	}
	if options.Invalid(nil) != nil {
		t.Error("Invalid(nil) is not nil")
	}
}
