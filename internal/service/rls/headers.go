package rls

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// headerStyle is the compiled Section.ResponseHeaders.
type headerStyle uint8

const (
	headersNone headerStyle = iota
	headersIETF
	headersReference
)

// The values of Section.ResponseHeaders.
const (
	// ResponseHeadersNone (or "") adds no headers, as envoyproxy/ratelimit
	// does by default.
	ResponseHeadersNone = "none"
	// ResponseHeadersIETF adds RateLimit-Policy and RateLimit, the fields
	// of draft-ietf-httpapi-ratelimit-headers-10 that Sluice writes on its
	// other doors.
	ResponseHeadersIETF = "ietf"
	// ResponseHeadersReference adds envoyproxy/ratelimit's own
	// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (its
	// LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeadersReference = "reference"
)

// parseHeaderStyle returns the style named s and false for an unknown one.
func parseHeaderStyle(s string) (headerStyle, bool) {
	switch s {
	case "", ResponseHeadersNone:
		return headersNone, true
	case ResponseHeadersIETF:
		return headersIETF, true
	case ResponseHeadersReference:
		return headersReference, true
	}
	return 0, false
}

func validHeaderStyle(s string) bool {
	_, ok := parseHeaderStyle(s)
	return ok
}

// responseHeaders returns the headers that the response resp, to the
// descriptors descs decided as items, asks Envoy to add
// (response_headers_to_add), and nil when the style adds none or no
// descriptor had a limit.
//
// Both styles describe one limit, the one envoyproxy/ratelimit picks:
// the last descriptor that is OVER_LIMIT, else the one with the fewest
// requests left (the first of equals). The IETF style leaves out
// descriptors in shadow mode, which cannot stop a request, and lists
// every limit that applied in RateLimit-Policy. Both add Retry-After to
// an OVER_LIMIT answer, in whole seconds rounded up.
func (c *Config) responseHeaders(descs []*rlscommon.RateLimitDescriptor, items []item, resp *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	if c.headers == headersNone {
		return nil
	}
	pick := -1
	for i, st := range resp.Statuses {
		if st.GetCurrentLimit() == nil || (c.headers == headersIETF && items[i].shadow) {
			continue
		}
		if pick < 0 || st.Code == rlsv3.RateLimitResponse_OVER_LIMIT || (resp.Statuses[pick].Code != rlsv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < resp.Statuses[pick].LimitRemaining) {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	st := resp.Statuses[pick]
	var out []*corev3.HeaderValue
	add := func(k, v string) { out = append(out, &corev3.HeaderValue{Key: k, Value: v}) }
	if c.headers == headersReference {
		add(c.names.Limit, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10))
		add(c.names.Remaining, strconv.FormatUint(uint64(st.LimitRemaining), 10))
		add(c.names.Reset, strconv.FormatInt(resetSeconds(st), 10))
	} else {
		var policy []byte
		seen := map[string]bool{}
		for i, s := range resp.Statuses {
			if s.GetCurrentLimit() == nil || items[i].shadow {
				continue
			}
			name := limitLabel(descs[i], s.CurrentLimit)
			if seen[name] {
				continue
			}
			seen[name] = true
			if len(policy) > 0 {
				policy = append(policy, ", "...)
			}
			policy = httplimit.AppendPolicy(policy, sluice.Policy{Name: name, Limit: int64(s.CurrentLimit.RequestsPerUnit), Period: limitPeriod(s.CurrentLimit)})
		}
		add("RateLimit-Policy", string(policy))
		d := sluice.Decision{Allowed: st.Code == rlsv3.RateLimitResponse_OK, Remaining: int64(st.LimitRemaining), ResetAfter: st.GetDurationUntilReset().AsDuration()}
		if !d.Allowed {
			d.RetryAfter = sluice.Never
			if st.DurationUntilReset != nil {
				d.RetryAfter = st.DurationUntilReset.AsDuration()
			}
		}
		add("RateLimit", string(httplimit.AppendRateLimit(nil, limitLabel(descs[pick], st.CurrentLimit), d)))
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		for _, s := range resp.Statuses {
			if s.Code == rlsv3.RateLimitResponse_OVER_LIMIT && s.DurationUntilReset != nil {
				add("Retry-After", strconv.FormatInt(httplimit.RetryAfterSeconds(s.DurationUntilReset.AsDuration()), 10))
				break
			}
		}
	}
	return out
}

// limitLabel names a limit in the IETF fields: its configured name, or
// the keys of the request descriptor ("database.op"), never its values.
func limitLabel(d *rlscommon.RateLimitDescriptor, l *rlsv3.RateLimitResponse_RateLimit) string {
	if l.Name != "" {
		return l.Name
	}
	keys := make([]string, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		keys[i] = e.GetKey()
	}
	return strings.Join(keys, ".")
}

// limitPeriod returns the period of a reported limit: its unit times its
// multiplier.
func limitPeriod(l *rlsv3.RateLimitResponse_RateLimit) time.Duration {
	unit, _ := unitPeriod(unitCode(l.Unit))
	return unit * time.Duration(max(l.GetUnitMultiplier().GetValue(), 1))
}

// resetSeconds is RateLimit-Reset: the status's duration_until_reset in
// whole seconds, rounded up; for a status without one (a limit that can
// never admit the request), the time to the end of the limit's current
// window, as envoyproxy/ratelimit reports it.
func resetSeconds(st *rlsv3.RateLimitResponse_DescriptorStatus) int64 {
	if d := st.GetDurationUntilReset(); d != nil {
		return int64((d.AsDuration() + time.Second - 1) / time.Second)
	}
	p := int64(limitPeriod(st.CurrentLimit) / time.Second)
	if p <= 0 {
		return 0
	}
	return p - time.Now().Unix()%p
}
