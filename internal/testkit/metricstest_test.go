package testkit

import "testing"

func TestSeriesValue(t *testing.T) {
	const text = "# TYPE a counter\na{x=\"1\"} 2\na 3\nab 4\n"
	for _, tt := range []struct {
		series, want string
		ok           bool
	}{
		{`a{x="1"}`, "2", true},
		{"a", "3", true},
		{"ab", "4", true},
		{`a{x="2"}`, "", false},
		{"b", "", false},
	} {
		if got, ok := SeriesValue(text, tt.series); got != tt.want || ok != tt.ok {
			t.Errorf("SeriesValue(%s) = %q, %v; want %q, %v", tt.series, got, ok, tt.want, tt.ok)
		}
	}
}
