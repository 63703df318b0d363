package simulate

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/service/decisionlog"
)

// FuzzReplay checks that a decision log, whatever it holds, is read and
// replayed without a panic: the reader fails with the line it stopped
// at, and the replay takes every record it accepts, in order of time and
// order (SortRecords), or fails with an error.
func FuzzReplay(f *testing.F) {
	for _, s := range []string{
		`{"time":"2026-01-01T00:00:00Z","order":3,"door":"check","limits":[{"limit":"a","key":"k","cost":1,"outcome":"allowed"},{"limit":"dry","key":"k","cost":1,"outcome":"shadow_denied","at":"2026-01-01T00:00:00.000001Z","order":4}]}`,
		`{"time":"2026-01-01T00:00:00Z","order":4294967295,"door":"rls","rule":"edge","limits":[{"limit":"a","key":"k","cost":0,"outcome":"allowed"},{"limit":"b","key":"k","cost":1,"outcome":"denied","mode":"shadow"}]}`,
		`{"time":"2026-01-01T00:00:00Z","door":"proxy","limits":[{"limit":"a","key":"k","cost":-4,"outcome":"denied","at":"2025-01-01T00:00:00Z","order":1}]}`,
		`{"time":"9999-12-31T23:59:59.999999Z","order":18446744073709551615,"door":"check","limits":[{"limit":"dry","key":"k","cost":4611686018427387904,"outcome":"allowed","at":"0001-01-01T00:00:00.000001Z","order":1}]}`,
	} {
		f.Add(s + "\n" + s)
	}
	limits := map[string]ReplayLimit{
		"a":   {Policy: sluice.TokenBucket(2, time.Second, 2).Named("a")},
		"b":   {Policy: sluice.FixedWindow(1, time.Minute).Named("b")},
		"dry": {Policy: sluice.SlidingWindow(1, time.Minute).Named("dry"), Shadow: true},
	}
	f.Fuzz(func(t *testing.T, data string) {
		dr := decisionlog.NewReader(strings.NewReader(data))
		var recs []*decisionlog.Record
		for {
			rec, err := dr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				if !strings.HasPrefix(err.Error(), "line ") {
					t.Fatalf("reader error %q names no line", err)
				}
				break
			}
			recs = append(recs, rec)
		}
		SortRecords(recs)
		r := NewReplay(limits, "a")
		defer r.Close()
		for _, rec := range recs {
			if err := r.Add(t.Context(), rec); err != nil {
				return
			}
		}
		r.Report()
	})
}
