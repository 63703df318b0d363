package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
)

// HeaderStyle selects the quota header fields written on responses. The
// zero value means HeadersIETF. Styles combine with |.
type HeaderStyle uint8

const (
	// HeadersIETF writes the fields of draft-ietf-httpapi-ratelimit-headers-10:
	// RateLimit-Policy, one item per policy that applied to the request
	// (`"per-ip";q=10;w=1, "per-user";q=1000;w=3600`), and RateLimit, one
	// item for the policy closest to its limit (`"per-ip";r=0;t=1`).
	HeadersIETF HeaderStyle = 1 << iota
	// HeadersLegacy writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (seconds from now) for the policy closest to its
	// limit, as earlier drafts defined them.
	HeadersLegacy
	// HeadersX writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (a Unix time in seconds) for the policy closest to
	// its limit, as GitHub and many APIs do.
	HeadersX
	// HeadersNone writes no quota fields (Retry-After is still written on
	// denials). It overrides every other style.
	HeadersNone
)

// The header names, in canonical form, so that maps can be indexed
// without canonicalising.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrLimit      = "Ratelimit-Limit"
	hdrRemaining  = "Ratelimit-Remaining"
	hdrReset      = "Ratelimit-Reset"
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
)

// quotaFields are the fields writeHeaders may set.
var quotaFields = [...]string{hdrPolicy, hdrRateLimit, hdrLimit, hdrRemaining, hdrReset, hdrXLimit, hdrXRemaining, hdrXReset}

func (s HeaderStyle) has(f HeaderStyle) bool {
	if s == 0 {
		s = HeadersIETF
	}
	return s&HeadersNone == 0 && s&f != 0
}

// RetryAfterSeconds returns the Retry-After value, in whole seconds, for a
// wait of d: d rounded up, and at least 1, so a client that obeys it never
// comes back before the request can pass.
func RetryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilSeconds returns d rounded up to whole seconds, 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AppendPolicy appends p as a Quota Policy Item of the RateLimit-Policy
// field (draft-ietf-httpapi-ratelimit-headers-10, section 3.1): the policy's
// name as a String, q its Limit and w its Period in seconds, as in
// `"per-ip";q=10;w=1`.
//
// The window must be whole seconds. A Period that is not is expressed by
// the smallest whole-second window with the same rate when one exists
// within a year (10 per 100ms is `q=100;w=1`); otherwise w is left out.
// Characters a String cannot hold (outside printable ASCII) are written
// as '?'. A calendar policy's window has no fixed length: AppendPolicy
// leaves its w out, and AppendPolicyAt gives the current window's. A
// concurrency policy has no window: q is the units it lets a key hold at
// once, and w is left out (its Period is the length of a lease, not a
// window).
func AppendPolicy(dst []byte, p sluice.Policy) []byte {
	return AppendPolicyAt(dst, p, time.Time{})
}

// AppendPolicyAt is AppendPolicy at the instant now, which sets a calendar
// policy's w: the length, in seconds, of its window that holds now (a
// Berlin calendar_month is 2674800 in March, 31 days less the hour the
// clocks skip). For a zero now, w is left out.
func AppendPolicyAt(dst []byte, p sluice.Policy, now time.Time) []byte {
	dst = appendSFString(dst, p.Name)
	period := p.Period
	if p.Algorithm == sluice.ConcurrencyAlgorithm {
		period = 0
	}
	if p.Calendar.Unit != sluice.NoCalendar {
		period = 0
		if start, end, ok := p.Window(now); ok && !now.IsZero() {
			period = end.Sub(start)
		}
	}
	q, w := quotaWindow(p.Limit, period)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, q, 10)
	if w > 0 {
		dst = append(dst, ";w="...)
		dst = strconv.AppendInt(dst, w, 10)
	}
	return dst
}

// AppendRateLimit appends a Service Limit Item of the RateLimit field
// (draft-ietf-httpapi-ratelimit-headers-10, section 4.1) for the policy
// named name and its decision d: r the units remaining and t the seconds,
// rounded up, until more quota is available, as in `"per-ip";r=0;t=1`. For
// a denied decision t is its RetryAfter (so Retry-After and t agree); for an
// admitted one, its ResetAfter (when the quota is whole again: for
// sliding_window up to twice the window, see docs/algorithms.md). t is left
// out when the request can never be admitted.
func AppendRateLimit(dst []byte, name string, d sluice.Decision) []byte {
	dst = appendSFString(dst, name)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, max(d.Remaining, 0), 10)
	if t, ok := resetSeconds(d); ok {
		dst = append(dst, ";t="...)
		dst = strconv.AppendInt(dst, t, 10)
	}
	return dst
}

// resetSeconds is the t parameter and RateLimit-Reset of d.
func resetSeconds(d sluice.Decision) (int64, bool) {
	if !d.Allowed {
		if d.RetryAfter == sluice.Never {
			return 0, false
		}
		return RetryAfterSeconds(d.RetryAfter), true
	}
	return ceilSeconds(d.ResetAfter), true
}

// maxWindow bounds the whole-second window of a rescaled sub-second
// period.
const maxWindow = 365 * 24 * 3600

