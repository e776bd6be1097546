//go:build race

package surface

// raceEnabled: the race detector slows the marker regexps about tenfold, so
// randomized tests run fewer iterations under it.
const raceEnabled = true
