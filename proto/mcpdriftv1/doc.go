// Package mcpdriftv1 is the Go form of the mcpdrift bus contract, version 1,
// generated from proto/mcpdrift/v1/events.proto by `make proto` (only this
// file is written by hand). Subscribers import it to decode events; the
// drift, admin and dead-letter subjects are JSON and need no generated code.
package mcpdriftv1
