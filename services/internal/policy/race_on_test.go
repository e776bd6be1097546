//go:build race

package policy

// raceEnabled: under the race detector sync.Pool drops what it is given at
// random, so the parsed arguments' buffers are allocated again; allocation
// counts are asserted only without it.
const raceEnabled = true
