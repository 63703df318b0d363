package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// oneOverride holds one override, of (limit, key), until expires.
type oneOverride struct {
	limit, key string
	p          sluice.Policy
	expires    time.Time
}

func (o *oneOverride) Any() bool { return o.limit != "" }

func (o *oneOverride) Lookup(limit, key string, now time.Time) (sluice.Policy, bool) {
	if limit == o.limit && key == o.key && now.Before(o.expires) {
		return o.p, true
	}
	return sluice.Policy{}, false
}

func TestResolver(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	own := sluice.TokenBucket(10, time.Second, 0).Named("api")
	more := sluice.TokenBucket(1000, time.Second, 0).Named("api")
	ov := &oneOverride{limit: "api", key: "k1", p: more, expires: t0.Add(time.Minute)}
	r := NewResolver(ov, func() time.Time { return now })
	for _, tt := range []struct {
		name     string
		r        *Resolver
		limit    sluice.Policy
		key      string
		at       time.Time
		want     sluice.Policy
		override bool
	}{
		{"the overridden key", r, own, "k1", t0, more, true},
		{"another key", r, own, "k2", t0, own, false},
		{"another limit", r, own.Named("web"), "k1", t0, own.Named("web"), false},
		{"after the expiry", r, own, "k1", t0.Add(time.Minute), own, false},
		{"no overrides", NewResolver(nil, nil), own, "k1", t0, own, false},
		{"no overrides in force", NewResolver(&oneOverride{}, nil), own, "k1", t0, own, false},
		{"a nil resolver", nil, own, "k1", t0, own, false},
	} {
		now = tt.at
		if got, override := tt.r.Policy(tt.limit, tt.key); got != tt.want || override != tt.override {
			t.Errorf("%s: Policy = %v, %v; want %v, %v", tt.name, got, override, tt.want, tt.override)
		}
	}
	var none *Resolver
	if !r.Active() || NewResolver(&oneOverride{}, nil).Active() || NewResolver(nil, nil).Active() || none.Active() {
		t.Errorf("Active: with an override %v, with none %v, %v, nil %v; want true, false, false, false",
			r.Active(), NewResolver(&oneOverride{}, nil).Active(), NewResolver(nil, nil).Active(), none.Active())
	}
}
