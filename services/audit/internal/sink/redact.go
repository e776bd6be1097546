package sink

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// Redacted replaces a secret in stored arguments.
const Redacted = "[REDACTED]"

// secretKey matches object keys whose values are secrets whatever they hold.
var secretKey = regexp.MustCompile(`(?i)(pass(word|wd|phrase)?|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|authori[sz]ation|credential|cookie|session[_-]?id|bearer)`)

// secretValue matches known secret formats inside any string.
var secretValue = regexp.MustCompile(strings.Join([]string{
	`AKIA[0-9A-Z]{16}`,                                                          // AWS access key id
	`(?i)aws_secret_access_key\s*[=:]\s*\S+`,                                    // AWS secret in a config line
	`gh[pousr]_[A-Za-z0-9]{36,}`,                                                // GitHub tokens
	`github_pat_[A-Za-z0-9_]{40,}`,                                              // GitHub fine-grained tokens
	`sk-[A-Za-z0-9_-]{20,}`,                                                     // OpenAI-style and Anthropic keys
	`xox[abprs]-[A-Za-z0-9-]{10,}`,                                              // Slack tokens
	`AIza[0-9A-Za-z_-]{35}`,                                                     // Google API keys
	`glpat-[A-Za-z0-9_-]{20,}`,                                                  // GitLab tokens
	`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`,             // JWTs
	`(?i)bearer\s+[A-Za-z0-9._~+/=-]{16,}`,                                      // bearer credentials
	`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----`, // PEM private keys
	`(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@`,                             // passwords in URLs (user:pass@)
}, "|"))

// Redact returns tool-call arguments with known secrets replaced: values of
// keys that name a secret (password, token, api_key, authorization, ...)
// and strings in known secret formats (cloud and forge tokens, JWTs, bearer
// credentials, PEM private keys, passwords in URLs). Arguments that are not
// JSON are redacted as text.
func Redact(args []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber() // numbers keep their digits
	if err := dec.Decode(&v); err != nil || dec.More() {
		return secretValue.ReplaceAllString(string(args), Redacted)
	}
	out, err := json.Marshal(redactValue(v))
	if err != nil {
		return Redacted
	}
	return string(out)
}

func redactValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if secretKey.MatchString(k) {
				x[k] = Redacted
				continue
			}
			x[k] = redactValue(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = redactValue(e)
		}
		return x
	case string:
		return secretValue.ReplaceAllString(x, Redacted)
	}
	return v
}
