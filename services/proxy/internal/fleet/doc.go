// Package fleet connects one MCP proxy to the rest of mcpdrift over NATS
// JetStream, and keeps it safe when NATS is not there.
//
// [Gate] implements session.Gate: it watches the server's own keys in the
// status bucket, whose records (package status) carry the item hashes of
// each approved baseline, and answers from memory (it reads no manifest),
// so a verdict written by the drift service
// reaches every proxy within milliseconds and a lost connection leaves the
// proxy with what it last knew (verified stays verified, anything else
// fails closed). It keeps what it knew in an HMAC-checked copy on disk
// ([StatusCopies]), so that a proxy restarted while NATS is unreachable
// still serves what was verified.
//
// [Publisher] implements session.Observer: it publishes list and call
// observations with message ids, without ever making the session wait on
// the network, and spools them to a bounded on-disk outbox while NATS is
// unreachable, to publish later in order and without duplicates.
//
// docs/services/proxy-fleet.md describes the behaviour for operators.
package fleet
