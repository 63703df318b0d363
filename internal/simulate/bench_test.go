package simulate

import (
	"io"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// benchRequests returns n requests from 100,000 keys, about two per
// millisecond, with costs 1 to 3.
func benchRequests(n int) []Request {
	rng := rand.New(rand.NewPCG(1, 1))
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	reqs := make([]Request, n)
	t := int64(1767268800000)
	for i := range reqs {
		t += rng.Int64N(2)
		reqs[i] = Request{T: t, Key: keys[rng.IntN(len(keys))], Cost: 1 + rng.Int64N(3)}
	}
	return reqs
}

// BenchmarkRun measures a replay per request: one algorithm with a per-key
// summary, and all six with a comparison.
func BenchmarkRun(b *testing.B) {
	reqs := benchRequests(1 << 20)
	b.Run("token_bucket/summary", func(b *testing.B) {
		ps := []sluice.Policy{sluice.TokenBucket(100, time.Minute, 0)}
		sum := NewKeySummary(ps[0])
		benchRun(b, reqs, ps, func(r Request, ds []sluice.Decision) error { sum.Add(r, ds[0]); return nil })
	})
	b.Run("all/comparison", func(b *testing.B) {
		ps := allPolicies(100, time.Minute, 0)
		cmp := NewComparison(ps)
		benchRun(b, reqs, ps, func(r Request, ds []sluice.Decision) error { cmp.Add(r, ds); return nil })
	})
	b.Run("jsonl", func(b *testing.B) {
		ps := []sluice.Policy{sluice.LeakyBucket(100, time.Minute, 0)}
		jw := NewJSONLWriter(io.Discard)
		benchRun(b, reqs, ps, func(r Request, ds []sluice.Decision) error { return jw.Write(r, ds[0]) })
	})
}

// benchRun replays b.N requests, cycling through reqs with time moving on.
func benchRun(b *testing.B, reqs []Request, ps []sluice.Policy, observe func(Request, []sluice.Decision) error) {
	b.ReportAllocs()
	src := &cycleSource{reqs: reqs, n: b.N}
	if err := Run(b.Context(), src, ps, observe); err != nil {
		b.Fatal(err)
	}
}

type cycleSource struct {
	reqs   []Request
	i, n   int
	offset int64
}

func (s *cycleSource) Next() (Request, error) {
	if s.n == 0 {
		return Request{}, io.EOF
	}
	s.n--
	if s.i == len(s.reqs) {
		s.i = 0
		s.offset += s.reqs[len(s.reqs)-1].T - s.reqs[0].T + 1
	}
	r := s.reqs[s.i]
	s.i++
	r.T += s.offset
	return r, nil
}

// BenchmarkTraceReader measures parsing, per line.
func BenchmarkTraceReader(b *testing.B) {
	var buf []byte
	for _, r := range benchRequests(1 << 16) {
		buf = append(r.AppendCSV(buf), '\n')
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)) / (1 << 16))
	n := 0
	for n < b.N {
		tr := NewTraceReader(&byteReader{b: buf})
		for n < b.N {
			if _, err := tr.Next(); err != nil {
				break
			}
			n++
		}
	}
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
