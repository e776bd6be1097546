package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Conn is how a command connects to NATS: every command connects through
// Connect, so that each one names itself, keeps to its role's inbox, logs
// the same connection events and never shows a password.
type Conn struct {
	URL         string // NATS server URLs, comma-separated; may hold passwords
	Creds       string // a .creds file; empty: none
	Name        string // the client name the server shows (mcpdrift-<command>)
	InboxPrefix string // where replies arrive (deploy/nats/auth.conf); empty: _INBOX
	// Once: connect once and never reconnect (a one-shot command, such as
	// driftctl bus-setup). Otherwise the connection reconnects for ever.
	Once bool
	// Background: return at once and connect in the background when no
	// server answers (the proxy starts without NATS and spools).
	Background bool
	// OnAsyncError is called, besides the log line, with each asynchronous
	// error (a permissions violation, a slow consumer).
	OnAsyncError func(error)
}

// ErrNATSAuth is returned (wrapped) when NATS refuses the credentials.
var ErrNATSAuth = errors.New("nats refused the credentials")

// Connect connects to NATS within ctx. Its errors and every line it logs
// show the URLs with their passwords and tokens hidden (RedactURLs), and it
// logs the connection's events: connected and closed at debug,
// disconnected (but for closing) and asynchronous errors at warn,
// reconnected at info. Quiet when healthy.
func Connect(ctx context.Context, c Conn, log zerolog.Logger) (*nats.Conn, error) {
	secrets := urlSecrets(c.URL)
	hide := func(err error) error { return redacted(err, secrets) }
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Debug().Str("url", nc.ConnectedUrlRedacted()).Msg("nats connected")
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closing: the closed event says it
			}
			log.Warn().AnErr("err", hide(err)).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
		// Closed comes after the command closed the connection, when it may
		// be ending: debug only (what went wrong before was logged).
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Debug().AnErr("last_err", hide(nc.LastError())).Msg("nats connection closed")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().AnErr("err", hide(err))
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
			if c.OnAsyncError != nil {
				c.OnAsyncError(err)
			}
		}),
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.Once {
		opts = append(opts, nats.NoReconnect())
	} else {
		opts = append(opts, nats.MaxReconnects(-1))
	}
	if c.Background {
		opts = append(opts, nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second))
	}
	if deadline, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(deadline)))
	}
	at := RedactURLs(c.URL)
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(c.URL, opts...)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			return r.nc, nil
		case errors.Is(r.err, nats.ErrAuthorization), errors.Is(r.err, nats.ErrAuthExpired), errors.Is(r.err, nats.ErrAuthRevoked):
			return nil, fmt.Errorf("connecting to NATS at %s: %w: %w", at, ErrNATSAuth, hide(r.err))
		}
		return nil, fmt.Errorf("connecting to NATS at %s: %w", at, hide(r.err))
	case <-ctx.Done():
		go func() { // the attempt ends by its own timeout; close what it made
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connecting to NATS at %s: %w", at, context.Cause(ctx))
	}
}

// RedactURLs hides the secrets of a comma-separated list of NATS URLs, for
// logs and errors: "nats://user:pw@host" becomes "nats://user:xxxxx@host",
// and "nats://token@host" (a user without a password is the NATS token)
// becomes "nats://xxxxx@host". It works on the text, so a secret that is not
// valid URL syntax is hidden too.
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		scheme, userinfo, rest, ok := splitUserinfo(u)
		if !ok {
			continue
		}
		if c := strings.IndexByte(userinfo, ':'); c >= 0 {
			parts[i] = scheme + userinfo[:c] + ":xxxxx" + rest
		} else {
			parts[i] = scheme + "xxxxx" + rest
		}
	}
	return strings.Join(parts, ",")
}

// splitUserinfo splits "scheme://userinfo@rest" into "scheme://",
// userinfo and "@rest".
func splitUserinfo(u string) (scheme, userinfo, rest string, ok bool) {
	at := strings.LastIndex(u, "@")
	s := strings.Index(u, "://")
	if at < 0 || s < 0 || at < s {
		return "", "", "", false
	}
	return u[:s+3], u[s+3 : at], u[at:], true
}

// urlSecrets returns the passwords and tokens of a list of URLs, as written
// and unescaped, for hiding them in error texts.
func urlSecrets(urls string) []string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		_, userinfo, _, ok := splitUserinfo(strings.TrimSpace(u))
		if !ok {
			continue
		}
		secret := userinfo
		if c := strings.IndexByte(userinfo, ':'); c >= 0 {
			secret = userinfo[c+1:]
		}
		if secret == "" {
			continue
		}
		out = append(out, secret)
		if un, err := url.PathUnescape(secret); err == nil && un != secret {
			out = append(out, un)
		}
		// A URL parse error quotes the whole URL: hide it with its user.
		out = append(out, userinfo)
	}
	return out
}

// redactedError is an error whose text has the secrets hidden; errors.Is
// and errors.As still see the original.
type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

func redacted(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	for _, s := range secrets {
		text = strings.ReplaceAll(text, s, "xxxxx")
	}
	return &redactedError{text: text, err: err}
}
