//go:build unix

package testkit

import (
	"testing"
	"time"
)

// TestProcessGrows: 50ms of busy work moves the reading forward.
func TestProcessGrows(t *testing.T) {
	before := Process()
	x := 0
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
		x++
	}
	after := Process()
	if before <= 0 || after-before < 10*time.Millisecond {
		t.Fatalf("Process() went from %v to %v after 50ms of work (x=%d); want a positive reading that grows by at least 10ms", before, after, x)
	}
}
