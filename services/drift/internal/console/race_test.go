//go:build race

package console

// raceEnabled: the race detector slows the in-process nats-server about
// tenfold, so timings are reported, not held to the goal.
const raceEnabled = true
