package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// expiredCounts counts, per concurrency policy (by the fingerprint part of
// its keys), the holds that this store's scripts found expired and
// dropped.
type expiredCounts struct{ m sync.Map } // fingerprint -> *atomic.Int64

// add counts n holds of the policy whose fingerprint is fp.
func (e *expiredCounts) add(fp string, n int64) {
	if n <= 0 {
		return
	}
	c, ok := e.m.Load(fp)
	if !ok {
		c, _ = e.m.LoadOrStore(fp, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(n)
}

func (e *expiredCounts) get(fp string) int64 {
	if c, ok := e.m.Load(fp); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// concDropped takes out of v, the five numbers of a concurrency policy's
// decision, the number of expired holds the script dropped (in the place
// of the delay, which a concurrency decision never has), and counts them
// under c.
func (s *Store) concDropped(c *compiled, v []int64) {
	if c.conc() {
		s.expired.add(c.fp, v[4])
		v[4] = 0
	}
}

// keyFingerprint returns the policy part of a concurrency key of this
// store (one that concKey accepts): what follows the hash tag.
func keyFingerprint(key string) string {
	return key[strings.IndexByte(key, '}')+1:]
}

// Expired returns how many holds (one per lease and key) under the
// concurrency policy p this store found expired, unreleased, and dropped,
// since it was made. A hold is counted by the store whose script drops it:
// a decision, release or renewal on its key, or ScanHeld. Holds are dropped
// once, so the counts of all the stores on one Redis add up to the holds
// dropped there. A key outlives its last hold by two minutes, so every
// expired hold is counted when some store reads its key in that time (a
// scrape of the service's metrics runs ScanHeld); a hold whose key Redis
// deletes first is not counted. Leases taken by Options.Local are not
// counted here.
func (s *Store) Expired(p *sluice.Policy) (int64, error) {
	c, err := s.concPolicy(p, "expired")
	if err != nil {
		return 0, err
	}
	return s.expired.get(c.fp), nil
}

func (s *Store) concPolicy(p *sluice.Policy, what string) (*compiled, error) {
	if p.Algorithm != sluice.ConcurrencyAlgorithm {
		return nil, fmt.Errorf("redisstore: %s: %w: %s is not a concurrency policy", what, sluice.ErrInvalidPolicy, p)
	}
	c := s.policies.get(p)
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// Bounds of one ScanHeld, which keep its cost bounded however many keys
// Redis holds: at most DefaultHeldScanKeys concurrency keys read, and at
// most heldScanCalls SCAN calls per master (of heldScanCount keys each,
// about a million keys visited).
const (
	DefaultHeldScanKeys = 10000
	heldScanCalls       = 1000
	heldScanCount       = 1000
)

// heldScript is the script of ScanHeld (lua/held.lua), built once.
var heldScript = sync.OnceValues(func() (*rueidis.Lua, error) {
	src, err := scriptSource(false, nil, textNow, "muldivmod.lua", "lib.lua", "concurrency.lua", "held.lua")
	if err != nil {
		return nil, err
	}
	return named(rueidis.NewLuaScript(src), "held"), nil
})

// ScanHeld writes to units[i] the units held under the concurrency policy
// ps[i], summed over all its keys, at Redis's TIME, and reports whether it
// read every concurrency key of the store's prefix. It looks at every key
// of the prefix on every master (SCAN, 1000 keys a call) and runs on each
// concurrency key one script that reads its holds, and drops and counts
// (see Expired) those that expired. It reads at most maxKeys concurrency
// keys (0 means DefaultHeldScanKeys) and makes at most 1000 SCAN calls per
// master; beyond, it stops, units are lower bounds and complete is false.
// Each key is read at its own instant: the sum is exact for each key, not
// a snapshot of all at once. It is a figure for metrics, not for
// decisions: its cost grows with the keys Redis holds (docs/redis.md,
// "Concurrency keys"). units must have len(ps).
func (s *Store) ScanHeld(ctx context.Context, ps []*sluice.Policy, maxKeys int, units []int64) (complete bool, err error) {
	if len(units) != len(ps) {
		return false, fmt.Errorf("redisstore: held: %d units for %d policies", len(units), len(ps))
	}
	if maxKeys <= 0 {
		maxKeys = DefaultHeldScanKeys
	}
	clear(units)
	out := heldScan{units: units, complete: true}
	index := make(map[string][]int, len(ps))
	for i, p := range ps {
		c, err := s.concPolicy(p, "held")
		if err != nil {
			return false, err
		}
		index[c.fp] = append(index[c.fp], i)
	}
	script, err := heldScript()
	if err != nil {
		return false, err
	}
	if !s.users.enter() {
		return false, ErrClosed
	}
	defer s.users.exit()
	c, err := s.conn(ctx)
	if err != nil {
		return false, fmt.Errorf("redisstore: held: %w", err)
	}
	nodes := []rueidis.Client{c}
	if c.Mode() == rueidis.ClientModeCluster {
		if nodes, err = masters(ctx, c); err != nil {
			return false, fmt.Errorf("redisstore: held: %w", err)
		}
	}
	pattern := globEscape(s.prefix) + "{k:*}:" + algoCodes[sluice.ConcurrencyAlgorithm] + ":*"
	for _, node := range nodes {
		cursor := uint64(0)
		for calls := 0; ; calls++ {
			if calls == heldScanCalls || out.keys >= maxKeys {
				out.complete = false
				break
			}
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(heldScanCount).Type("hash").Build()).AsScanEntry()
			if err != nil {
				return false, fmt.Errorf("redisstore: held: scan: %w", err)
			}
			keys := e.Elements
			if len(keys) > maxKeys-out.keys {
				keys, out.complete = keys[:maxKeys-out.keys], false
			}
			if err := s.heldKeys(ctx, c, script, keys, index, &out); err != nil {
				return false, err
			}
			if cursor = e.Cursor; cursor == 0 || !out.complete {
				break
			}
		}
		if !out.complete {
			break
		}
	}
	return out.complete, nil
}

// heldScan is what ScanHeld has found so far.
type heldScan struct {
	units    []int64
	keys     int  // the concurrency keys read
	complete bool // every key was read
}

// heldKeys runs the held script on keys (all at once), adding what they
// hold to out under the policies index maps their fingerprints to; keys
// of other policies only have their expired holds dropped and counted.
func (s *Store) heldKeys(ctx context.Context, c rueidis.Client, script *rueidis.Lua, keys []string, index map[string][]int, out *heldScan) error {
	if len(keys) == 0 {
		return nil
	}
	execs := make([]rueidis.LuaExec, 0, len(keys))
	var kept []string
	for _, k := range keys {
		if s.concKey(k) {
			execs = append(execs, rueidis.LuaExec{Keys: []string{k}, Args: []string{""}})
			kept = append(kept, k)
		}
	}
	for i, r := range script.ExecMulti(ctx, c, execs...) {
		vals, err := r.AsIntSlice()
		if err != nil {
			if isDataError(err) {
				continue // not a key the store wrote: not counted
			}
			return fmt.Errorf("redisstore: held: %w", err)
		}
		if len(vals) != 3 || vals[0] < 0 || vals[1] < 0 || vals[2] < 0 {
			err := s.malformed(vals)
			s.report(err)
			return err
		}
		fp := keyFingerprint(kept[i])
		s.expired.add(fp, vals[2])
		out.keys++
		for _, j := range index[fp] {
			out.units[j] += vals[0]
		}
	}
	return nil
}

// masters returns a client of each master of the cluster c, from its slot
// map.
func masters(ctx context.Context, c rueidis.Client) ([]rueidis.Client, error) {
	ranges, err := clusterSlots(ctx, c)
	if err != nil {
		return nil, err
	}
	nodes := c.Nodes()
	seen := make(map[string]bool)
	var out []rueidis.Client
	for _, r := range ranges {
		if seen[r.addr] {
			continue
		}
		seen[r.addr] = true
		n, ok := nodes[r.addr]
		if !ok {
			return nil, fmt.Errorf("master %s of the slot map is not among the client's nodes", r.addr)
		}
		out = append(out, n)
	}
	return out, nil
}

// globEscape escapes the characters that Redis's glob patterns (SCAN
// MATCH) read as special.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
