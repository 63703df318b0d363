package redisstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// leasePrefix starts every lease the Redis store makes; the memory store's
// start with "m1.".
const leasePrefix = "r1."

// localLeasePrefix starts the leases of the memory store, which Options.Local
// makes under FailLocal: Release and Renew hand them to it.
const localLeasePrefix = "m1."

// Bounds of a lease, so that one from a client costs a bounded amount of
// work: at most maxLeaseKeys keys, and at most maxLeaseBytes bytes before
// base64 (id, then each key with its length).
const (
	maxLeaseKeys  = 64
	maxLeaseBytes = 4096
)

// leaseID is the random identifier of one lease.
type leaseID [16]byte

// newLeaseID returns a fresh random identifier. The generator is
// math/rand/v2's, seeded by the runtime from the system's entropy: a client
// that holds some leases cannot predict another's.
func newLeaseID() leaseID {
	var id leaseID
	binary.LittleEndian.PutUint64(id[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(id[8:], rand.Uint64())
	return id
}

// text returns id as the scripts name it: a field of each concurrency
// key's hash (22 characters of base64url).
func (id leaseID) text() string {
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// errLeaseTooLong is the error of a decision whose lease would name more
// keys, or longer ones, than a lease may (nothing is charged).
var errLeaseTooLong = fmt.Errorf("redisstore: %w: the concurrency keys of one decision exceed what a lease may name (%d keys, %d bytes)", sluice.ErrNotSupported, maxLeaseKeys, maxLeaseBytes)

// leaseEncoding is the lease's base64: URL-safe, unpadded, and strict, so
// that a lease has one spelling.
var leaseEncoding = base64.RawURLEncoding.Strict()

// encodeLease returns the lease of id over the Redis keys keys (not empty,
// without repeats): "r1." and the base64url of the id's 16 bytes followed,
// for each key, by its length (uvarint) and its bytes. It fails with
// errLeaseTooLong beyond the bounds parseLease accepts.
func encodeLease(id leaseID, keys []string) (string, error) {
	n := len(id)
	for _, k := range keys {
		n += binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(k))) + len(k)
	}
	if len(keys) == 0 || len(keys) > maxLeaseKeys || n > maxLeaseBytes {
		return "", errLeaseTooLong
	}
	b := make([]byte, 0, n)
	b = append(b, id[:]...)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return leasePrefix + leaseEncoding.EncodeToString(b), nil
}

// parseLease returns the id and the Redis keys of a lease that
// encodeLease made, or an error wrapping sluice.ErrInvalidLease for
// anything else: another prefix, a lease too long, bad base64, no key, an
// empty key, a length past the end, or any spelling encodeLease would not
// make.
func parseLease(lease string) (id leaseID, keys []string, err error) {
	bad := func(why string) (leaseID, []string, error) {
		return leaseID{}, nil, fmt.Errorf("redisstore: %w: %s", sluice.ErrInvalidLease, why)
	}
	rest, ok := strings.CutPrefix(lease, leasePrefix)
	if !ok {
		return bad("not a lease of the Redis store")
	}
	if len(rest) > leaseEncoding.EncodedLen(maxLeaseBytes) {
		return bad("too long")
	}
	b, err := leaseEncoding.DecodeString(rest)
	if err != nil || len(b) < len(id)+2 {
		return bad("malformed")
	}
	copy(id[:], b)
	for b = b[len(id):]; len(b) > 0; {
		n, w := binary.Uvarint(b)
		if w <= 0 || n == 0 || n > uint64(len(b)-w) || len(keys) == maxLeaseKeys {
			return bad("malformed")
		}
		keys = append(keys, string(b[w:w+int(n)]))
		b = b[w+int(n):]
	}
	if again, err := encodeLease(id, keys); err != nil || again != lease {
		return bad("malformed")
	}
	return id, keys, nil
}

// leaseScript is the script of Release and Renew (lua/lease.lua), built
// once; a rueidis.Lua holds only the script's text and hash, so the stores
// share it.
var leaseScript = sync.OnceValues(func() (*rueidis.Lua, error) {
	src, err := scriptSource(false, nil, textNow, "muldivmod.lua", "lib.lua", "concurrency.lua", "lease.lua")
	if err != nil {
		return nil, err
	}
	return named(rueidis.NewLuaScript(src), "lease"), nil
})

// Lease operations of lease.lua.
const (
	opRelease = "r"
	opRenew   = "n"
)

// concKey reports whether key is a concurrency key of this store: the
// prefix, a caller's key in its hash tag, then a concurrency policy's
// fingerprint. rateKey reports the same of a rate policy's key. A lease
// may name no other key, so that a lease made up by a client touches
// nothing but the holds and the settlement of its own id, which only the
// lease's holder knows.
func (s *Store) concKey(key string) bool {
	code, ok := s.keyCode(key)
	return ok && code == algoCodes[sluice.ConcurrencyAlgorithm]
}

func (s *Store) rateKey(key string) bool {
	code, ok := s.keyCode(key)
	return ok && code != algoCodes[sluice.ConcurrencyAlgorithm] && slices.Contains(algoCodes[:], code)
}

// keyCode returns the algorithm code of a state key of this store.
func (s *Store) keyCode(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"{k:")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 || !strings.HasPrefix(rest[i+1:], ":") {
		return "", false
	}
	code, _, ok := strings.Cut(rest[i+2:], ":")
	return code, ok
}

