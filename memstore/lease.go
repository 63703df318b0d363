package memstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// concState is a concurrency key's holds and the first time at which none
// of them counts (the sweep and Prune drop the key then). A concurrency
// key is never evicted to make room: forgetting it would forget units
// that are held.
type concState struct {
	holds  algo.Holds
	expire int64
	fp     uint64 // the policy's fingerprint, for Held
}

// leaseTaker collects what one decision holds: the lease's identifier and
// the hashes of the (policy, key) pairs it took units of.
type leaseTaker struct {
	id [16]byte
	hs []uint64
	// settle is what the lease has to settle: the estimates of its
	// requests with SettleWithin.
	settle []estimate
}

// newLeaseTaker returns a leaseTaker with a fresh random identifier,
// whose hashes go to hs[:0]. The generator is math/rand/v2's, seeded by
// the runtime from the system's entropy: a client that holds some leases
// cannot predict another's.
func newLeaseTaker(hs []uint64) leaseTaker {
	lt := leaseTaker{hs: hs[:0]}
	binary.LittleEndian.PutUint64(lt.id[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(lt.id[8:], rand.Uint64())
	return lt
}

// took records a hold on h.
func (lt *leaseTaker) took(h uint64) {
	if !slices.Contains(lt.hs, h) {
		lt.hs = append(lt.hs, h)
	}
}

// leasePrefix starts every lease this store makes.
const leasePrefix = "m1."

// maxLeaseKeys bounds the keys one lease names, so that a lease from a
// client costs a bounded amount of work.
const maxLeaseKeys = 64

// lease returns the Lease that names what lt took, or "" when it took
// nothing (or lt is nil): its identifier and the hashes of its
// concurrency keys, with any estimates to settle kept under the
// identifier.
func (s *Store) lease(lt *leaseTaker) string {
	if lt == nil || len(lt.hs) == 0 && len(lt.settle) == 0 {
		return ""
	}
	if len(lt.settle) > 0 {
		s.keep(lt)
	}
	return lt.encode()
}

// A lease is leasePrefix and, in unpadded base64url, the lease's 16-byte
// identifier, the 8-byte hashes of its concurrency keys, and, when it has
// estimates to settle, the byte settleMark.
const settleMark = 1

// maxLeaseBytes is the longest lease, decoded.
const maxLeaseBytes = 16 + 8*maxLeaseKeys + 1

// encode returns the lease string of lt's identifier, hashes and
// estimates.
func (lt *leaseTaker) encode() string {
	raw := make([]byte, 0, maxLeaseBytes)
	if len(lt.hs) > maxLeaseKeys {
		raw = make([]byte, 0, 16+8*len(lt.hs)+1)
	}
	b := append(raw, lt.id[:]...)
	for _, h := range lt.hs {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	if len(lt.settle) > 0 {
		b = append(b, settleMark)
	}
	var out strings.Builder
	out.Grow(len(leasePrefix) + base64.RawURLEncoding.EncodedLen(len(b)))
	out.WriteString(leasePrefix)
	var buf [(maxLeaseBytes*4 + 2) / 3]byte
	n := base64.RawURLEncoding.EncodedLen(len(b))
	enc := buf[:0]
	if n > len(buf) {
		enc = make([]byte, 0, n) // not reached: AllowAll refuses more keys (leaseKeys)
	}
	enc = enc[:n]
	base64.RawURLEncoding.Encode(enc, b)
	out.Write(enc)
	return out.String()
}

// errMalformedLease is the error of a lease that this store cannot have
// made.
var errMalformedLease = fmt.Errorf("memstore: %w: malformed", sluice.ErrInvalidLease)

// parseLease returns the identifier and the key hashes of a lease this
// store made, and whether it has estimates to settle, or an error
// wrapping sluice.ErrInvalidLease.
func parseLease(lease string, hs []uint64) (id [16]byte, _ []uint64, settles bool, err error) {
	malformed := errMalformedLease
	rest, ok := strings.CutPrefix(lease, leasePrefix)
	if !ok {
		return id, nil, false, fmt.Errorf("memstore: %w: not a lease of the memory store", sluice.ErrInvalidLease)
	}
	if len(rest) > base64.RawURLEncoding.EncodedLen(maxLeaseBytes) {
		return id, nil, false, fmt.Errorf("memstore: %w: too long", sluice.ErrInvalidLease)
	}
	var raw [maxLeaseBytes]byte
	// Strict: a lease has one spelling (no stray bits in its last digit).
	n, err := base64.RawURLEncoding.Strict().Decode(raw[:], unsafe.Slice(unsafe.StringData(rest), len(rest)))
	b := raw[:n]
	// The decoder skips line breaks: a lease with any is another spelling.
	if err != nil || base64.RawURLEncoding.EncodedLen(n) != len(rest) || len(b) < 16 {
		return id, nil, false, malformed
	}
	switch (len(b) - 16) % 8 {
	case 0:
		if len(b) == 16 {
			return id, nil, false, malformed // it holds nothing and settles nothing
		}
	case 1:
		if b[len(b)-1] != settleMark {
			return id, nil, false, malformed
		}
		settles, b = true, b[:len(b)-1]
	default:
		return id, nil, false, malformed
	}
	copy(id[:], b)
	for b = b[16:]; len(b) > 0; b = b[8:] {
		h := binary.LittleEndian.Uint64(b)
		if h == 0 {
			return id, nil, false, malformed
		}
		hs = append(hs, h)
	}
	return id, hs, settles, nil
}

// decideConc is decide for a concurrency policy: the holds of h at t, and
// with commit an admitted request's hold taken for lt's lease.
func (sh *shard) decideConc(s *Store, c *compiled, h uint64, t, cost int64, commit bool, lt *leaseTaker) algo.Verdict {
	limit, lease := c.pp.Limit, c.pp.Period
	take := commit && lt != nil && cost > 0
	var id [16]byte
	if take {
		id = lt.id
	}
	i, found := sh.conc.find(h)
	if !found {
		var none algo.Holds
		r := algo.Concurrency(limit, &none, t, cost, id, lease, false)
		if take && r.Allowed {
			cs := &concState{fp: c.fp}
			algo.Concurrency(limit, &cs.holds, t, cost, id, lease, true)
			cs.expire = cs.holds.Expiry()
			sh.makeRoom(s, t)
			sh.conc.insert(h, cs)
			sh.sweepConc(s, t)
			lt.took(h)
		}
		return r
	}
	cs := sh.conc.slots[i].v
	s.expire(cs, t) // counted here; Concurrency then finds none to drop
	r := algo.Concurrency(limit, &cs.holds, t, cost, id, lease, take)
	if take && r.Allowed {
		lt.took(h)
	}
	cs.expire = cs.holds.Expiry() // 0 when nothing is held: swept later
	return r
}

func (sh *shard) sweepConc(s *Store, t int64) {
	sweepTable(&sh.conc, &sh.sweep, t, func(v *concState) int64 { return v.expire }, s.dropConc)
}

// dropConc counts the holds of a key dropped by the sweep or Prune, all
// of which ran out: its expire has passed.
func (s *Store) dropConc(cs *concState) {
	s.countExpired(cs.fp, cs.holds.Len())
}

// expire drops the holds of cs that ran out at t, and counts them.
func (s *Store) expire(cs *concState, t int64) {
	s.countExpired(cs.fp, cs.holds.Expire(t))
}

// countExpired adds n holds that ran out to the count of the policy fp.
func (s *Store) countExpired(fp uint64, n int) {
	if n == 0 {
		return
	}
	c, ok := s.expired.Load(fp)
	if !ok {
		c, _ = s.expired.LoadOrStore(fp, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(int64(n))
}

// Expired returns how many leases' holds under the concurrency policy p
// ran out without a release, since the store was made. A hold is counted
// when the store notices: at the next decision, release or renewal on its
// key, or when the sweep or Prune drops the key.
func (s *Store) Expired(p *sluice.Policy) (int64, error) {
	if p.Algorithm != sluice.ConcurrencyAlgorithm {
		return 0, fmt.Errorf("memstore: expired: %w: %s is not a concurrency policy", sluice.ErrInvalidPolicy, p)
	}
	c := s.compile(p)
	if c.err != nil {
		return 0, c.err
	}
	if v, ok := s.expired.Load(c.fp); ok {
		return v.(*atomic.Int64).Load(), nil
	}
	return 0, nil
}

// Release frees what lease still holds at now (zero: the store's clock)
// and settles its estimates with usage, and reports whether it freed or
// settled anything; see the sluice.Store contract.
func (s *Store) Release(_ context.Context, now time.Time, lease string, usage []int64) (bool, error) {
	var freed int64
	id, settles, err := s.eachHold(now, lease, func(id [16]byte, cs *concState, t int64) {
		freed += cs.holds.Release(id, t)
	})
	if err != nil {
		return false, err
	}
	settled := settles && s.settle(id, s.micros(now), usage)
	return freed > 0 || settled, nil
}

// Renew extends every hold of lease that has not expired at now (zero:
// the store's clock) by its policy's lease, and returns the time until the
// first of them expires; see the sluice.Store contract.
func (s *Store) Renew(_ context.Context, now time.Time, lease string) (time.Duration, error) {
	var first int64
	renewed := false
	_, _, err := s.eachHold(now, lease, func(id [16]byte, cs *concState, t int64) {
		if e, ok := cs.holds.Renew(id, t); ok {
			if !renewed || e-t < first {
				first = e - t
			}
			renewed = true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case !renewed:
		return 0, fmt.Errorf("memstore: renew: %w", sluice.ErrLeaseExpired)
	}
	return time.Duration(first) * time.Microsecond, nil
}

// eachHold calls f, under its shard's lock and at the shard's time for
// now, on the state of every key lease names, and returns the lease's
// identifier and whether it has estimates to settle; a key left holding
// nothing stays until the sweep or Prune drops it.
func (s *Store) eachHold(now time.Time, lease string, f func(id [16]byte, cs *concState, t int64)) (_ [16]byte, settles bool, _ error) {
	var hb [8]uint64
	id, hs, settles, err := parseLease(lease, hb[:0])
	if err != nil {
		return id, false, err
	}
	t := s.micros(now)
	for _, h := range hs {
		sh := &s.shards[h&s.mask]
		sh.mu.Lock()
		tt := sh.advance(t)
		if i, found := sh.conc.find(h); found {
			// A key left holding nothing stays until the sweep or Prune
			// drops it (its expire is 0), so that a key taken and
			// released in turn keeps its state's memory.
			cs := sh.conc.slots[i].v
			s.expire(cs, tt)
			f(id, cs, tt)
			cs.expire = cs.holds.Expiry()
		}
		sh.mu.Unlock()
	}
	return id, settles, nil
}

// anyLease reports whether a request of reqs takes a lease: it is under
// a concurrency policy, or has an estimate to settle.
func anyLease(reqs []sluice.Request) bool {
	for i := range reqs {
		if reqs[i].Policy.Algorithm == sluice.ConcurrencyAlgorithm || reqs[i].SettleWithin > 0 {
			return true
		}
	}
	return false
}

// Held returns the units held under the concurrency policy p at now
// (zero: the store's clock), summed over all its keys, and how many
// leases hold them. It visits every concurrency key, one shard lock at a
// time: a figure for metrics, not for a decision.
func (s *Store) Held(now time.Time, p *sluice.Policy) (units, leases int64, err error) {
	if p.Algorithm != sluice.ConcurrencyAlgorithm {
		return 0, 0, fmt.Errorf("memstore: held: %w: %s is not a concurrency policy", sluice.ErrInvalidPolicy, p)
	}
	c := s.compile(p)
	if c.err != nil {
		return 0, 0, c.err
	}
	t := s.micros(now)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		tt := max(t, sh.hw)
		for j := range sh.conc.slots {
			if e := &sh.conc.slots[j]; e.h != 0 && e.v.fp == c.fp {
				v := algo.ViewHolds(&e.v.holds, tt)
				units += v.Held
				leases += v.Leases
			}
		}
		sh.mu.Unlock()
	}
	return units, leases, nil
}

// errTooManyLeaseKeys is wrapped by the error of an AllowAll whose
// requests would hold more (policy, key) pairs of concurrency policies
// than one lease can name (64): nothing is charged.
var errTooManyLeaseKeys = fmt.Errorf("%w: one decision may hold at most %d concurrency keys", sluice.ErrNotSupported, maxLeaseKeys)

// leaseKeys checks, before anything is charged, that the concurrency
// requests of reqs (whose hashes are hs) name at most maxLeaseKeys
// distinct (policy, key) pairs, so that their lease can name them all.
func leaseKeys(reqs []sluice.Request, hs []uint64) error {
	n := 0
	for i := range reqs {
		if reqs[i].Policy.Algorithm == sluice.ConcurrencyAlgorithm {
			n++
		}
	}
	if n <= maxLeaseKeys {
		return nil
	}
	seen := make(map[uint64]bool, n)
	for i := range reqs {
		if reqs[i].Policy.Algorithm == sluice.ConcurrencyAlgorithm {
			seen[hs[i]] = true
		}
	}
	if len(seen) > maxLeaseKeys {
		return fmt.Errorf("memstore: %w, got %d", errTooManyLeaseKeys, len(seen))
	}
	return nil
}
