package notifysvc

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// CodeInvalidWebhook is the code of a webhook URL that cannot be posted
// to: not a URL, not http or https, or without a host.
const CodeInvalidWebhook = "invalid_webhook"

// CodeInvalidDestination is the code of a destination's name that cannot
// name its consumers, or that two destinations share.
const CodeInvalidDestination = "invalid_destination"

// Headers of every request.
const (
	// HeaderIdempotencyKey is the event's id: the same on every delivery
	// of the event, so that a receiver drops a repeat.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderTimestamp is the Unix time in seconds of the attempt, part of
	// what the signature covers.
	HeaderTimestamp = "X-Mcpdrift-Timestamp"
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed with the
	// secret, of the timestamp, a dot and the body (Sign). Sent only with a
	// secret.
	HeaderSignature = "X-Mcpdrift-Signature"
	// HeaderKind is the event's kind.
	HeaderKind = "X-Mcpdrift-Kind"
)

// Sign is the value of HeaderSignature for a body sent at timestamp (Unix
// seconds, as HeaderTimestamp carries it).
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Destination is one webhook, the format of its requests and the filter of
// its events. Its URL is never printed: a Slack webhook's path, or its
// user information, is a credential. Logs, metrics and errors name the
// destination by Name and Host.
type Destination struct {
	Name   string
	url    *url.URL
	Format string
	Filter Filter
}

// MaxNameLength bounds a destination's name: its consumers are
// notify-<name> and notify-<name>-approvals, and a consumer name is at most
// 64 characters (bus.ValidID).
const MaxNameLength = 64 - len(ConsumerPrefix) - len(approvalsSuffix)

// ParseDestination checks a destination. name may be empty: it is then
// the first 12 hex digits of the SHA-256 of the URL, so that a destination
// keeps its consumers, and its place in the stream, across restarts. The
// errors never show the URL, only its position (nth, from 1) and scheme.
func ParseDestination(nth int, rawURL, name, format, filter string) (Destination, error) {
	var d Destination
	u, err := url.Parse(rawURL)
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text quotes the URL
	}
	switch {
	case rawURL == "":
		return d, coded.Errorf(CodeInvalidWebhook, "webhook %d: empty URL", nth)
	case err != nil:
		return d, coded.Errorf(CodeInvalidWebhook, "webhook %d: not a URL: %v", nth, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return d, coded.Errorf(CodeInvalidWebhook, "webhook %d: scheme %q: want http or https", nth, u.Scheme)
	case u.Hostname() == "":
		return d, coded.Errorf(CodeInvalidWebhook, "webhook %d: no host", nth)
	}
	if _, err := strconv.Atoi(u.Port()); u.Port() != "" && err != nil {
		return d, coded.Errorf(CodeInvalidWebhook, "webhook %d: port %q is not a number", nth, u.Port())
	}
	if name == "" {
		sum := sha256.Sum256([]byte(rawURL))
		name = hex.EncodeToString(sum[:6])
	}
	if err := bus.ValidID("name", name); err != nil || len(name) > MaxNameLength {
		return d, coded.Errorf(CodeInvalidDestination, "webhook %d: name %q: want 1 to %d characters of A-Z, a-z, 0-9, _ and -", nth, clip(name, 70), MaxNameLength)
	}
	if format == "" {
		format = FormatJSON
	}
	if err := CheckFormat(format); err != nil {
		return d, coded.Errorf(CodeUnknownFormat, "webhook %d: %s", nth, coded.MessageOf(err))
	}
	f, err := ParseFilter(filter)
	if err != nil {
		return d, coded.Errorf(CodeInvalidFilter, "webhook %d: %s", nth, coded.MessageOf(err))
	}
	return Destination{Name: name, url: u, Format: format, Filter: f}, nil
}

// Host is the destination's host and port, safe to print.
func (d Destination) Host() string { return d.url.Host }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Failure reasons: the reason label of mcpdrift_notify_delivery_failures_total.
const (
	FailConnect = "connect"  // no answer: refused, reset, DNS, TLS
	FailTimeout = "timeout"  // no answer within --timeout
	Fail3xx     = "http_3xx" // a redirect, which is not followed (it would carry the signed body elsewhere)
	Fail4xx     = "http_4xx"
	Fail5xx     = "http_5xx"
)

// FailureReasons are every failure reason.
var FailureReasons = []string{FailConnect, FailTimeout, Fail3xx, Fail4xx, Fail5xx}

// sender posts requests.
type sender struct {
	client  *http.Client
	secret  []byte
	timeout time.Duration
	now     func() time.Time
}

func newSender(secret []byte, timeout time.Duration, now func() time.Time) *sender {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 16
	return &sender{
		client: &http.Client{
			Transport: transport,
			// A redirect is an answer, not followed: the signed body and its
			// headers go only where the operator said.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		secret:  secret,
		timeout: timeout,
		now:     now,
	}
}

// deliveryError is a failed attempt: its reason, and a sentence that never
// holds the URL.
type deliveryError struct {
	reason string
	msg    string
}

func (e *deliveryError) Error() string { return e.msg }

// post sends one event's request to d; a failed attempt is a
// *deliveryError.
func (s *sender) post(ctx context.Context, d *Destination, ev *Event, body []byte, contentType string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url.String(), bytes.NewReader(body))
	if err != nil {
		return &deliveryError{reason: FailConnect, msg: fmt.Sprintf("destination %s: making the request: %v", d.Name, unwrapURL(err))}
	}
	ts := strconv.FormatInt(s.now().Unix(), 10)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "mcpdrift-notify")
	req.Header.Set(HeaderIdempotencyKey, ev.ID)
	req.Header.Set(HeaderKind, ev.Kind)
	req.Header.Set(HeaderTimestamp, ts)
	if len(s.secret) > 0 {
		req.Header.Set(HeaderSignature, Sign(s.secret, ts, body))
	}
	res, err := s.client.Do(req)
	if err != nil {
		reason := FailConnect
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			reason = FailTimeout
		}
		return &deliveryError{reason: reason, msg: fmt.Sprintf("posting to destination %s (%s): %v", d.Name, d.Host(), unwrapURL(err))}
	}
	// Read a little of the answer so that the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return nil
	}
	reason := Fail5xx
	switch {
	case res.StatusCode < 400:
		reason = Fail3xx
	case res.StatusCode < 500:
		reason = Fail4xx
	}
	return &deliveryError{reason: reason, msg: fmt.Sprintf("destination %s (%s) answered %s", d.Name, d.Host(), res.Status)}
}

// unwrapURL drops the *url.Error around err, whose text quotes the URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
