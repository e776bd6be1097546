package notifysvc

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Formats of a destination's requests.
const (
	FormatJSON        = "json"        // the generic JSON document (Envelope)
	FormatSlack       = "slack"       // a Slack incoming-webhook message: text and blocks
	FormatCloudEvents = "cloudevents" // a CloudEvents 1.0 event, HTTP structured mode
)

// Formats are every format.
var Formats = []string{FormatJSON, FormatSlack, FormatCloudEvents}

// CodeUnknownFormat is the code of a format that is not one of Formats.
const CodeUnknownFormat = "unknown_format"

// CheckFormat returns an unknown_format error for a format that is not one
// of Formats.
func CheckFormat(format string) error {
	if !slices.Contains(Formats, format) {
		return coded.Errorf(CodeUnknownFormat, "format %q: want %s", format, strings.Join(Formats, ", "))
	}
	return nil
}

// Envelope is the generic JSON document of an event (format json), and the
// data of its CloudEvent.
type Envelope struct {
	ID       string          `json:"id"`
	Kind     string          `json:"kind"`
	Tenant   string          `json:"tenant"`
	Server   string          `json:"server"`
	Variant  string          `json:"variant,omitempty"`
	Status   string          `json:"status"`
	Severity string          `json:"severity"`
	Time     string          `json:"time"` // RFC 3339, UTC, milliseconds
	Subject  string          `json:"subject"`
	Summary  string          `json:"summary"`
	Event    json.RawMessage `json:"event"`
}

// CloudEventsSource is the source of every CloudEvent, followed by
// /<tenant>/<server>.
const CloudEventsSource = "/mcpdrift"

// CloudEventsTypePrefix starts the type of every CloudEvent: followed by
// the kind and the version of its data (io.mcpdrift.verdict.v1).
const CloudEventsTypePrefix = "io.mcpdrift."

// CloudEvent is a CloudEvents 1.0 event in its JSON format, with the
// extension attributes tenant, status and severity for routing.
type CloudEvent struct {
	SpecVersion     string   `json:"specversion"`
	ID              string   `json:"id"`
	Source          string   `json:"source"`
	Type            string   `json:"type"`
	Subject         string   `json:"subject"`
	Time            string   `json:"time"`
	DataContentType string   `json:"datacontenttype"`
	Tenant          string   `json:"tenant"`
	Status          string   `json:"status"`
	Severity        string   `json:"severity"`
	Data            Envelope `json:"data"`
}

// Content types of the requests.
const (
	contentJSON        = "application/json"
	contentCloudEvents = "application/cloudevents+json; charset=utf-8"
)

// Render is the body and content type of ev's request in format.
func Render(format string, ev *Event) (body []byte, contentType string, err error) {
	env := Envelope{ID: ev.ID, Kind: ev.Kind, Tenant: ev.Tenant, Server: ev.Server, Variant: ev.Variant, Status: ev.Status,
		Severity: ev.Severity, Time: ev.Time.UTC().Format(timeFormat), Subject: ev.Subject, Summary: ev.Summary, Event: ev.Data}
	switch format {
	case FormatJSON:
		body, err = json.Marshal(env)
		return body, contentJSON, err
	case FormatCloudEvents:
		subject := ev.Tenant + "/" + ev.Server
		if ev.Variant != "" {
			subject += "/" + ev.Variant
		}
		body, err = json.Marshal(CloudEvent{
			SpecVersion: "1.0", ID: ev.ID, Source: CloudEventsSource + "/" + ev.Tenant + "/" + ev.Server,
			Type: CloudEventsTypePrefix + ev.Kind + ".v1", Subject: subject, Time: env.Time, DataContentType: contentJSON,
			Tenant: ev.Tenant, Status: ev.Status, Severity: ev.Severity, Data: env,
		})
		return body, contentCloudEvents, err
	case FormatSlack:
		body, err = json.Marshal(slackMessage(ev, env.Time))
		return body, contentJSON, err
	}
	return nil, "", CheckFormat(format)
}

// timeFormat is RFC 3339 with milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// slackMessage is a Slack incoming-webhook payload: text (the notification
// and the fallback) and blocks (a section with the summary, a context line
// with the fields). Every value is escaped (slackEscape): a server's reason
// text cannot mention a channel or make a link.
func slackMessage(ev *Event, at string) map[string]any {
	title := map[string]string{
		KindVerdict: "Verdict", KindQuarantine: "Quarantined", KindApproval: "Approved",
		KindHeldCall: "Call held for approval", KindCallResolved: "Held call resolved",
	}[ev.Kind]
	text := fmt.Sprintf("mcpdrift %s: %s", strings.ToLower(title), slackEscape(ev.Summary))
	fields := []string{"*tenant* " + slackEscape(ev.Tenant), "*server* " + slackEscape(ev.Server), "*status* " + slackEscape(ev.Status)}
	if ev.Variant != "" {
		fields = append(fields, "*variant* "+slackEscape(ev.Variant))
	}
	if ev.Severity != "none" {
		fields = append(fields, "*severity* "+slackEscape(ev.Severity))
	}
	fields = append(fields, "*id* "+slackEscape(ev.ID), at)
	return map[string]any{
		"text": text,
		"blocks": []any{
			map[string]any{"type": "section", "text": map[string]string{"type": "mrkdwn",
				"text": "*" + title + "*\n" + clipEscaped(slackEscape(ev.Summary), 2900)}},
			map[string]any{"type": "context", "elements": []any{map[string]string{"type": "mrkdwn",
				"text": strings.Join(fields, "  ·  ")}}},
		},
	}
}

// slackEscape escapes the three characters Slack's mrkdwn gives a meaning
// to (links, mentions): &, < and >.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// clipEscaped cuts escaped text to at most n runes (a section's text is
// limited to 3000 characters), never inside an entity (&amp; &lt; &gt;).
func clipEscaped(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	cut := string(r[:n])
	if i := strings.LastIndexByte(cut, '&'); i >= 0 && !strings.Contains(cut[i:], ";") {
		cut = cut[:i]
	}
	return cut + "…"
}
