package sluice

import "testing"

func TestAmountString(t *testing.T) {
	tests := []struct {
		name string
		a    Amount
		want string
	}{
		{"zero", Amount{}, "0"},
		{"whole", Amount{Whole: 7, Den: 1_000_000}, "7"},
		{"quarter", Amount{Whole: 7, Num: 250_000, Den: 1_000_000}, "7.25"},
		{"leading zeros", Amount{Whole: 0, Num: 5, Den: 1_000_000}, "0.000005"},
		{"nine digits", Amount{Whole: 1, Num: 1, Den: 512}, "1.001953125"},
		{"ten digits is a fraction", Amount{Whole: 1, Num: 1, Den: 1024}, "1 1/1024"},
		{"third", Amount{Whole: 41, Num: 40_000_000, Den: 60_000_000}, "41 2/3"},
		{"minute period", Amount{Whole: 99, Num: 59_999_999, Den: 60_000_000}, "99 59999999/60000000"},
		{"unreduced half", Amount{Whole: 3, Num: 30_000_000, Den: 60_000_000}, "3.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.String(); got != tt.want {
				t.Errorf("%+v.String() = %q, want %q", tt.a, got, tt.want)
			}
			b, err := tt.a.MarshalText()
			if err != nil || string(b) != tt.want {
				t.Errorf("MarshalText() = %q, %v, want %q", b, err, tt.want)
			}
		})
	}
}
