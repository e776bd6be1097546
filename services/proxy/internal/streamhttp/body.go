package streamhttp

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// media is how the proxy reads the body of an upstream answer.
type media int

const (
	mediaEmpty   media = iota // no body: nothing to read
	mediaJSON                 // application/json: judged as a whole
	mediaSSE                  // text/event-stream: judged event by event
	mediaRefused              // anything else: never read, never copied
)

// upBody is the body of a 2xx upstream answer, opened the way the clients
// read it.
type upBody struct {
	kind    media
	r       io.Reader // decoded (Content-Encoding undone); nil unless JSON or SSE
	refused string    // why the proxy does not read it (mediaRefused)
}

// openBody reads how a 2xx upstream answer is to be read:
//
//   - Content-Type: its essence (before ';', trimmed, any case) must be
//     application/json or text/event-stream, the value must parse as a
//     media type, and it must not name the other type anywhere (the
//     TypeScript SDK has tested the whole value with includes()); a single
//     Content-Type header only. A body with any other, or none, is refused,
//     unless it is empty.
//   - Content-Encoding: none or identity is read as it is; gzip (x-gzip)
//     and deflate (zlib) are decoded, the decoded size bounded by the
//     readers that follow (MaxMessage per message or event); anything else
//     is refused.
func openBody(resp *http.Response) upBody {
	kind, why := mediaOf(resp.Header)
	if kind == mediaRefused || kind == mediaEmpty {
		if bodyEmpty(resp) {
			return upBody{kind: mediaEmpty}
		}
		if why == "" {
			why = "a body without a Content-Type"
		}
		return upBody{kind: mediaRefused, refused: why}
	}
	r, why := decoded(resp)
	if why != "" {
		return upBody{kind: mediaRefused, refused: why}
	}
	return upBody{kind: kind, r: r}
}

// mediaOf reads the Content-Type of an answer; mediaEmpty when there is
// none.
func mediaOf(h http.Header) (media, string) {
	vs := h.Values("Content-Type")
	switch {
	case len(vs) == 0:
		return mediaEmpty, ""
	case len(vs) > 1:
		return mediaRefused, "several Content-Type headers"
	}
	v := vs[0]
	switch v { // the common values, as the rules below read them, without parsing
	case "application/json":
		return mediaJSON, ""
	case "text/event-stream":
		return mediaSSE, ""
	}
	essence, _, _ := strings.Cut(v, ";")
	essence = strings.ToLower(strings.TrimSpace(essence))
	if _, _, err := mime.ParseMediaType(v); err != nil {
		return mediaRefused, fmt.Sprintf("an unreadable Content-Type %.100q", v)
	}
	lower := strings.ToLower(v)
	switch {
	case essence == "application/json" && !strings.Contains(lower, "text/event-stream"):
		return mediaJSON, ""
	case essence == "text/event-stream" && !strings.Contains(lower, "application/json"):
		return mediaSSE, ""
	}
	return mediaRefused, fmt.Sprintf("a Content-Type %.100q that is not application/json or text/event-stream alone", v)
}

// bodyEmpty reports an answer without a body; it may read the first byte.
func bodyEmpty(resp *http.Response) bool {
	if resp.ContentLength == 0 || resp.Body == nil || resp.Body == http.NoBody {
		return true
	}
	br := bufio.NewReaderSize(resp.Body, 16)
	_, err := br.Peek(1)
	resp.Body = struct {
		io.Reader
		io.Closer
	}{br, resp.Body}
	return err != nil
}

// decoded returns the body with its Content-Encoding undone, or why the
// proxy does not read it. A gzip or zlib reader starts on the first read,
// so that an event stream's headers need not wait for its first bytes.
func decoded(resp *http.Response) (io.Reader, string) {
	var codings []string
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return resp.Body, ""
	case len(codings) > 1:
		return nil, fmt.Sprintf("Content-Encoding %q: more than one coding", strings.Join(codings, ", "))
	}
	switch codings[0] {
	case "gzip", "x-gzip":
		return &lazyReader{open: func() (io.Reader, error) { return gzip.NewReader(resp.Body) }}, ""
	case "deflate":
		return &lazyReader{open: func() (io.Reader, error) { return zlib.NewReader(resp.Body) }}, ""
	}
	return nil, fmt.Sprintf("Content-Encoding %.40q, which the proxy does not decode", codings[0])
}

// lazyReader opens its reader on the first Read.
type lazyReader struct {
	open func() (io.Reader, error)
	r    io.Reader
	err  error
}

func (l *lazyReader) Read(p []byte) (int, error) {
	if l.r == nil && l.err == nil {
		l.r, l.err = l.open()
		if l.err != nil {
			l.err = fmt.Errorf("decoding the body: %w", l.err)
		}
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.r.Read(p)
}
