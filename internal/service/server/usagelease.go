package server

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// The lease of a check that asked for one ("lease": true) names, beside
// the store's lease, the limit of each of the check's results, so that
// POST /v1/release can take the usage of each by the limit's name:
//
//	"u1." + base64url(uvarint(n), n × (uvarint(len(name)), name), store lease)
//
// A result whose cost is not an estimate (a concurrency limit, a dry
// run) has the name "". The names are the client's to read and to
// forge: they only say which of its own estimates a usage settles, which
// the client decides anyway. A lease without estimates is the store's
// lease alone, as before leases could settle.
const usageLeasePrefix = "u1."

// maxUsageLease bounds a lease given to POST /v1/release, within the
// body's bound.
const maxUsageLease = maxLeaseBody - 64

// usageLeaseEncoding is strict, so that a lease has one spelling.
var usageLeaseEncoding = base64.RawURLEncoding.Strict()

// encodeUsageLease returns the lease of the client: the store's lease
// with names, one per result of the check ("" for a result that is no
// estimate).
func encodeUsageLease(storeLease string, names []string) string {
	n := binary.MaxVarintLen64 + len(storeLease)
	for _, name := range names {
		n += binary.MaxVarintLen64 + len(name)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
	}
	b = append(b, storeLease...)
	return usageLeasePrefix + usageLeaseEncoding.EncodeToString(b)
}

// decodeUsageLease returns the store's lease and the names of a lease
// that encodeUsageLease made. A lease without the prefix is a store's
// lease without estimates (names nil, ok true); one with the prefix that
// encodeUsageLease could not have made is not ok.
func decodeUsageLease(lease string) (storeLease string, names []string, ok bool) {
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
	names = make([]string, 0, count)
	for range count {
		l, w := binary.Uvarint(b)
		if w <= 0 || l > uint64(len(b)-w) {
			return "", nil, false
		}
		names = append(names, string(b[w:w+int(l)]))
		b = b[w+int(l):]
	}
	if len(b) == 0 {
		return "", nil, false
	}
	return string(b), names, true
}
