package redisstore

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/testkit"
)

// TestMulDivMod checks muldivmod.lua against math/big on edge cases
// and on random operands of every size it accepts (a, b <= 2^52, d <= 2^49,
// quotient below 2^53), in Redis's own Lua.
func TestMulDivMod(t *testing.T) {
	srv := testkit.StartRedis(t)
	c := testkit.RedisClient(t, srv.Addr)
	lib, err := luaFiles.ReadFile("lua/muldivmod.lua")
	if err != nil {
		t.Fatal(err)
	}
	script := rueidis.NewLuaScript(string(lib) + `
local out = {}
for i = 1, #ARGV, 3 do
  local q, r = muldivmod(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  out[#out + 1] = string.format('%.0f', q)
  out[#out + 1] = string.format('%.0f', r)
end
return out`)

	const two52, two49 = int64(1) << 52, int64(1) << 49
	type op struct{ a, b, d int64 }
	ops := []op{
		{0, 0, 1}, {1, 1, 1}, {two52, 1, 1}, {two52, two52, two49}, {two52 - 1, two52 - 1, two49 - 1},
		{two52, 2047, two49}, {1_000_000_000, 315_576_000_000_000, 315_576_000_000_000},
		{999_999_999, 315_575_999_999_999, 315_576_000_000_000}, {4_503_599_627_370_495, 999_999_937, 3_600_000_000},
		{67_108_864, 67_108_864, 1}, {67_108_865, 67_108_863, 3},
	}
	r := rand.New(rand.NewPCG(1, 2))
	// log-uniform sizes, keeping the quotient below 2^53
	size := func(max int64) int64 { return r.Int64N(max>>r.IntN(53)|1) + r.Int64N(2) }
	for len(ops) < 20000 {
		o := op{size(two52 + 1), size(two52 + 1), size(two49) + 1}
		o.a, o.b = min(o.a, two52), min(o.b, two52)
		q := new(big.Int).Mul(big.NewInt(o.a), big.NewInt(o.b))
		q.Quo(q, big.NewInt(o.d))
		if q.BitLen() <= 52 {
			ops = append(ops, o)
		}
	}
	for start := 0; start < len(ops); start += 1000 {
		batch := ops[start:min(start+1000, len(ops))]
		var args []string
		for _, o := range batch {
			args = append(args, strconv.FormatInt(o.a, 10), strconv.FormatInt(o.b, 10), strconv.FormatInt(o.d, 10))
		}
		got, err := script.Exec(t.Context(), c, nil, args).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range batch {
			q, m := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(o.a), big.NewInt(o.b)), big.NewInt(o.d), new(big.Int))
			if got[2*i] != q.String() || got[2*i+1] != m.String() {
				t.Errorf("muldivmod(%d, %d, %d) = %s, %s; want %s, %s", o.a, o.b, o.d, got[2*i], got[2*i+1], q, m)
			}
		}
	}
}
