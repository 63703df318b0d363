package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// The benchmarks use a policy under which every request is admitted and
// every key stays tracked: one unit per minute refilled, a burst of 1e8 (the
// policy of the side-by-side benchmarks in the bench module). The burst is
// never exhausted within a run at the default -benchtime (a run charges far
// fewer than 1e8 units to one key), and a key needs a minute per request it
// took to refill, far longer than the time between two requests to it, so
// no key is dropped as back to initial and every decision is on an existing
// key. This measures the hot path (a decision that charges and writes the
// state back); a denied request does the same work less the write.
var benchPolicy = sluice.TokenBucket(1, time.Minute, 100_000_000)

func newLimiter(b *testing.B, policies ...sluice.Policy) (*sluice.Limiter, *memstore.Store) {
	b.Helper()
	st := memstore.New(memstore.Options{})
	l, err := sluice.New(st, policies...)
	if err != nil {
		b.Fatalf("sluice.New: %v", err)
	}
	return l, st
}

// checkAllowed fails the benchmark unless the decision admitted the
// request. It returns false after a failure so that RunParallel bodies,
// which must not call FailNow, can stop.
func checkAllowed(b *testing.B, d sluice.Decision, err error) bool {
	if err != nil || !d.Allowed {
		b.Errorf("Allow = %+v, %v, want allowed", d, err)
		return false
	}
	return true
}

// BenchmarkOneKey is one key, token bucket, through Limiter.Allow and
// Store.Allow, both on the store's own clock, serial and parallel.
func BenchmarkOneKey(b *testing.B) {
	ctx := context.Background()
	b.Run("Limiter.Allow/serial", func(b *testing.B) {
		l, _ := newLimiter(b, benchPolicy)
		b.ReportAllocs()
		for b.Loop() {
			d, err := l.Allow(ctx, "user:1", 1)
			checkAllowed(b, d, err)
		}
	})
	b.Run("Limiter.Allow/parallel", func(b *testing.B) {
		l, _ := newLimiter(b, benchPolicy)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := l.Allow(ctx, "user:1", 1); !checkAllowed(b, d, err) {
					return
				}
			}
		})
	})
	b.Run("Store.Allow/serial", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		req := sluice.Request{Policy: &benchPolicy, Key: "user:1", Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			d, err := st.Allow(ctx, time.Time{}, req)
			checkAllowed(b, d, err)
		}
	})
	b.Run("Store.Allow/parallel", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		req := sluice.Request{Policy: &benchPolicy, Key: "user:1", Cost: 1}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := st.Allow(ctx, time.Time{}, req); !checkAllowed(b, d, err) {
					return
				}
			}
		})
	})
}

// BenchmarkAlgorithm is one key, serial, for each algorithm, at explicit
// times: the clock advances 2 ms per request under 1000 units per second,
// half the policy's rate, so every request is admitted, the sliding log
// holds about 500 entries, and the result does not depend on how fast the
// machine is.
func BenchmarkAlgorithm(b *testing.B) {
	for _, alg := range sluice.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			benchOneKey(b, sluice.Policy{Algorithm: alg, Limit: 1000, Period: time.Second})
		})
	}
}

// benchOneKey is Store.Allow of one key under p, serial, at explicit times
// 2 ms apart, every request admitted.
func benchOneKey(b *testing.B, p sluice.Policy) {
	st := memstore.New(memstore.Options{})
	req := sluice.Request{Policy: &p, Key: "user:1", Cost: 1}
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(2 * time.Millisecond)
		d, err := st.Allow(context.Background(), now, req)
		checkAllowed(b, d, err)
	}
}

