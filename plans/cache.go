package plans

import (
	"context"
	"sync"
	"time"
)

// Defaults of CacheOptions.
const (
	DefaultCacheTTL  = 5 * time.Second
	DefaultCacheSize = 100_000
)

// CacheOptions configure a Cache. The zero value of each field means the
// default given with it.
type CacheOptions struct {
	// TTL is how long an answer of the table is used before the table is
	// asked again: the longest a changed plan takes to apply. Default 5 s.
	TTL time.Duration
	// Size bounds the entries kept; default 100,000. A full cache forgets
	// the entries least recently fetched or used, half at a time.
	Size int
	// Now returns the current time; default time.Now.
	Now func() time.Time
}

// StaleError is the error of a Cache lookup whose table failed while the
// cache still held an expired answer for the key: Plan returns that
// answer with this error, and FromTable uses it.
type StaleError struct {
	Err error
}

func (e *StaleError) Error() string {
	return "plans: the table failed; using an expired answer: " + e.Err.Error()
}

func (e *StaleError) Unwrap() error { return e.Err }

// Cache is a Table that remembers another table's answers, absent keys
// included, for a time to live, so that a remote table (a Redis hash) is
// asked about each client at most once per TTL. Its memory is bounded by
// Size. When the table fails, Cache answers from an expired entry if it
// has one, with a *StaleError. It is safe for concurrent use.
type Cache struct {
	t    Table
	ttl  time.Duration
	half int
	now  func() time.Time

	mu        sync.Mutex
	cur, prev map[string]cacheEntry
}

type cacheEntry struct {
	plan    string
	ok      bool
	expires time.Time
}

var _ Table = (*Cache)(nil)

// NewCache returns a cache in front of t.
func NewCache(t Table, opts CacheOptions) *Cache {
	c := &Cache{t: t, ttl: opts.TTL, now: opts.Now}
	if c.ttl <= 0 {
		c.ttl = DefaultCacheTTL
	}
	size := opts.Size
	if size <= 0 {
		size = DefaultCacheSize
	}
	c.half = max(size/2, 1)
	if c.now == nil {
		c.now = time.Now
	}
	c.cur = make(map[string]cacheEntry)
	return c
}

// Plan returns the plan of key from the cache, or from the table when the
// cache holds no fresh answer.
func (c *Cache) Plan(ctx context.Context, key string) (string, bool, error) {
	now := c.now()
	c.mu.Lock()
	e, found := c.cur[key]
	if !found {
		if e, found = c.prev[key]; found {
			c.put(key, e) // keep what is used
		}
	}
	c.mu.Unlock()
	if found && now.Before(e.expires) {
		return e.plan, e.ok, nil
	}
	plan, ok, err := c.t.Plan(ctx, key)
	if err != nil {
		if found {
			return e.plan, e.ok, &StaleError{Err: err}
		}
		return "", false, err
	}
	c.mu.Lock()
	c.put(key, cacheEntry{plan: plan, ok: ok, expires: now.Add(c.ttl)})
	c.mu.Unlock()
	return plan, ok, nil
}

// put stores an entry; it requires c.mu. When the current generation is
// full, it becomes the previous one and the older entries are dropped.
func (c *Cache) put(key string, e cacheEntry) {
	if _, ok := c.cur[key]; !ok && len(c.cur) >= c.half {
		c.prev, c.cur = c.cur, make(map[string]cacheEntry, c.half)
	}
	c.cur[key] = e
}

// Len returns how many entries the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.cur)
	for k := range c.prev {
		if _, dup := c.cur[k]; !dup {
			n++
		}
	}
	return n
}
