package sink

import (
	"slices"
	"testing"
)

// The table label's values are the tables a batch writes.
func TestMetricsTablesAreTheBatchTables(t *testing.T) {
	var names []string
	for _, tb := range new(batch).tables() {
		names = append(names, tb.name())
	}
	if !slices.Equal(names, Tables) {
		t.Fatalf("batch tables %v, Tables %v", names, Tables)
	}
}
