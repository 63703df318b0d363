package rls

import (
	"strconv"
	"strings"
	"testing"
)

// TestAliasExpansionBounded: aliases that expand a small file into a huge
// tree are refused with one problem, not decoded.
func TestAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("- domain: x\n  descriptors:\n  - &d0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i < 30; i++ {
		b.WriteString("  - &d" + strconv.Itoa(i) + " {key: k" + strconv.Itoa(i) + ", descriptors: [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*d" + strconv.Itoa(i-1))
		}
		b.WriteString("]}\n")
	}
	_, ps := Parse([]byte(b.String()), "envoy")
	if len(ps) != 1 || ps[0].Message != tooLarge {
		t.Fatalf("Parse(alias bomb) = %d problems, first %v; want one: %s", len(ps), ps[:min(1, len(ps))], tooLarge)
	}
}
