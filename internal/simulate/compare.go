package simulate

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
)

// PolicyStats is what a Comparison found for one policy.
type PolicyStats struct {
	Policy sluice.Policy
	// Admitted and Denied count requests; CostAdmitted sums the cost of
	// the admitted ones.
	Admitted, Denied, CostAdmitted int64
	// MaxCostInPeriod is the most cost admitted for one key within any
	// interval [s, s+P), P being the policy's period. MaxCostKey is the
	// first key (in trace order) to reach it, and MaxCostFrom and MaxCostTo
	// are the times of the first and the last admitted request of that
	// interval, in ms since the Unix epoch.
	MaxCostInPeriod        int64
	MaxCostKey             string
	MaxCostFrom, MaxCostTo int64
	// P99Delay is the nearest-rank 99th percentile of the Delay of the
	// admitted requests: with n admitted requests, the ⌈0.99·n⌉-th smallest
	// delay, which is the smallest d such that at least 99% of them waited
	// d or less. Each request counts once, whatever its cost. Zero when
	// none was admitted. Only leaky_bucket has delays.
	P99Delay time.Duration
	// MaxDelay is the longest Delay of an admitted request.
	MaxDelay time.Duration
}

// Comparison runs alongside Run to compare several policies on the same
// requests: admitted and denied requests, the most cost admitted for one
// key in any period-long interval, and the p99 delay.
//
// Its memory is, per policy, one counter per distinct delay (a single one
// for every algorithm but leaky_bucket) and, per key and policy, the
// admitted requests of the last period (requests at the same millisecond
// share one entry), which is at most about twice the policy's capacity
// entries per key, and usually far fewer.
type Comparison struct {
	Policies []sluice.Policy
	Span     Span
	keys     map[string][]periodWindow
	stats    []compareStats
}

type compareStats struct {
	PolicyStats
	periodUS   int64
	zeroDelays int64
	delays     map[time.Duration]int64 // admitted requests by non-zero delay
}

// NewComparison returns an empty comparison of policies, whose decisions
// Add receives in the same order.
func NewComparison(policies []sluice.Policy) *Comparison {
	c := &Comparison{
		Policies: slices.Clone(policies),
		keys:     make(map[string][]periodWindow),
		stats:    make([]compareStats, len(policies)),
	}
	for i, p := range policies {
		c.stats[i].Policy = p
		c.stats[i].periodUS = int64(p.Period / time.Microsecond)
		c.stats[i].delays = make(map[time.Duration]int64)
	}
	return c
}

// Add counts one request and its decisions: ds[i] is the decision of the
// i-th policy.
func (c *Comparison) Add(req Request, ds []sluice.Decision) {
	c.Span.Add(req)
	ws, ok := c.keys[req.Key]
	if !ok {
		ws = make([]periodWindow, len(c.stats))
		c.keys[req.Key] = ws
	}
	for i, d := range ds {
		st := &c.stats[i]
		if !d.Allowed {
			st.Denied++
			continue
		}
		st.Admitted++
		st.CostAdmitted += req.Cost
		if d.Delay == 0 {
			st.zeroDelays++
		} else {
			st.delays[d.Delay]++
			st.MaxDelay = max(st.MaxDelay, d.Delay)
		}
		w := &ws[i]
		if st.Policy.Calendar.Unit != sluice.NoCalendar {
			// A calendar policy: the most cost admitted within one of
			// its windows.
			if sum := w.addCalendar(&st.Policy, req.T, req.Cost); sum > st.MaxCostInPeriod {
				st.MaxCostInPeriod = sum
				st.MaxCostKey = req.Key
				st.MaxCostFrom = w.calStart
				st.MaxCostTo = req.T
			}
			continue
		}
		if sum := w.add(req.T, req.Cost, st.periodUS); sum > st.MaxCostInPeriod {
			st.MaxCostInPeriod = sum
			st.MaxCostKey = req.Key
			st.MaxCostFrom = w.oldest()
			st.MaxCostTo = req.T
		}
	}
}

// Stats returns what the comparison found, one PolicyStats per policy.
func (c *Comparison) Stats() []PolicyStats {
	out := make([]PolicyStats, len(c.stats))
	for i := range c.stats {
		st := &c.stats[i]
		out[i] = st.PolicyStats
		out[i].P99Delay = nearestRank(99, st.Admitted, st.zeroDelays, st.delays)
	}
	return out
}

// nearestRank returns the nearest-rank pct-th percentile of n values, of
// which zero are 0 and the others are counted by value in counts: the
// ⌈pct·n/100⌉-th smallest value. It returns 0 for n = 0.
func nearestRank(pct, n, zero int64, counts map[time.Duration]int64) time.Duration {
	rank := (pct*n + 99) / 100
	if rank <= zero {
		return 0
	}
	seen := zero
	for _, d := range slices.Sorted(maps.Keys(counts)) {
		seen += counts[d]
		if seen >= rank {
			return d
		}
	}
	return 0 // unreachable when the counts add up to n
}