// BenchmarkCalendar compares a calendar window (a Berlin day) with a
// 24-hour period, one key, serial, at explicit times 2 ms apart, every
// request admitted: what placing the window on the calendar costs (a
// cached window; about once a day, 43,200 requests here, a new one is
// worked out).
func BenchmarkCalendar(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []sluice.Policy{
		sluice.FixedWindow(sluice.MaxLimit, 24*time.Hour),
		sluice.FixedCalendarWindow(sluice.MaxLimit, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin}),
		sluice.SlidingWindow(sluice.MaxLimit, 24*time.Hour),
		sluice.SlidingCalendarWindow(sluice.MaxLimit, sluice.Calendar{Unit: sluice.CalendarDay, Zone: berlin}),
	} {
		name := p.Algorithm.String() + "/24h"
		if p.Calendar.Unit != sluice.NoCalendar {
			name = p.Algorithm.String() + "/calendar_day"
		}
		b.Run(name, func(b *testing.B) { benchOneKey(b, p) })
	}
}

// BenchmarkManyKeys is Limiter.Allow on 100,000 and 1,000,000 existing keys,
// in parallel, each goroutine picking keys at random. As a service does,
// each goroutine builds the key of each request (into a reused buffer, so
// the key is in cache and costs no allocation); the store keeps only a hash
// of it, so the string may alias the buffer.
func BenchmarkManyKeys(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100_000, 1_000_000} {
		l, _ := newLimiter(b, benchPolicy)
		for i := range n {
			d, err := l.Allow(ctx, "user:"+strconv.Itoa(i), 1)
			if !checkAllowed(b, d, err) {
				return
			}
		}
		runtime.GC()
		b.Run(strconv.Itoa(n)+"/Limiter.Allow/parallel", func(b *testing.B) {
			var seeds atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := testkit.Rand(seeds.Add(1) * 0x9e3779b97f4a7c15)
				buf := make([]byte, 0, 32)
				for pb.Next() {
					buf = strconv.AppendUint(append(buf[:0], "user:"...), r.Next()%uint64(n), 10)
					key := unsafe.String(unsafe.SliceData(buf), len(buf))
					if d, err := l.Allow(ctx, key, 1); !checkAllowed(b, d, err) {
						return
					}
				}
			})
		})
	}
}

// threePolicies is a per-second token bucket, an hourly fixed window and a
// daily sliding window, sized so that every request of a run is admitted.
var threePolicies = []sluice.Policy{
	benchPolicy,
	sluice.FixedWindow(1_000_000_000, time.Hour),
	sluice.SlidingWindow(1_000_000_000, 24*time.Hour),
}

// BenchmarkAllowAll is one key under three policies at once, all or
// nothing, through Limiter.Allow and directly through Store.AllowAll, and
// many requests on a few keys.
func BenchmarkAllowAll(b *testing.B) {
	ctx := context.Background()
	b.Run("3-policies/Limiter.Allow/serial", func(b *testing.B) {
		l, _ := newLimiter(b, threePolicies...)
		b.ReportAllocs()
		for b.Loop() {
			d, err := l.Allow(ctx, "user:1", 1)
			checkAllowed(b, d, err)
		}
	})
	b.Run("3-policies/Store.AllowAll/serial", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		reqs := make([]sluice.Request, len(threePolicies))
		for i, p := range threePolicies {
			reqs[i] = sluice.Request{Policy: &p, Key: "user:1", Cost: 1}
		}
		b.ReportAllocs()
		for b.Loop() {
			d, err := st.AllowAll(ctx, time.Time{}, reqs, nil)
			checkAllowed(b, d, err)
		}
	})
	// As many requests as Envoy's rate limit service sends at most, on
	// three keys: the repeated keys are found in linear time.
	b.Run("128-requests-3-keys/Store.AllowAll/serial", func(b *testing.B) {
		st := memstore.New(memstore.Options{})
		reqs := make([]sluice.Request, 128)
		for i := range reqs {
			reqs[i] = sluice.Request{Policy: &threePolicies[1], Key: "user:" + strconv.Itoa(i%3), Cost: 1}
		}
		b.ReportAllocs()
		for b.Loop() {
			d, err := st.AllowAll(ctx, time.Time{}, reqs, nil)
			checkAllowed(b, d, err)
		}
	})
}

