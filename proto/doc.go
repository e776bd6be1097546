// Package proto is the mcpdrift bus contract: the versioned event schemas that
// proxies, services and subscribers exchange over NATS JetStream.
//
// The schemas themselves land with the bus contract; this module exists so that
// subscribers can import the contract without pulling in the services.
package proto
