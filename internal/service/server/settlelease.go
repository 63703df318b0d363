package server

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strings"
)

// The lease of a check that asked for one ("lease": true) names, beside
// the store's lease, the limit and the estimate of each request of the
// store call that took it, so that POST /v1/release can take the usage of
// each by the limit's name (and count what it settles):
//
//	"u1." + base64url(uvarint(n), n × (uvarint(len(name)), name, uvarint(estimate)), store lease)
//
// A request whose cost is not an estimate (a concurrency limit's) has the
// name "". The names and estimates are the client's to read and to
// forge: they only say which of its own estimates a usage settles, which
// the client decides anyway, and what the metrics count of it. A lease
// without estimates is the store's lease alone, as before leases could
// settle.
const usageLeasePrefix = "u1."

// maxUsageLease bounds a lease given to POST /v1/release, within the
// body's bound.
const maxUsageLease = maxLeaseBody - 64

// usageLeaseEncoding is strict, so that a lease has one spelling.
var usageLeaseEncoding = base64.RawURLEncoding.Strict()

// encodeUsageLease returns the lease of the client: the store's lease
// with one estimate per request of the store call.
func encodeUsageLease(storeLease string, ests []estimate) string {
	n := binary.MaxVarintLen64 + len(storeLease)
	for _, e := range ests {
		n += 2*binary.MaxVarintLen64 + len(e.name)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(ests)))
	for _, e := range ests {
		b = binary.AppendUvarint(b, uint64(len(e.name)))
		b = append(b, e.name...)
		b = binary.AppendUvarint(b, uint64(e.cost))
	}
	b = append(b, storeLease...)
	return usageLeasePrefix + usageLeaseEncoding.EncodeToString(b)
}

// estimate is the limit and the estimated cost of one request of a lease
// with estimates; name is "" for a request that is no estimate.
type estimate struct {
	name string
	cost int64
}

// decodeUsageLease returns the store's lease and the estimates of a lease
// that encodeUsageLease made. A lease without the prefix is a store's
// lease without estimates (ests nil, ok true); one with the prefix that
// encodeUsageLease could not have made is not ok.
func decodeUsageLease(lease string) (storeLease string, ests []estimate, ok bool) {
	rest, found := strings.CutPrefix(lease, usageLeasePrefix)
	if !found {
		return lease, nil, true
	}
	if len(rest) > usageLeaseEncoding.EncodedLen(maxUsageLease) {
		return "", nil, false
	}
	b, err := usageLeaseEncoding.DecodeString(rest)
	if err != nil {
		return "", nil, false
	}
	count, w := binary.Uvarint(b)
	if w <= 0 || count > maxChecks {
		return "", nil, false
	}
	b = b[w:]
	ests = make([]estimate, 0, count)
	for range count {
		l, w := binary.Uvarint(b)
		if w <= 0 || l > uint64(len(b)-w) {
			return "", nil, false
		}
		name := string(b[w : w+int(l)])
		b = b[w+int(l):]
		c, w := binary.Uvarint(b)
		if w <= 0 || c > math.MaxInt64 {
			return "", nil, false
		}
		b = b[w:]
		ests = append(ests, estimate{name, int64(c)})
	}
	if len(b) == 0 {
		return "", nil, false
	}
	return string(b), ests, true
}