// quotaWindow returns the q and w parameters of a policy of limit units
// per period; w is 0 when no whole-second window expresses it exactly.
func quotaWindow(limit int64, period time.Duration) (q, w int64) {
	if period <= 0 {
		return limit, 0
	}
	if period%time.Second == 0 {
		return limit, int64(period / time.Second)
	}
	// limit per period = (limit·1e9/period) per second = a/b: w = b, q = a.
	a, b := limit*int64(time.Second), int64(period) // limit ≤ 1e9: a ≤ 1e18
	g := gcd(a, b)
	a, b = a/g, b/g
	if b > maxWindow {
		return limit, 0
	}
	return a, b
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// appendSFString appends s as a Structured Field String (RFC 9651 section
// 3.3.3): quoted, with '"' and '\' escaped; bytes outside printable ASCII,
// which a String cannot hold, become '?'.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// validPolicyName reports whether name can be written as a Structured
// Field String unchanged.
func validPolicyName(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return false
		}
	}
	return true
}

// WriteHeaders sets the quota fields of style on h for the results of one
// request. Results that did not apply (no key, or a dry run) are left out:
// clients see only the limits that can stop them. now is the time the
// decision was made, for X-RateLimit-Reset.
func WriteHeaders(h http.Header, style HeaderStyle, results []LimitResult, now time.Time) {
	writeHeaders(h, style, results, nil, func() time.Time { return now })
}

// writeHeaders is WriteHeaders with, optionally, a prebuilt
// RateLimit-Policy value for when every result applied, and a clock read
// only for X-RateLimit-Reset.
func writeHeaders(h http.Header, style HeaderStyle, results []LimitResult, policyField []string, now func() time.Time) {
	if !style.has(HeadersIETF | HeadersLegacy | HeadersX) {
		return
	}
	decider := closest(results)
	if decider < 0 {
		return
	}
	d := results[decider].Decision
	if style.has(HeadersIETF) {
		if policyField != nil {
			// The shared field: only the RateLimit value is this
			// response's own, built in a buffer of its size (zeroed on
			// every call).
			var buf [96]byte
			h[hdrPolicy] = policyField
			h[hdrRateLimit] = []string{string(AppendRateLimit(buf[:0], results[decider].Policy.Name, d))}
		} else {
			// Both values are built in one buffer and share one string
			// and one slice: two allocations, not four.
			var buf [224]byte
			b := buf[:0]
			for i := range results {
				if !results[i].counts() {
					continue
				}
				if len(b) > 0 {
					b = append(b, ", "...)
				}
				b = AppendPolicyAt(b, results[i].Policy, now())
			}
			n := len(b)
			s := string(AppendRateLimit(b, results[decider].Policy.Name, d))
			vals := make([]string, 2)
			vals[0], vals[1] = s[:n], s[n:]
			h[hdrPolicy] = vals[0:1:1]
			h[hdrRateLimit] = vals[1:2:2]
		}
	}
	if style.has(HeadersLegacy | HeadersX) {
		reset, hasReset := resetSeconds(d)
		limit := strconv.FormatInt(d.Limit, 10)
		remaining := strconv.FormatInt(max(d.Remaining, 0), 10)
		if style.has(HeadersLegacy) {
			h[hdrLimit] = []string{limit}
			h[hdrRemaining] = []string{remaining}
			if hasReset {
				h[hdrReset] = []string{strconv.FormatInt(reset, 10)}
			}
		}
		if style.has(HeadersX) {
			h[hdrXLimit] = []string{limit}
			h[hdrXRemaining] = []string{remaining}
			if hasReset {
				at := now().Add(time.Duration(reset) * time.Second)
				sec := at.Unix()
				if at.Nanosecond() > 0 {
					sec++ // never earlier than the real reset
				}
				h[hdrXReset] = []string{strconv.FormatInt(sec, 10)}
			}
		}
	}
}

// closest returns the index of the result that the RateLimit field reports:
// among the enforced results, the one that decides, in the engine's order
// (a denying one with the longest wait, else the one with the fewest
// remaining units; the first on a tie); -1 when none applied.
func closest(results []LimitResult) int {
	best := -1
	for i := range results {
		if results[i].counts() && (best < 0 || engine.Precedes(&results[i].Decision, &results[best].Decision)) {
			best = i
		}
	}
	return best
}

// ParseHeaderStyle parses a header style as written in configuration
// files: "ietf", "legacy", "x" or "none", or several joined with commas
// ("ietf,x"). "none" cannot be combined.
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	var style HeaderStyle
	for part := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(part) {
		case "ietf":
			style |= HeadersIETF
		case "legacy":
			style |= HeadersLegacy
		case "x":
			style |= HeadersX
		case "none":
			style |= HeadersNone
		default:
			return 0, fmt.Errorf("unknown header style %q (want ietf, legacy, x or none, or several joined with commas)", strings.TrimSpace(part))
		}
	}
	if style&HeadersNone != 0 && style != HeadersNone {
		return 0, fmt.Errorf("header style %q: none cannot be combined with other styles", s)
	}
	return style, nil
}

// String returns the style as ParseHeaderStyle reads it; the zero value is
// "ietf".
func (s HeaderStyle) String() string {
	if s == 0 {
		return "ietf"
	}
	if s&HeadersNone != 0 {
		return "none"
	}
	var parts []string
	for _, f := range []struct {
		f    HeaderStyle
		name string
	}{{HeadersIETF, "ietf"}, {HeadersLegacy, "legacy"}, {HeadersX, "x"}} {
		if s&f.f != 0 {
			parts = append(parts, f.name)
		}
	}
	return strings.Join(parts, ",")
}
