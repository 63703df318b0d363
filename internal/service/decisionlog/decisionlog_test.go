package decisionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func readAll(t *testing.T, path string) []*Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*Record
	r := NewReader(f)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

func record(key string, i int) *Record {
	return &Record{Time: time.Unix(1700000000, int64(i)).UTC(), Door: "check", Limits: []Entry{{Limit: "l", Key: key, Cost: 1, Outcome: "allowed"}}}
}

// TestSampledByKey writes 20 decisions for each of 200 keys at a ratio of
// 0.3: every decision of a sampled key is in the log, none of the others,
// and about 30% of the keys are sampled.
func TestSampledByKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	l, err := Open(Options{Path: path, Sample: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	sampled := map[string]bool{}
	for i := range 20 {
		for k := range 200 {
			key := fmt.Sprintf("key-%d", k)
			sampled[key] = l.Sampled(key)
			l.Write(record(key, i))
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, rec := range readAll(t, path) {
		per[rec.Limits[0].Key]++
	}
	n := 0
	for key, s := range sampled {
		if s {
			n++
			if per[key] != 20 {
				t.Errorf("sampled key %s has %d decisions in the log, want all 20", key, per[key])
			}
		} else if per[key] != 0 {
			t.Errorf("key %s is not sampled but has %d decisions in the log", key, per[key])
		}
	}
	if n < 40 || n > 80 {
		t.Errorf("%d of 200 keys sampled at 0.3, want about 60", n)
	}
	if got := l.Written(); got != uint64(20*n) {
		t.Errorf("Written = %d, want %d", got, 20*n)
	}
}

// TestKeyedHash replaces keys by their HMAC: the same key gives the same
// hash, another secret another, and the key itself is nowhere in the log.
func TestKeyedHash(t *testing.T) {
	dir := t.TempDir()
	hashes := map[string]string{}
	for _, secret := range []string{"0123456789abcdef", "fedcba9876543210"} {
		path := filepath.Join(dir, secret)
		l, err := Open(Options{Path: path, Secret: []byte(secret)})
		if err != nil {
			t.Fatal(err)
		}
		l.Write(record("alice@example.com", 0))
		l.Write(record("alice@example.com", 1))
		l.Write(record("bob", 2))
		l.Close()
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), "alice") || strings.Contains(string(b), "bob") {
			t.Errorf("the log holds a key in clear:\n%s", b)
		}
		recs := readAll(t, path)
		a0, a1, b0 := recs[0].Limits[0].Key, recs[1].Limits[0].Key, recs[2].Limits[0].Key
		if a0 != a1 || a0 == b0 || !strings.HasPrefix(a0, "h:") || len(a0) != 34 {
			t.Errorf("hashed keys %q %q %q, want h: and 32 hex digits, equal for equal keys", a0, a1, b0)
		}
		hashes[secret] = a0
	}
	if hashes["0123456789abcdef"] == hashes["fedcba9876543210"] {
		t.Errorf("two secrets hash a key alike")
	}
}

// TestRotation rotates by size and keeps MaxFiles files.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	l, err := Open(Options{Path: path, MaxSize: 1000, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		l.Write(record("k", i))
	}
	l.Close()
	total := 0
	for _, p := range []string{path, path + ".1", path + ".2"} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if info.Size() > 1000 {
			t.Errorf("%s holds %d bytes, past the 1000 of a rotation", p, info.Size())
		}
		total += len(readAll(t, p))
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Errorf("a third rotated file is kept, want 2")
	}
	if total >= 100 || total < 20 {
		t.Errorf("%d records kept in 3 files of 1000 bytes", total)
	}
}

