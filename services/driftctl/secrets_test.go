package main

import (
	"strings"
	"testing"
)

// TestSecretsNeverShow: no command's --help shows a value of the
// environment (the admin API URL, the NATS URL and ClickHouse address can
// hold passwords), and a failed connect to NATS does not show the password.
func TestSecretsNeverShow(t *testing.T) {
	const secret = "s3cret-pw"
	env := map[string]string{
		"MCPDRIFT_API":             "http://user:" + secret + "@127.0.0.1:1",
		"MCPDRIFT_TOKEN":           "ops:write:" + secret,
		"MCPDRIFT_NATS_URL":        "nats://user:" + secret + "@127.0.0.1:1",
		"MCPDRIFT_CLICKHOUSE_ADDR": "user-" + secret + ":9000",
		"MCPDRIFT_CLICKHOUSE_USER": secret,
		"MCPDRIFT_AUDIT_DATABASE":  secret,
	}
	for _, args := range [][]string{{"status", "--help"}, {"approve", "--help"}, {"diff", "--live", "--help"}, {"tail", "--help"},
		{"audit", "--help"}, {"audit", "drifts", "--help"}, {"bus-setup", "--help"}, {"bus-setup", "--timeout", "5s"}} {
		out, errOut, code := runCLIEnv(t, env, args...)
		if strings.Contains(out+errOut, secret) {
			t.Errorf("%v (exit %d) shows a secret:\n%s%s", args, code, out, errOut)
		}
	}
}
