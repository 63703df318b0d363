package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestAllowAllManyRepeats: an AllowAll of many requests on a few keys
// decides each as one request of the summed cost up to it, and charges
// them all.
func TestAllowAllManyRepeats(t *testing.T) {
	const n, limit = 3000, 10_000
	st := New(Options{})
	p := sluice.FixedWindow(limit, time.Hour)
	reqs := make([]sluice.Request, n)
	for i := range reqs {
		reqs[i] = sluice.Request{Policy: &p, Key: "k" + strconv.Itoa(i%3), Cost: 2}
	}
	now := time.Unix(1_700_000_000, 0)
	out := make([]sluice.Decision, n)
	d, err := st.AllowAll(context.Background(), now, reqs, out)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowAll = %+v, %v; want allowed", d, err)
	}
	for i, o := range out {
		if want := int64(limit - 2*(i/3+1)); !o.Allowed || o.Remaining != want {
			t.Fatalf("out[%d] = %+v, want allowed with %d remaining", i, o, want)
		}
	}
	got, err := st.Peek(context.Background(), now, sluice.Request{Policy: &p, Key: "k0", Cost: 1})
	if want := int64(limit - 2*n/3 - 1); err != nil || got.Remaining != want {
		t.Errorf("after AllowAll, Peek(k0) = %+v, %v; want %d remaining", got, err, want)
	}
}