// leaseKeys returns the id and keys of lease, checking that they are this
// store's: its concurrency keys grouped into the calls to make (one for
// all, or on Redis Cluster one per hash slot), and the keys of its
// estimates to settle, in the lease's order.
func (s *Store) leaseKeys(lease string) (_ leaseID, conc [][]string, rate []string, _ error) {
	id, keys, err := parseLease(lease)
	if err != nil {
		return id, nil, nil, err
	}
	var held []string
	for _, k := range keys {
		switch {
		case s.concKey(k):
			held = append(held, k)
		case s.rateKey(k):
			rate = append(rate, k)
		default:
			return id, nil, nil, fmt.Errorf("redisstore: %w: it names a key that is not a state key of this store (prefix %q)", sluice.ErrInvalidLease, s.prefix)
		}
	}
	return id, s.bySlot(held), rate, nil
}

// bySlot groups keys into the calls to make: one for all (none for no
// keys), or on Redis Cluster one per hash slot.
func (s *Store) bySlot(keys []string) [][]string {
	if len(keys) == 0 {
		return nil
	}
	if !s.cluster() {
		return [][]string{keys}
	}
	var groups [][]string
	for _, k := range keys {
		i := slices.IndexFunc(groups, func(g []string) bool { return slot(g[0]) == slot(k) })
		if i < 0 {
			groups = append(groups, []string{k})
		} else {
			groups[i] = append(groups[i], k)
		}
	}
	return groups
}

// runLease runs lease.lua's operation op for id on each group of keys, at
// now (zero for Redis's clock), and returns each call's reply.
func (s *Store) runLease(ctx context.Context, now time.Time, op string, id leaseID, groups [][]string) ([][]int64, error) {
	script, err := leaseScript()
	if err != nil {
		return nil, err
	}
	nowArg, err := s.timeArg(now)
	if err != nil {
		return nil, err
	}
	args := []string{nowArg, op, id.text()}
	replies := make([][]int64, 0, len(groups))
	for _, keys := range groups {
		vals, err := s.eval(ctx, script, keys, args, nil)
		if err != nil {
			return nil, err
		}
		replies = append(replies, vals)
	}
	return replies, nil
}

// Release frees what lease still holds, and settles its estimates with
// usage, at Redis's TIME (at now, under Options.CallerTime), and reports
// whether it freed or settled anything; see the sluice.Store contract.
// Any store on the same Redis with the same Prefix releases the leases of
// any other, and a lease's estimates are settled once, by whichever store
// releases it first (settle.lua). A lease made by Options.Local (under
// FailLocal, while Redis was failing) goes to Options.Local. When Redis
// cannot answer, Release returns the error: the failure policy decides
// requests, not releases; a hold not released expires with its lease,
// and an estimate not settled stands. On Redis Cluster a lease whose keys
// lie in several hash slots is released by one call per slot.
func (s *Store) Release(ctx context.Context, now time.Time, lease string, usage []int64) (bool, error) {
	if s.local != nil && strings.HasPrefix(lease, localLeasePrefix) {
		return s.local.Release(ctx, now, lease, usage)
	}
	id, groups, rate, err := s.leaseKeys(lease)
	if err != nil {
		return false, err
	}
	var settled *settlement
	if len(rate) > 0 {
		if settled, err = s.settlementOf(now, id, rate, usage); err != nil {
			return false, err
		}
		// The settlement's call frees the holds of its slot too.
		i := slices.IndexFunc(groups, func(g []string) bool { return slot(g[0]) == slot(rate[0]) })
		if i >= 0 {
			settled.conc = groups[i]
			groups = slices.Delete(slices.Clone(groups), i, i+1)
		}
	}
	replies, err := s.runLease(ctx, now, opRelease, id, groups)
	if err != nil {
		return false, fmt.Errorf("redisstore: release: %w", err)
	}
	var freed int64
	for i, v := range replies {
		if len(v) != 1+len(groups[i]) || v[0] < 0 {
			err := s.malformed(v)
			s.report(err)
			return false, err
		}
		freed += v[0]
		s.countDropped(groups[i], v[1:])
	}
	if settled == nil {
		return freed > 0, nil
	}
	f, found, err := s.settleLease(ctx, now, id, settled)
	if err != nil {
		return false, fmt.Errorf("redisstore: release: %w", err)
	}
	return freed+f > 0 || found, nil
}

