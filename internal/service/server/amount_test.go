package server

import "testing"

func TestReadableAmount(t *testing.T) {
	tests := []struct {
		s, unit string
		of      int64
		want    string
	}{
		{"9 222307/6000000", "tokens", 10, "9.04 of 10 tokens (exactly 9 + 222307/6000000)"},
		{"33 1/3", "", 100, "33.33 of 100 (exactly 33 + 1/3)"},
		{"0 1/2000000", "units", 5, "0.00 of 5 units (exactly 0 + 1/2000000)"},
		{"9 2/3", "", 10, "9.67 of 10 (exactly 9 + 2/3)"},
		{"9 497/500", "", 10, "9.99 of 10 (exactly 9 + 497/500)"},
		{"9 199/200", "", 10, "10.00 of 10 (exactly 9 + 199/200)"}, // 9.995, half away from zero
		{"9 999/1000", "", 10, "10.00 of 10 (exactly 9 + 999/1000)"},
		{"7.00004635", "tokens", 10, "7.00 of 10 tokens (exactly 7.00004635)"},
		{"7.125", "", 10, "7.13 of 10 (exactly 7.125)"},
		{"7.25", "tokens", 10, "7.25 of 10 tokens"},
		{"7.5", "tokens", 10, "7.5 of 10 tokens"},
		{"10", "tokens", 10, "10 of 10 tokens"},
		{"0", "", 3, "0 of 3"},
		{"nonsense", "", 3, "nonsense of 3"},
		{"1 x/y", "", 3, "1 x/y of 3"},
	}
	for _, tt := range tests {
		if got := ReadableAmount(tt.s, tt.of, tt.unit); got != tt.want {
			t.Errorf("ReadableAmount(%q, %d, %q) = %q, want %q", tt.s, tt.of, tt.unit, got, tt.want)
		}
	}
}
