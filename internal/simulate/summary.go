package simulate

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
)

// KeyStats counts the requests of one key under one policy.
type KeyStats struct {
	Key string
	// Requests, Admitted and Denied count requests; Denied includes
	// OverCapacity, the requests whose cost exceeds the capacity.
	Requests, Admitted, Denied, OverCapacity int64
	// Cost and CostAdmitted sum the cost offered and the cost admitted.
	Cost, CostAdmitted int64
	// MaxDelay is the longest Delay of an admitted request.
	MaxDelay time.Duration
	// MaxHeld, under a concurrency policy, is the most units the key held
	// at once: the units held after an admission, at its largest (holds
	// grow only when a request is admitted).
	MaxHeld int64
	// Under a policy with a penalty: Blocks counts the offences (each
	// started a block), Blocked the requests refused during a block, and
	// MaxWait is the longest RetryAfter an offence got: how long the
	// key was shut out, its escalation at its height.
	Blocks, Blocked int64
	MaxWait         time.Duration
}

func (s *KeyStats) add(req Request, d sluice.Decision) {
	s.Requests++
	s.Cost += req.Cost
	if d.Allowed {
		s.Admitted++
		s.CostAdmitted += req.Cost
		s.MaxDelay = max(s.MaxDelay, d.Delay)
		if d.Lease != "" {
			s.MaxHeld = max(s.MaxHeld, d.Limit-d.Remaining)
		}
		return
	}
	s.Denied++
	if d.RetryAfter == sluice.Never {
		s.OverCapacity++
	}
	switch {
	case d.Offence:
		s.Blocks++
		s.MaxWait = max(s.MaxWait, d.RetryAfter)
	case d.Blocked:
		s.Blocked++
	}
}

func (s *KeyStats) merge(o *KeyStats) {
	s.Requests += o.Requests
	s.Admitted += o.Admitted
	s.Denied += o.Denied
	s.OverCapacity += o.OverCapacity
	s.Cost += o.Cost
	s.CostAdmitted += o.CostAdmitted
	s.MaxDelay = max(s.MaxDelay, o.MaxDelay)
	s.MaxHeld = max(s.MaxHeld, o.MaxHeld)
	s.Blocks += o.Blocks
	s.Blocked += o.Blocked
	s.MaxWait = max(s.MaxWait, o.MaxWait)
}

// KeySummary summarises the decisions of one policy per key. Its memory is
// one KeyStats per key; it keeps nothing per request.
type KeySummary struct {
	Policy sluice.Policy
	Span   Span
	index  map[string]int
	keys   []KeyStats
}

// NewKeySummary returns an empty summary of p's decisions.
func NewKeySummary(p sluice.Policy) *KeySummary {
	return &KeySummary{Policy: p, index: make(map[string]int)}
}

// Add counts one request and its decision.
func (s *KeySummary) Add(req Request, d sluice.Decision) {
	s.Span.Add(req)
	i, ok := s.index[req.Key]
	if !ok {
		i = len(s.keys)
		s.index[req.Key] = i
		s.keys = append(s.keys, KeyStats{Key: req.Key})
	}
	s.keys[i].add(req, d)
}

// Keys returns the statistics of every key, in order of first appearance.
// The slice is the summary's own; do not modify it.
func (s *KeySummary) Keys() []KeyStats { return s.keys }

// Total returns the statistics of all keys together (Key is empty).
func (s *KeySummary) Total() KeyStats {
	var t KeyStats
	for i := range s.keys {
		t.merge(&s.keys[i])
	}
	return t
}

// WriteTable writes the summary as a text table: a line that names the
// policy and the traffic, then one row per key in order of first
// appearance, and a TOTAL row when there are several keys.
func (s *KeySummary) WriteTable(w io.Writer) error {
	keys := "keys"
	if len(s.keys) == 1 {
		keys = "key"
	}
	if _, err := fmt.Fprintf(w, "Trace: %s, %d %s\nPolicy: %s\n\n", s.Span, len(s.keys), keys, describe(s.Policy)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	conc := s.Policy.Algorithm == sluice.ConcurrencyAlgorithm
	if conc {
		// No delay under a concurrency limit; the most held at once instead
		// (for TOTAL: the most one key held).
		fmt.Fprint(tw, "KEY\tREQUESTS\tADMITTED\tDENIED\tCOST\tCOST ADMITTED\tMAX HELD")
	} else {
		fmt.Fprint(tw, "KEY\tREQUESTS\tADMITTED\tDENIED\tCOST\tCOST ADMITTED\tMAX DELAY")
	}
	pen := !s.Policy.Penalty.IsZero()
	if pen {
		// The blocks: offences, the requests they refused, and the
		// longest wait an offence gave.
		fmt.Fprint(tw, "\tBLOCKS\tBLOCKED\tLONGEST BLOCK")
	}
	fmt.Fprint(tw, "\n")
	row := func(k *KeyStats) {
		var last any = k.MaxDelay
		if conc {
			last = k.MaxHeld
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%v",
			k.Key, k.Requests, k.Admitted, k.Denied, k.Cost, k.CostAdmitted, last)
		if pen {
			fmt.Fprintf(tw, "\t%d\t%d\t%v", k.Blocks, k.Blocked, k.MaxWait)
		}
		fmt.Fprint(tw, "\n")
	}
	for i := range s.keys {
		row(&s.keys[i])
	}
	total := s.Total()
	if len(s.keys) > 1 {
		total.Key = "TOTAL"
		row(&total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if total.OverCapacity > 0 {
		_, err := fmt.Fprintf(w, "\n%d of the denied requests cost more than the capacity, %d: they can never be admitted.\n",
			total.OverCapacity, s.Policy.Capacity())
		return err
	}
	return nil
}

// describe names a policy for a table's heading, such as
// "token_bucket, limit 100 per 1m0s, burst 20", or "concurrency, limit 2
// held at once, lease 30s".
func describe(p sluice.Policy) string {
	if p.Algorithm == sluice.ConcurrencyAlgorithm {
		return fmt.Sprintf("%s, limit %d held at once, lease %v", p.Algorithm, p.Limit, p.Period)
	}
	s := fmt.Sprintf("%s, limit %d per %s", p.Algorithm, p.Limit, PeriodText(p))
	if p.Algorithm.HasBurst() {
		s += fmt.Sprintf(", burst %d", p.Capacity())
	}
	if !p.Penalty.IsZero() {
		s += ", " + p.Penalty.String()
	}
	return s
}

// PeriodText writes p's period for a heading: a duration such as 1m0s, or
// a calendar period with its zone, such as "calendar_month
// America/New_York".
func PeriodText(p sluice.Policy) string {
	if p.Calendar.Unit != sluice.NoCalendar {
		return p.Calendar.String()
	}
	return p.Period.String()
}
