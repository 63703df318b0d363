// Package decisionlog writes the decision log of sluice serve, JSON lines
// that `sluice simulate --replay` plays against a candidate
// configuration, and reads them back.
//
// A line is one decision of a front door: when it was decided (the time
// the store decided at: see Store and Record.Stamp), the door, the rule,
// and each limit with its key, cost and outcome.
// Lines are sampled by key, not by request: a key is in the log when a
// hash of it falls below the ratio, so a sampled key's whole sequence of
// decisions is kept and replays exactly. Keys may be replaced by a keyed
// hash (HMAC-SHA-256 under a secret), one-to-one per secret, so replay
// works on them unchanged.
//
// Writing never delays or fails a decision: Write encodes the line and
// hands it to a writer goroutine through a bounded queue; when the queue
// is full, or the file cannot be written, the line is dropped and
// counted (Dropped). The file is rotated by size.
package decisionlog

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/splitmix"
)

// Record is one line of the log: one decision of a front door.
type Record struct {
	// Time is when the store decided the decision's first store call: on
	// the memory store the time it was given (see Store), or a later one
	// its shard had seen, on Redis the TIME of the script call (see
	// Stamp).
	Time time.Time `json:"time"`
	// Order puts the decisions of one time in the order the store made
	// them: on the memory store a number it took under the key's lock
	// (memstore.Options.OnDecided), larger for a later decision; on Redis
	// a call's place in the batch that Redis ran as one script (0 for a
	// call that ran alone), or LocalRefusal (redisstore.Options.OnDecided);
	// 0 in logs written before it. A replay decides in order of time, then
	// Order, then line.
	Order uint64 `json:"order,omitempty"`
	// Door is "check" (POST /v1/check), "forward_auth", "proxy" or "rls"
	// (Envoy's rate limit service).
	Door string `json:"door"`
	// Rule names the proxy rule that matched, for forward-auth and the
	// proxy ("" for an unnamed rule and for /v1/check), and the domain
	// for Envoy's rate limit service, whose limits are named after their
	// descriptors ("envoy:" domain "." descriptor path).
	Rule string `json:"rule,omitempty"`
	// Limits holds each limit of the decision, in the door's order.
	Limits []Entry `json:"limits"`
}

// LocalRefusal is the Order of a decision that Redis's store refused
// locally, from the states it keeps of its keys (store.redis.
// local_refusals), without a call to Redis: after every decision of its
// microsecond. Its limits that would have admitted the request were read
// from those states, which may be older than Redis's.
const LocalRefusal = math.MaxUint32

// Entry is one limit's part of a decision.
type Entry struct {
	Limit string `json:"limit"`
	// Key is the limit's key, or its keyed hash ("h:" and 32 hex digits)
	// when the log hashes keys.
	Key  string `json:"key"`
	Cost int64  `json:"cost"`
	// Outcome is allowed, denied, shadow_denied (a dry-run limit would
	// have refused) or degraded (the store's failure policy decided).
	Outcome string `json:"outcome"`
	// Unsampled marks the key of a limit that is not itself sampled, in a
	// decision kept for another limit's key: its sequence in the log is
	// partial.
	Unsampled bool `json:"unsampled,omitempty"`
	// Mode, for a limit of Envoy's rate limit service that a replay does
	// not decide, says why: "shadow" (shadow mode), "quota" (quota mode),
	// "usage" (usage debited whether or not it fits), "override" (the
	// request's own limit) or "zero" (requests_per_unit 0).
	Mode string `json:"mode,omitempty"`
	// At is the time this limit was decided at when it differs from the
	// record's, or when its Order does: a limit decided by a store call
	// of its own (a dry run's, after the enforced limits'), on Redis, or
	// on the memory store when the limit's shard had seen a later time.
	At time.Time `json:"at,omitzero"`
	// Order is the order of the store call that decided the limit, with
	// At (see Record.Order).
	Order uint64 `json:"order,omitempty"`
}

// Stamp sets the record's time and its entries' from the times the
// store reported (Entry.At and Order, from Decision.AtOf and OrderOf): a
// record with no Time takes the earliest of them, or now when there is
// none (a decision that made no store call, or one the store's failure
// policy made); an entry's At and Order that equal the record's Time and
// Order are cleared.
func (rec *Record) Stamp(now time.Time) {
	if rec.Time.IsZero() {
		for i := range rec.Limits {
			if e := &rec.Limits[i]; !e.At.IsZero() && (rec.Time.IsZero() || e.At.Before(rec.Time) || e.At.Equal(rec.Time) && e.Order < rec.Order) {
				rec.Time, rec.Order = e.At, e.Order
			}
		}
		if rec.Time.IsZero() {
			rec.Time = now
		}
	}
	for i := range rec.Limits {
		if e := &rec.Limits[i]; e.At.Equal(rec.Time) && e.Order == rec.Order {
			e.At, e.Order = time.Time{}, 0
		}
	}
}

// Options configure a Log.
type Options struct {
	// Path is the file written; rotated files are Path.1 (the newest) to
	// Path.N.
	Path string
	// Sample is the share of keys whose decisions are written, in (0, 1];
	// 0 means 1.
	Sample float64
	// Secret, when set, replaces every key by its HMAC-SHA-256 under
	// Secret (the first 16 bytes, in hex, after "h:"), and sampling hashes
	// keys with it too.
	Secret []byte
	// MaxSize rotates the file once it holds this many bytes; default
	// 100 MiB.
	MaxSize int64
	// MaxFiles is how many rotated files are kept; default 5.
	MaxFiles int
	// Queue is how many lines may wait for the writer; default 8192.
	// Past it lines are dropped.
	Queue int
}

