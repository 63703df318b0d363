package redisstore

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testkit"
)

func TestCRC16(t *testing.T) {
	// The check value of CRC-16/XMODEM, as the Redis Cluster specification
	// gives it, and slots that Redis itself reports (CLUSTER KEYSLOT).
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, c := range []struct {
		key  string
		slot uint16
	}{{"a", 15495}, {"b", 3300}, {"foo", 12182}, {"{user1000}.following", 3443}, {"foo{}{bar}", 8363}, {"foo{{bar}}zap", 4015}, {"foo{bar}{zap}", 5061}} {
		if got := slot(c.key); got != c.slot {
			t.Errorf("slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
}

// hostileKeys are keys that try to break out of their place in a Redis key.
func hostileKeys() []string {
	long := strings.Repeat("x", 1<<20)
	return []string{
		"", "a", "{", "}", "{}", "{a}", "a}b", "}:tb:1:1s:0", "a:b", ":", "%", "%7B", "%7b", "#", "#abc",
		"a\nb", "a\r\n", "\x00", "a\x00b", "\xff", "héllo", " ", "a b", "*", "?", "[a]",
		strings.Repeat("a", maxReadable), strings.Repeat("a", maxReadable+1), strings.Repeat("{", 30),
		long, long + "y", "y" + long,
	}
}

// keyShape is what every key the store makes looks like.
var keyShape = regexp.MustCompile(`^p:\{k:([A-Za-z0-9\-._~@/%]*|#[0-9a-f]{32})\}:(tb|gcra|lb|fw|sw|sl):[0-9]+:[0-9a-z.µ]+:[0-9]+(:[A-Za-z0-9\-._~@/%]*|:#[0-9a-f]{32})?$`)

// TestKeyLayout checks that no key text can break out of its place in the
// Redis key: every key has the documented shape, holds exactly one hash
// tag, is short whatever the key's length, and different keys or policies
// never share a Redis key, while all the policies of one key share a slot.
func TestKeyLayout(t *testing.T) {
	policies := []sluice.Policy{
		sluice.TokenBucket(10, time.Second, 0),
		sluice.TokenBucket(10, time.Second, 10),
		sluice.GCRA(10, time.Second, 3).Named("a:b"),
		sluice.LeakyBucket(10, time.Second, 3).Named("{x}"),
		sluice.FixedWindow(10, time.Minute).Named(strings.Repeat("n", 100)),
		sluice.SlidingWindow(10, time.Minute).Named("\x00\n"),
		sluice.SlidingLog(10, time.Minute),
	}
	seen := map[string]string{}
	for _, key := range hostileKeys() {
		var slot0 uint16
		for i, p := range policies {
			k := compile(p).key("p:", key)
			what := fmt.Sprintf("key(%q…, %v)", trunc(key), p)
			if !keyShape.MatchString(k) {
				t.Errorf("%s = %q, which is not of the documented shape", what, k)
			}
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Errorf("%s = %q holds more than one brace of each kind", what, k)
			}
			if len(k) > 200 {
				t.Errorf("%s is %d bytes long", what, len(k))
			}
			if other, ok := seen[k]; ok {
				t.Errorf("%s = %q, the same Redis key as %s", what, k, other)
			}
			seen[k] = what
			if i == 0 {
				slot0 = slot(k)
			} else if slot(k) != slot0 {
				t.Errorf("%s is in slot %d, the key's first policy in %d", what, slot(k), slot0)
			}
		}
	}
}

func trunc(s string) string {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

// TestHostileKeysInRedis writes hostile keys through the store and checks
// what Redis holds: one key per (policy, key) pair, each of the documented
// shape, and every decision independent of the other keys.
func TestHostileKeysInRedis(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newTestStore(t, []string{srv.Addr}, Options{Prefix: "p:", Failure: FailError})
	keys := hostileKeys()
	p := sluice.FixedWindow(1, time.Hour)
	for round, want := range []bool{true, false} {
		for _, k := range keys {
			d, err := st.Allow(t.Context(), time.Time{}, sluice.Request{Policy: &p, Key: k, Cost: 1})
			if err != nil || d.Allowed != want {
				t.Errorf("round %d: Allow(%q…) = %+v, %v; want allowed %v", round, trunc(k), d, err, want)
			}
		}
	}
	stored := srv.Keys(t, "*")
	if len(stored) != len(keys) {
		t.Errorf("Redis holds %d keys for %d distinct keys", len(stored), len(keys))
	}
	for _, k := range stored {
		if !keyShape.MatchString(k) {
			t.Errorf("Redis holds key %q, which is not of the documented shape", k)
		}
	}
}
