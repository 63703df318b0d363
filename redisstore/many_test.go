package redisstore

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestAllowAllScriptLinear runs AllowAll's script, in Redis, with KEYS
// behind a table that counts its reads: for n requests on a few keys the
// script reads a key a bounded number of times per request, so its work
// grows linearly with the requests (it read two keys per pair of requests
// before, n·(n−1) reads: one request of 16,000 descriptors ran 7.2 s, and
// Redis answered no other client meanwhile). The decisions are those of
// requests on repeated keys: each sees the summed cost up to it.
func TestAllowAllScriptLinear(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{})
	c := testkit.RedisClient(t, srv.Addr)
	// The script as scripts builds it, with KEYS counted and the count
	// appended to the reply.
	const counted = `local REAL_KEYS, reads = KEYS, 0
local KEYS = setmetatable({}, {__index = function(_, i) reads = reads + 1; return REAL_KEYS[i] end})`
	const run = `local out = allow_all(0, 1, #REAL_KEYS)
out[#out + 1] = reads
return out`
	src, err := scriptSource(false, nil, slices.Concat([]string{counted, textNow, "muldivmod.lua", "lib.lua"}, manyFiles, []string{run})...)
	if err != nil {
		t.Fatal(err)
	}
	script := rueidis.NewLuaScript(src)

	const n, limit = 1000, 1_000_000
	p := sluice.FixedWindow(limit, time.Hour)
	reqs := make([]sluice.Request, n)
	for i := range reqs {
		reqs[i] = sluice.Request{Policy: &p, Key: "k" + strconv.Itoa(i%3), Cost: 2}
	}
	cs, keys, err := st.manyKeys(reqs)
	if err != nil {
		t.Fatal(err)
	}
	args, err := st.manyArgs(cs, reqs, "", time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := script.Exec(t.Context(), c, keys, args).AsIntSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != replyHeader+replyWidth*n+1 || vals[0] != 0 {
		t.Fatalf("the script replied %d values starting %v, want status 0 and %d decisions", len(vals), vals[:min(len(vals), 2)], n)
	}
	for i := range n {
		d := vals[replyHeader+replyWidth*i:]
		if want := int64(limit - 2*(i/3+1)); d[0] != 1 || d[1] != want {
			t.Fatalf("request %d: allowed %d, remaining %d; want allowed with %d remaining", i, d[0], d[1], want)
		}
	}
	if reads := vals[len(vals)-1]; reads > 4*n {
		t.Errorf("the script read KEYS %d times for %d requests, want at most %d", reads, n, 4*n)
	}
}