// Log is a decision log being written. It is safe for concurrent use.
type Log struct {
	opts      Options
	threshold uint64 // a key is sampled when its hash is below it (or always, with all)
	all       bool
	lines     chan []byte
	done      chan struct{}
	closeOnce sync.Once

	written, dropped atomic.Uint64
	errMu            sync.Mutex
	lastErr          error

	f    *os.File
	size int64
}

// Open starts a Log writing to opts.Path (appending to a file already
// there). Close it to flush and stop the writer.
func Open(opts Options) (*Log, error) {
	if opts.Path == "" {
		return nil, errors.New("decision log: no file")
	}
	if opts.Sample == 0 {
		opts.Sample = 1
	}
	if !(opts.Sample > 0 && opts.Sample <= 1) {
		return nil, fmt.Errorf("decision log: sample ratio must be in (0, 1], got %v", opts.Sample)
	}
	if opts.MaxSize <= 0 {
		opts.MaxSize = 100 << 20
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = 5
	}
	if opts.Queue <= 0 {
		opts.Queue = 8192
	}
	f, err := os.OpenFile(opts.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("decision log: %w", err)
	}
	l := &Log{opts: opts, lines: make(chan []byte, opts.Queue), done: make(chan struct{}), f: f, size: info.Size()}
	if opts.Sample >= 1 {
		l.all = true
	} else {
		l.threshold = uint64(opts.Sample * math.MaxUint64)
	}
	go l.write()
	return l, nil
}

// Sampled reports whether key's decisions are written.
func (l *Log) Sampled(key string) bool {
	return l.all || l.hash64(key) < l.threshold
}

func (l *Log) hash64(key string) uint64 {
	if l.opts.Secret != nil {
		m := hmac.New(sha256.New, l.opts.Secret)
		m.Write([]byte(key))
		return binary.BigEndian.Uint64(m.Sum(nil))
	}
	// FNV-1a's high bits follow the input's last bytes closely; the
	// finalizer spreads them, so that a threshold splits keys evenly.
	h := fnv.New64a()
	h.Write([]byte(key))
	return splitmix.Mix(h.Sum64())
}

// Key returns key as the log writes it: itself, or its keyed hash.
func (l *Log) Key(key string) string {
	if l.opts.Secret == nil {
		return key
	}
	m := hmac.New(sha256.New, l.opts.Secret)
	m.Write([]byte(key))
	return "h:" + hex.EncodeToString(m.Sum(nil)[:16])
}

// Write queues rec when one of its keys is sampled (its keys as given,
// not hashed: Write hashes them). It never blocks: a line that finds the
// queue full is dropped and counted. rec is not kept.
func (l *Log) Write(rec *Record) {
	keep := false
	for i := range rec.Limits {
		e := &rec.Limits[i]
		if l.Sampled(e.Key) {
			keep = true
		} else {
			e.Unsampled = true
		}
		e.Key = l.Key(e.Key)
	}
	if !keep {
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		l.dropped.Add(1)
		return
	}
	select {
	case l.lines <- append(b, '\n'):
	default:
		l.dropped.Add(1)
	}
}

// Written and Dropped count the lines written and those dropped (a full
// queue, or a file that could not be written).
func (l *Log) Written() uint64 { return l.written.Load() }
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Err returns the last error of the writer, if any.
func (l *Log) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.lastErr
}

// Close writes the lines queued and closes the file.
func (l *Log) Close() error {
	l.closeOnce.Do(func() { close(l.lines) })
	<-l.done
	return l.Err()
}

func (l *Log) fail(err error) {
	l.errMu.Lock()
	l.lastErr = err
	l.errMu.Unlock()
}

// write is the writer goroutine.
func (l *Log) write() {
	defer close(l.done)
	defer func() {
		if l.f != nil {
			l.f.Close()
		}
	}()
	for b := range l.lines {
		if l.f != nil && l.size+int64(len(b)) > l.opts.MaxSize && l.size > 0 {
			l.rotate()
		}
		if l.f == nil {
			l.reopen()
		}
		if l.f == nil {
			l.dropped.Add(1)
			continue
		}
		n, err := l.f.Write(b)
		l.size += int64(n)
		if err != nil {
			l.dropped.Add(1)
			l.fail(err)
			continue
		}
		l.written.Add(1)
	}
}

// rotate renames Path to Path.1, Path.1 to Path.2 and so on, dropping the
// oldest, and opens a new Path.
func (l *Log) rotate() {
	l.f.Close()
	l.f = nil
	p := l.opts.Path
	os.Remove(p + "." + strconv.Itoa(l.opts.MaxFiles))
	for i := l.opts.MaxFiles - 1; i >= 1; i-- {
		os.Rename(p+"."+strconv.Itoa(i), p+"."+strconv.Itoa(i+1))
	}
	if err := os.Rename(p, p+".1"); err != nil {
		l.fail(err)
	}
	l.reopen()
}

func (l *Log) reopen() {
	f, err := os.OpenFile(l.opts.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		l.fail(err)
		return
	}
	l.f, l.size = f, 0
	if info, err := f.Stat(); err == nil {
		l.size = info.Size()
	}
}