// WriteTable writes the comparison as a text table: a line that describes
// the traffic and the policies, one row per policy, and notes that define
// the columns.
func (c *Comparison) WriteTable(w io.Writer) error {
	keys := "keys"
	if len(c.keys) == 1 {
		keys = "key"
	}
	heading := fmt.Sprintf("Trace: %s, %d %s", c.Span, len(c.keys), keys)
	shared, ok := sharedLimit(c.Policies)
	label := func(p sluice.Policy) string { return describe(p) }
	first, period, length := "POLICY", "PERIOD", "of the policy's period"
	if ok {
		heading += "\nPolicy: " + shared
		label = func(p sluice.Policy) string { return p.Algorithm.String() }
		first, period, length = "ALGORITHM", PeriodText(c.Policies[0]), "of that length"
		if c.Policies[0].Calendar.Unit != sluice.NoCalendar {
			length = "that is one of those windows"
		}
	}
	if _, err := fmt.Fprintf(w, "%s\n\n", heading); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tADMITTED\tDENIED\tCOST ADMITTED\tMAX COST IN ANY %s\tP99 DELAY\n", first, period)
	for _, r := range c.Stats() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\n",
			label(r.Policy), r.Admitted, r.Denied, r.CostAdmitted, r.MaxCostInPeriod, r.P99Delay)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nMAX COST IN ANY %s: the most cost admitted for one key within any interval %s,\n"+
		"counted when admitted (a --chart row adds up all keys, and counts leaky_bucket's requests when they start).\n"+
		"P99 DELAY: nearest-rank 99th percentile of the delay of admitted requests (the ⌈0.99·n⌉-th smallest of n);\n"+
		"only leaky_bucket delays requests.\n", period, length)
	return err
}

// sharedLimit describes the limit that every policy shares ("limit 100 per
// 1m0s, burst 20 for token_bucket, gcra, leaky_bucket"), and reports
// whether they do share one.
func sharedLimit(ps []sluice.Policy) (string, bool) {
	if len(ps) == 0 {
		return "", false
	}
	var family []string
	burst := int64(0)
	for _, p := range ps {
		if p.Limit != ps[0].Limit || p.Period != ps[0].Period || p.Calendar != ps[0].Calendar {
			return "", false
		}
		if p.Algorithm.HasBurst() {
			if burst != 0 && p.Capacity() != burst {
				return "", false
			}
			burst = p.Capacity()
			family = append(family, p.Algorithm.String())
		}
	}
	s := fmt.Sprintf("limit %d per %s", ps[0].Limit, PeriodText(ps[0]))
	switch {
	case len(family) == 0:
	case len(family) == len(ps):
		s += fmt.Sprintf(", burst %d", burst)
	default:
		s += fmt.Sprintf(", burst %d for %s", burst, strings.Join(family, ", "))
	}
	return s, true
}

// periodWindow holds the admitted requests of one key under one policy
// that lie within the last period, oldest first, in a ring buffer whose
// length is a power of two, with the sum of their costs.
type periodWindow struct {
	buf     []windowEntry
	head, n int
	sum     int64
	// calStart and calEnd (ms) are the window of a calendar policy
	// whose cost sum counts.
	calStart, calEnd int64
}

type windowEntry struct {
	t, cost int64 // ms since the Unix epoch; summed cost admitted at t
}

// add records cost admitted at t (not before the newest entry), drops the
// entries that are a full period or more before t, and returns the cost
// admitted within (t − period, t]: the most admitted in any period-long
// interval that ends at t.
func (w *periodWindow) add(t, cost, periodUS int64) int64 {
	w.sum += cost
	if w.n > 0 && w.buf[(w.head+w.n-1)&(len(w.buf)-1)].t == t {
		w.buf[(w.head+w.n-1)&(len(w.buf)-1)].cost += cost
	} else {
		if w.n == len(w.buf) {
			grown := make([]windowEntry, max(4, 2*len(w.buf)))
			for i := range w.n {
				grown[i] = w.buf[(w.head+i)&(len(w.buf)-1)]
			}
			w.buf, w.head = grown, 0
		}
		w.buf[(w.head+w.n)&(len(w.buf)-1)] = windowEntry{t: t, cost: cost}
		w.n++
	}
	for (t-w.buf[w.head].t)*1000 >= periodUS {
		w.sum -= w.buf[w.head].cost
		w.head = (w.head + 1) & (len(w.buf) - 1)
		w.n--
	}
	return w.sum
}

// addCalendar records cost admitted at t (ms, not before the last one)
// under calendar policy p and returns the cost admitted in p's window
// that holds t.
func (w *periodWindow) addCalendar(p *sluice.Policy, t, cost int64) int64 {
	if t >= w.calEnd || t < w.calStart {
		start, end, _ := p.Window(time.UnixMilli(t))
		w.calStart, w.calEnd, w.sum = start.UnixMilli(), end.UnixMilli(), 0
	}
	w.sum += cost
	return w.sum
}

// oldest returns the time of the oldest entry; w must not be empty.
func (w *periodWindow) oldest() int64 { return w.buf[w.head].t }