// TestFullDiskDrops writes to /dev/full, whose every write fails: lines
// are dropped and counted, and Write returns at once each time.
func TestFullDiskDrops(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	l, err := Open(Options{Path: "/dev/full", Queue: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		l.Write(record("k", i))
	}
	l.Close()
	if l.Written() != 0 || l.Dropped() != 1000 || l.Err() == nil {
		t.Errorf("written %d, dropped %d, err %v; want 0, 1000 and the write error", l.Written(), l.Dropped(), l.Err())
	}
}

// TestSlowWriterNeverBlocks stands for a slow disk: a FIFO nobody reads
// fills, then blocks the writer; Write must not block with it.
func TestSlowWriterNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fifo")
	if err := mkfifo(path); err != nil {
		t.Skip("no FIFO:", err)
	}
	// Open the FIFO for reading without ever reading it, so that the
	// writer's open succeeds and its writes block once the pipe is full.
	r, err := os.OpenFile(path, os.O_RDONLY|syscallNonblock, 0)
	if err != nil {
		t.Skip(err)
	}
	defer r.Close()
	l, err := Open(Options{Path: path, Queue: 16})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000 // ~2 MB of lines, far past a pipe's 64 KiB
	for i := range n {
		l.Write(record(strings.Repeat("k", 64), i))
	}
	if l.Dropped() == 0 {
		t.Errorf("no line dropped with the writer blocked")
	}
	if got := l.Written() + l.Dropped(); got > n {
		t.Errorf("written + dropped = %d, more than the %d lines", got, n)
	}
	r.Close() // the writer's blocked write fails; Close ends
	l.Close()
	if got := l.Written() + l.Dropped(); got != n {
		t.Errorf("written %d + dropped %d = %d, want every one of %d lines accounted for", l.Written(), l.Dropped(), got, n)
	}
}

