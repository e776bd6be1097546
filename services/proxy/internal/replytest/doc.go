// Package replytest holds the proxy's test of its one reply path: the same
// bad inputs, fed through every transport (stdio, Streamable HTTP,
// HTTP+SSE) to the same kind of upstream, get the same answer, byte for
// byte, with the code and the shape the registry of codes gives
// (session.Reply, docs/codes.md). It has no code of its own beside the
// test.
package replytest
