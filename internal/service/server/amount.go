package server

import (
	"math/big"
	"strconv"
	"strings"
)

// ReadableAmount writes an exact amount of cost units, given as
// sluice.Amount.String writes it ("7.5", "9 222307/6000000"), as a part of
// capacity, for people: "7.5 of 10 tokens", or, when the amount is neither
// whole nor a decimal of at most two digits, rounded to two decimals (half
// away from zero) with the exact value after it: "9.04 of 10 tokens
// (exactly 9 + 222307/6000000)". unit may be empty. An s that is not an
// amount is written as it is. The explanation's summary and sluice check
// --explain both use it, so that they show the same digits.
func ReadableAmount(s string, capacity int64, unit string) string {
	short, exact := s, ""
	if r, ok := parseAmount(s); ok {
		if rounded := r.FloatString(2); !strings.Contains(s, " ") && decimals(s) <= 2 {
			short = s
		} else {
			short, exact = rounded, strings.Replace(s, " ", " + ", 1)
		}
	}
	out := short + " of " + strconv.FormatInt(capacity, 10)
	if unit != "" {
		out += " " + unit
	}
	if exact != "" {
		out += " (exactly " + exact + ")"
	}
	return out
}

// parseAmount reads "W", "W.DDD" or "W N/D".
func parseAmount(s string) (*big.Rat, bool) {
	whole, frac, mixed := strings.Cut(s, " ")
	w, ok := new(big.Rat).SetString(whole)
	if !ok {
		return nil, false
	}
	if !mixed {
		return w, true
	}
	f, ok := new(big.Rat).SetString(frac)
	if !ok || !strings.Contains(frac, "/") {
		return nil, false
	}
	return w.Add(w, f), true
}

// decimals returns the number of digits after the point in s.
func decimals(s string) int {
	if _, frac, ok := strings.Cut(s, "."); ok {
		return len(frac)
	}
	return 0
}