// Renew extends every hold of lease that has not expired by its policy's
// lease, from Redis's TIME (from now, under Options.CallerTime), and
// returns the time until the first of them expires; see the sluice.Store
// contract and Release, whose notes apply to Renew too.
func (s *Store) Renew(ctx context.Context, now time.Time, lease string) (time.Duration, error) {
	if s.local != nil && strings.HasPrefix(lease, localLeasePrefix) {
		return s.local.Renew(ctx, now, lease)
	}
	id, groups, _, err := s.leaseKeys(lease)
	if err != nil {
		return 0, err
	}
	replies, err := s.runLease(ctx, now, opRenew, id, groups)
	if err != nil {
		return 0, fmt.Errorf("redisstore: renew: %w", err)
	}
	first, renewed := int64(0), false
	for i, v := range replies {
		if len(v) != 2+len(groups[i]) || v[0] < 0 || v[0] > 1 || v[1] < 0 {
			err := s.malformed(v)
			s.report(err)
			return 0, err
		}
		s.countDropped(groups[i], v[2:])
		if v[0] == 1 && (!renewed || v[1] < first) {
			first, renewed = v[1], true
		}
	}
	if !renewed {
		return 0, fmt.Errorf("redisstore: renew: %w", sluice.ErrLeaseExpired)
	}
	return time.Duration(first) * time.Microsecond, nil
}

// countDropped counts, for each concurrency key of keys, the expired
// holds that lease.lua dropped there (dropped, in the same order).
func (s *Store) countDropped(keys []string, dropped []int64) {
	for i, k := range keys {
		s.expired.add(keyFingerprint(k), dropped[i])
	}
}

// leaseOf returns the lease of an admitted decision of reqs (cs their
// compiled policies, keys their Redis keys): id over the keys it holds
// units of (under concurrency policies, at a cost above 0) and the keys of
// its estimates to settle (rate policies with SettleWithin), each once, in
// the order of reqs; "" when there are none.
func leaseOf(id leaseID, cs []*compiled, keys []string, reqs []sluice.Request) (string, error) {
	var named []string
	for i, c := range cs {
		if (c.conc() && reqs[i].Cost > 0 || !c.conc() && reqs[i].SettleWithin > 0) && !slices.Contains(named, keys[i]) {
			named = append(named, keys[i])
		}
	}
	if len(named) == 0 {
		return "", nil
	}
	return encodeLease(id, named)
}

// settleKey returns the key that keeps the estimates of the lease id
// (text) whose first estimate is on the Redis key first: in first's hash
// tag, so in its slot.
func settleKey(prefix, first, id string) string {
	tag := first[len(prefix):]
	tag = tag[:strings.IndexByte(tag, '}')+1]
	return prefix + tag + ":settle:" + id
}

// firstSettled returns the Redis key of the first request of reqs with
// an estimate to settle.
func firstSettled(cs []*compiled, keys []string, reqs []sluice.Request) string {
	for i, c := range cs {
		if !c.conc() && reqs[i].SettleWithin > 0 {
			return keys[i]
		}
	}
	return ""
}

// settleMicros returns the time to settle req's estimate, in whole µs (at
// least 1, at most 2^52), or 0 when it has none.
func settleMicros(c *compiled, req *sluice.Request) int64 {
	if c.conc() || req.SettleWithin <= 0 {
		return 0
	}
	return min(max(int64(req.SettleWithin/time.Microsecond), 1), maxTime)
}