// TestStoreTime decides through Store under a Decision: the memory
// store decides at its own clock's time, read once for the decision's
// every call, and the Decision records it. Without a Decision nothing
// changes.
func TestStoreTime(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ms := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	defer ms.Close()
	s := Store(ms)
	p := &sluice.Policy{Name: "p", Algorithm: sluice.FixedWindowAlgorithm, Limit: 1, Period: time.Minute}
	d := &Decision{Door: "check"}
	ctx := With(context.Background(), d)
	if dec, err := s.Allow(ctx, time.Time{}, sluice.Request{Policy: p, Key: "k", Cost: 1}); err != nil || !dec.Allowed {
		t.Fatalf("Allow = %+v, %v", dec, err)
	}
	if !d.At.Equal(now) {
		t.Errorf("Decision.At = %v, want the store's clock %v", d.At, now)
	}
	now = now.Add(30 * time.Second)
	// A second call of the same decision keeps its time.
	if _, err := s.Peek(ctx, time.Time{}, sluice.Request{Policy: p, Key: "k", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if !d.At.Equal(now.Add(-30 * time.Second)) {
		t.Errorf("a second call moved Decision.At to %v", d.At)
	}
	if got := From(context.Background()); got != nil {
		t.Errorf("From of a plain context = %v", got)
	}
	if u, ok := s.(interface{ Unwrap() sluice.Store }); !ok || u.Unwrap() != ms {
		t.Errorf("Store does not unwrap to the store beneath")
	}
}

// TestStoreWithoutClock returns a store without a Now method as it is:
// such a store reports its decisions' times itself.
func TestStoreWithoutClock(t *testing.T) {
	var next struct{ sluice.Store }
	if s := Store(next); s != sluice.Store(next) {
		t.Errorf("Store of a store without a clock = %T, want the store itself", s)
	}
}

// TestStamp dates records from the times the store reported.
func TestStamp(t *testing.T) {
	now := time.Unix(1800000000, 0).UTC()
	at := func(us int64) time.Time { return now.Add(time.Duration(us) * time.Microsecond) }
	const none = math.MinInt64 // an entry without a time
	entries := func(ats ...int64) []Entry {
		var es []Entry
		for _, a := range ats {
			e := Entry{Limit: "l", Key: "k", Cost: 1, Outcome: "allowed"}
			if a != none {
				e.At = at(a)
			}
			es = append(es, e)
		}
		return es
	}
	for _, tc := range []struct {
		name     string
		rec      Record
		wantTime time.Time
		wantAts  []time.Time
	}{
		// The store's time, before now, wins over it.
		{"store's time", Record{Limits: entries(-50, 7)}, at(-50), []time.Time{{}, at(7)}},
		{"one call", Record{Limits: entries(5, 5)}, at(5), []time.Time{{}, {}}},
		{"earliest", Record{Limits: entries(9, 5, none)}, at(5), []time.Time{at(9), {}, {}}},
		{"no store time", Record{Limits: entries(none)}, now, []time.Time{{}}},
		{"memory store", Record{Time: at(3), Limits: entries(none, none)}, at(3), []time.Time{{}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			rec.Stamp(now)
			if !rec.Time.Equal(tc.wantTime) {
				t.Errorf("Time = %v, want %v", rec.Time, tc.wantTime)
			}
			for i, e := range rec.Limits {
				if !e.At.Equal(tc.wantAts[i]) {
					t.Errorf("Limits[%d].At = %v, want %v", i, e.At, tc.wantAts[i])
				}
			}
		})
	}
}

// TestStampOrder: entries of one time and different orders keep their
// own, the record takes the first call's, and a line without orders
// (an older log) reads as order 0.
func TestStampOrder(t *testing.T) {
	now := time.Unix(1800000000, 0).UTC()
	rec := Record{Door: "check", Limits: []Entry{
		{Limit: "a", Key: "k", Cost: 1, Outcome: "allowed", At: now, Order: 8},
		{Limit: "b", Key: "k", Cost: 1, Outcome: "allowed", At: now, Order: 7},
		{Limit: "c", Key: "k", Cost: 1, Outcome: "allowed", At: now.Add(time.Microsecond), Order: 7},
	}}
	rec.Stamp(now.Add(time.Second))
	if !rec.Time.Equal(now) || rec.Order != 7 {
		t.Errorf("Time, Order = %v, %d; want %v, 7", rec.Time, rec.Order, now)
	}
	want := []Entry{{At: now, Order: 8}, {}, {At: now.Add(time.Microsecond), Order: 7}}
	for i, e := range rec.Limits {
		if !e.At.Equal(want[i].At) || e.Order != want[i].Order {
			t.Errorf("Limits[%d] = %v, %d; want %v, %d", i, e.At, e.Order, want[i].At, want[i].Order)
		}
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"time":"2027-01-15T08:00:00Z","order":7,`) || !strings.Contains(s, `"at":"2027-01-15T08:00:00Z","order":8}`) || strings.Count(s, `"order"`) != 3 {
		t.Errorf("the line reads %s", s)
	}
	old, err := NewReader(strings.NewReader(`{"time":"2026-01-01T00:00:00Z","door":"check","limits":[{"limit":"a","key":"k","cost":1,"outcome":"allowed"}]}` + "\n")).Next()
	if err != nil || old.Order != 0 || old.Limits[0].Order != 0 {
		t.Errorf("a line without orders reads as %+v, %v", old, err)
	}
}

// TestSaw records the times and orders a store reports in the Decision
// of the context: the first call's are the decision's, and AtOf and
// OrderOf find a limit's last ones.
func TestSaw(t *testing.T) {
	p := &sluice.Policy{Name: "p"}
	q := &sluice.Policy{Name: "q"}
	at := time.Unix(1800000000, 0)
	Saw(context.Background(), sluice.Request{Policy: p, Key: "k"}, at, 1) // no Decision: nothing
	d := &Decision{Door: "check", At: at.Add(-time.Second)}
	ctx := With(context.Background(), d)
	Saw(ctx, sluice.Request{Policy: p, Key: "k"}, at, 4)
	Saw(ctx, sluice.Request{Policy: q, Key: "k"}, at.Add(time.Microsecond), 5)
	Saw(ctx, sluice.Request{Policy: p, Key: "k"}, at.Add(2*time.Microsecond), 9)
	if !d.At.Equal(at) || d.Order != 4 {
		t.Errorf("the decision's At, Order = %v, %d; want the first call's, %v, 4", d.At, d.Order, at)
	}
	for _, tc := range []struct {
		limit, key string
		want       time.Time
		order      uint64
	}{
		{"p", "k", at.Add(2 * time.Microsecond), 9},
		{"q", "k", at.Add(time.Microsecond), 5},
		{"p", "other", time.Time{}, 0},
		{"r", "k", time.Time{}, 0},
	} {
		if got, order := d.AtOf(tc.limit, tc.key), d.OrderOf(tc.limit, tc.key); !got.Equal(tc.want) || order != tc.order {
			t.Errorf("AtOf, OrderOf(%q, %q) = %v, %d; want %v, %d", tc.limit, tc.key, got, order, tc.want, tc.order)
		}
	}
}

// TestReaderErrors: a line the reader cannot take names its line and,
// for a value of the wrong type, its field and what it wants; it never
// panics.
func TestReaderErrors(t *testing.T) {
	const ok = `{"time":"2026-01-01T00:00:00Z","door":"check","limits":[{"limit":"a","key":"k","cost":1,"outcome":"allowed"}]}`
	for _, tc := range []struct{ line, want string }{
		{`{"time":"2026-01-01T00:00:00Z","order":-1,"door":"check"}`, "line 2: order: want a whole number from 0, got number -1"},
		{`{"time":"2026-01-01T00:00:00Z","order":"7","door":"check"}`, "line 2: order: want a whole number from 0, got string"},
		{`{"time":"2026-01-01T00:00:00Z","order":1.5,"door":"check"}`, "line 2: order: want a whole number from 0, got number 1.5"},
		{`{"time":"2026-01-01T00:00:00Z","order":18446744073709551616,"door":"check"}`, "line 2: order: want a whole number from 0, got number 18446744073709551616"},
		{`{"time":"2026-01-01T00:00:00Z","door":"check","limits":[{"limit":"a","key":"k","outcome":"allowed","order":-3}]}`, "line 2: limits.order: want a whole number from 0, got number -3"},
		{`{"time":"2026-01-01T00:00:00Z","door":"check","limits":[{"limit":"a","key":"k","outcome":"allowed","order":3}]}`, "line 2: limits[0]: an order without at"},
		{`{"time":"2026-01-01T00:00:00Z","door":"check","limits":[{"limit":"a","key":"k","cost":"1","outcome":"allowed"}]}`, "line 2: limits.cost: want a whole number, got string"},
		{`{"time":"2026-01-01T00:00:00Z","door":7}`, "line 2: door: want a string, got number"},
		{`{"time":"2026-01-01T00:00:00Z","door":"check","limits":[null]}`, "line 2: limits[0]: no limit or outcome"},
		{`{"time":"2026-01-01T00:00:00Z","door":"check","limits":{}}`, "line 2: limits: want a list, got object"},
		{`{"order":1,"door":"check"}`, "line 2: not a decision: no time or door"},
		{`not json`, "line 2: invalid character"},
	} {
		r := NewReader(strings.NewReader(ok + "\n" + tc.line + "\n"))
		if _, err := r.Next(); err != nil {
			t.Fatalf("line 1: %v", err)
		}
		if _, err := r.Next(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.line, err, tc.want)
		}
	}
	// An order with its time reads.
	rec, err := NewReader(strings.NewReader(`{"time":"2026-01-01T00:00:00Z","order":4,"door":"check","limits":[{"limit":"a","key":"k","outcome":"allowed","at":"2026-01-01T00:00:00.000001Z","order":5}]}`)).Next()
	if err != nil || rec.Order != 4 || rec.Limits[0].Order != 5 {
		t.Errorf("a line with orders reads as %+v, %v", rec, err)
	}
}