// BenchmarkBytesPerKey measures the heap a tracked token-bucket key costs at
// 1,000,000 keys: live heap after a full GC, before and after one admitted
// request on each of 1e6 distinct keys, divided by 1e6. Each key is a fresh
// string, so anything the store kept of it would count. The store's clock
// is fixed, so no key is dropped as back to initial while it is measured.
// The measurement runs once; the timed loop is empty and its ns/op means
// nothing: the result is the B/key metric.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	st := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	l, err := sluice.New(st, sluice.TokenBucket(100, time.Minute, 100))
	if err != nil {
		b.Fatalf("sluice.New: %v", err)
	}
	for i := range n {
		d, err := l.Allow(ctx, "user:"+strconv.Itoa(i), 1)
		if !checkAllowed(b, d, err) {
			return
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := st.Len(); got != n {
		b.Fatalf("Len() = %d, want %d", got, n)
	}
	runtime.KeepAlive(l)
	for b.Loop() {
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/key")
}

// BenchmarkLease is a concurrency lease taken and released on one key
// (Store.Allow, then Store.Release), beside a rate decision on another key
// of the same store (Store.Allow under benchPolicy), serial and parallel.
// The lease's limit is never reached, so every Allow takes one.
func BenchmarkLease(b *testing.B) {
	ctx := context.Background()
	conc := sluice.Concurrency(sluice.MaxLimit, time.Minute).Named("conc")
	rate := benchPolicy.Named("rate")
	acquireRelease := func(b *testing.B, st *memstore.Store, key string) bool {
		d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &conc, Key: key, Cost: 1})
		if !checkAllowed(b, d, err) {
			return false
		}
		if ok, err := st.Release(ctx, time.Time{}, d.Lease, nil); !ok || err != nil {
			b.Errorf("Release = %v, %v, want true", ok, err)
			return false
		}
		return true
	}
	allow := func(b *testing.B, st *memstore.Store, key string) bool {
		d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &rate, Key: key, Cost: 1})
		return checkAllowed(b, d, err)
	}
	for _, bm := range []struct {
		name string
		op   func(*testing.B, *memstore.Store, string) bool
	}{{"concurrency acquire+release", acquireRelease}, {"rate allow", allow}} {
		b.Run(bm.name+"/serial", func(b *testing.B) {
			st := memstore.New(memstore.Options{})
			b.ReportAllocs()
			for b.Loop() {
				if !bm.op(b, st, "user:1") {
					return
				}
			}
		})
		b.Run(bm.name+"/parallel", func(b *testing.B) {
			st := memstore.New(memstore.Options{})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !bm.op(b, st, "user:1") {
						return
					}
				}
			})
		})
	}
}

// BenchmarkUsage is a cost known afterwards on one key of a fixed window
// (which never refuses here): a debit (Store.Debit), an estimate taken and
// settled with a larger actual cost (Store.Allow with SettleWithin, then
// Store.Release with the usage), and a plain decision (Store.Allow)
// beside them, serial.
func BenchmarkUsage(b *testing.B) {
	ctx := context.Background()
	p := sluice.FixedWindow(sluice.MaxLimit, 24*time.Hour).Named("budget")
	usage := []int64{3}
	for _, bm := range []struct {
		name string
		op   func(*testing.B, *memstore.Store) bool
	}{
		{"allow", func(b *testing.B, st *memstore.Store) bool {
			d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "user:1", Cost: 1})
			return checkAllowed(b, d, err)
		}},
		{"debit", func(b *testing.B, st *memstore.Store) bool {
			d, err := st.Debit(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "user:1", Cost: 1})
			return checkAllowed(b, d, err)
		}},
		{"estimate+settle", func(b *testing.B, st *memstore.Store) bool {
			d, err := st.Allow(ctx, time.Time{}, sluice.Request{Policy: &p, Key: "user:1", Cost: 1, SettleWithin: time.Minute})
			if !checkAllowed(b, d, err) {
				return false
			}
			if ok, err := st.Release(ctx, time.Time{}, d.Lease, usage); !ok || err != nil {
				b.Errorf("Release = %v, %v, want true", ok, err)
				return false
			}
			return true
		}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			st := memstore.New(memstore.Options{})
			b.ReportAllocs()
			for b.Loop() {
				if !bm.op(b, st) {
					return
				}
			}
		})
	}
}
