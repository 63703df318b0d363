package overrides

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ctxsleep"
)

// Defaults of RedisOptions.
const (
	// DefaultPoll is how often an instance looks for changes made by the
	// others: a change applies everywhere within this time plus a round
	// trip.
	DefaultPoll = 500 * time.Millisecond
	// DefaultRedisTimeout bounds each call to Redis.
	DefaultRedisTimeout = time.Second
)

var (
	//go:embed lua/put.lua
	putLua string
	//go:embed lua/delete.lua
	deleteLua string
	//go:embed lua/sweep.lua
	sweepLua string
)

// RedisOptions configure a Redis store. The zero value of each field means
// the default given with it.
type RedisOptions struct {
	// Prefix starts the keys the store writes: the hash Prefix+"{overrides}"
	// and its version counter Prefix+"{overrides}:version" (one hash slot on
	// a cluster). Default "sluice:".
	Prefix string
	// Poll is how often the version counter is read; default 500 ms.
	Poll time.Duration
	// Timeout bounds each call to Redis; default 1 s.
	Timeout time.Duration
	// Logger receives failures to refresh the local copy (once when they
	// start, once when they end). Nil discards them.
	Logger *slog.Logger
	// Now returns the current time, for sweeping expired overrides;
	// default time.Now.
	Now func() time.Time
}

// Redis is a Store in one Redis hash, shared by every instance that uses
// the same Redis and prefix. Each instance keeps a copy for Lookup, which
// a goroutine refreshes when the hash's version counter changes; Put and
// Delete refresh it at once. Close stops the goroutine. It is safe for
// concurrent use.
//
// Expiry is decided by each instance's clock: an override stops applying
// at its ExpiresAt on every instance, whether or not it was removed from
// Redis yet (expired fields are removed by the first instance that sees
// them, at its next refresh).
type Redis struct {
	client  atomic.Pointer[rueidis.Client] // nil until connected
	hash    string
	version string
	poll    time.Duration
	timeout time.Duration
	logger  *slog.Logger
	now     func() time.Time

	put, del, sweep *rueidis.Lua

	copy atomic.Pointer[table]
	any  atomic.Int64 // overrides in the copy
	mu   sync.Mutex   // serialises refreshes
	seen string       // the version of the copy; "" before the first
	// expiry is the earliest ExpiresAt in the copy; zero when none.
	expiry  time.Time
	failing bool // the last refresh failed

	stop context.CancelFunc
	done chan struct{}
}

var _ Store = (*Redis)(nil)

// ErrNotConnected is returned by a Redis store that has no client yet.
var ErrNotConnected = errors.New("overrides: not connected to redis yet")

// NewRedis returns a store on client (which the caller keeps and closes)
// and starts refreshing its copy; the first refresh is made before it
// returns, and a Redis that does not answer yet leaves the copy empty
// until it does. client may be nil when the connection is still being
// made: the store then fails with ErrNotConnected until SetClient.
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "sluice:"
	}
	r := &Redis{
		hash:    prefix + "{overrides}",
		version: prefix + "{overrides}:version",
		poll:    opts.Poll,
		timeout: opts.Timeout,
		logger:  opts.Logger,
		now:     opts.Now,
		put:     rueidis.NewLuaScript(putLua),
		del:     rueidis.NewLuaScript(deleteLua),
		sweep:   rueidis.NewLuaScript(sweepLua),
		done:    make(chan struct{}),
	}
	if r.poll <= 0 {
		r.poll = DefaultPoll
	}
	if r.timeout <= 0 {
		r.timeout = DefaultRedisTimeout
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if client != nil {
		r.client.Store(&client)
	}
	empty := make(table)
	r.copy.Store(&empty)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.refresh(ctx, false)
	go r.run(ctx)
	return r
}

// SetClient gives the store its client, once a connection that could not
// be made at first is; the copy is refreshed at once.
func (r *Redis) SetClient(client rueidis.Client) {
	r.client.Store(&client)
	r.refresh(context.Background(), true)
}

// conn returns the client, or ErrNotConnected.
func (r *Redis) conn() (rueidis.Client, error) {
	if c := r.client.Load(); c != nil {
		return *c, nil
	}
	return nil, ErrNotConnected
}

// Close stops refreshing the copy and waits for the goroutine to end. The
// copy stays usable.
func (r *Redis) Close() error {
	r.stop()
	<-r.done
	return nil
}

// Shared reports true: every instance on the same Redis sees the same
// overrides.
func (r *Redis) Shared() bool { return true }

func (r *Redis) run(ctx context.Context) {
	defer close(r.done)
	ctxsleep.Every(ctx, r.poll, func() bool {
		r.refresh(ctx, false)
		return true
	})
}

// refresh reloads the copy when the version changed, or always when force
// is set, and removes expired overrides from Redis.
func (r *Redis) refresh(ctx context.Context, force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.reload(ctx, force)
	switch {
	case err != nil && !r.failing && ctx.Err() == nil:
		r.failing = true
		r.logger.Warn("overrides: reading the overrides from redis failed; the last copy applies", "hash", r.hash, "error", err)
	case err == nil && r.failing:
		r.failing = false
		r.logger.Info("overrides: reading the overrides from redis works again", "hash", r.hash)
	}
	return err
}

// reload does refresh's work; it requires r.mu.
func (r *Redis) reload(ctx context.Context, force bool) error {
	c, err := r.conn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	v, err := c.Do(ctx, c.B().Get().Key(r.version).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		v, err = "0", nil
	}
	if err != nil {
		return fmt.Errorf("GET %s: %w", r.version, err)
	}
	if v == r.seen && !force {
		return r.sweepExpired(ctx)
	}
	m, err := c.Do(ctx, c.B().Hgetall().Key(r.hash).Build()).AsStrMap()
	if err != nil {
		return fmt.Errorf("HGETALL %s: %w", r.hash, err)
	}
	t := make(table)
	n := 0
	var expiry time.Time
	for field, value := range m {
		o, err := decode(field, value)
		if err != nil {
			r.logger.Warn("overrides: skipping a malformed override in redis", "hash", r.hash, "field", field, "error", err)
			continue
		}
		byKey := t[o.Limit]
		if byKey == nil {
			byKey = make(map[string]Override)
			t[o.Limit] = byKey
		}
		byKey[o.Key] = o
		n++
		if !o.ExpiresAt.IsZero() && (expiry.IsZero() || o.ExpiresAt.Before(expiry)) {
			expiry = o.ExpiresAt
		}
	}
	r.copy.Store(&t)
	r.any.Store(int64(n))
	r.seen, r.expiry = v, expiry
	return r.sweepExpired(ctx)
}

// sweepExpired removes from Redis the overrides of the copy that expired;
// it requires r.mu. Their removal bumps the version, and the next refresh
// drops them from every copy.
func (r *Redis) sweepExpired(ctx context.Context) error {
	now := r.now()
	if r.expiry.IsZero() || now.Before(r.expiry) {
		return nil
	}
	var args []string
	for _, byKey := range *r.copy.Load() {
		for _, o := range byKey {
			if o.Expired(now) && len(args) < 2000 {
				args = append(args, field(o.Limit, o.Key), encode(o))
			}
		}
	}
	if len(args) == 0 {
		return nil
	}
	c, err := r.conn()
	if err != nil {
		return err
	}
	err = r.sweep.Exec(ctx, c, []string{r.hash, r.version}, args).Error()
	if err != nil {
		return fmt.Errorf("removing expired overrides: %w", err)
	}
	return nil
}

// Any implements Store, from the local copy.
func (r *Redis) Any() bool { return r.any.Load() != 0 }

// Lookup implements Store, from the local copy.
func (r *Redis) Lookup(limit, key string, now time.Time) (sluice.Policy, bool) {
	if r.any.Load() == 0 {
		return sluice.Policy{}, false
	}
	return r.copy.Load().lookup(limit, key, now)
}

// Get implements Store, reading Redis.
func (r *Redis) Get(ctx context.Context, limit, key string, now time.Time) (Override, bool, error) {
	c, err := r.conn()
	if err != nil {
		return Override{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	v, err := c.Do(ctx, c.B().Hget().Key(r.hash).Field(field(limit, key)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return Override{}, false, nil
	}
	if err != nil {
		return Override{}, false, fmt.Errorf("overrides: HGET %s: %w", r.hash, err)
	}
	o, err := decode(field(limit, key), v)
	if err != nil {
		return Override{}, false, fmt.Errorf("overrides: %w", err)
	}
	if o.Expired(now) {
		return Override{}, false, nil
	}
	return o, true, nil
}

// List implements Store, reading Redis.
func (r *Redis) List(ctx context.Context, limit string, now time.Time) ([]Override, error) {
	c, err := r.conn()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	m, err := c.Do(ctx, c.B().Hgetall().Key(r.hash).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("overrides: HGETALL %s: %w", r.hash, err)
	}
	t := make(table)
	for f, v := range m {
		o, err := decode(f, v)
		if err != nil || (limit != "" && o.Limit != limit) {
			continue
		}
		if t[o.Limit] == nil {
			t[o.Limit] = make(map[string]Override)
		}
		t[o.Limit][o.Key] = o
	}
	return t.list(limit, now), nil
}

// Put implements Store; the change applies to this instance's copy before
// Put returns, and to the others' at their next refresh.
func (r *Redis) Put(ctx context.Context, o Override, now time.Time) (*Override, error) {
	if err := check(o); err != nil {
		return nil, err
	}
	c, err := r.conn()
	if err != nil {
		return nil, err
	}
	f := field(o.Limit, o.Key)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	old, err := r.put.Exec(cctx, c, []string{r.hash, r.version},
		[]string{f, encode(o), fmt.Sprint(MaxOverrides), fmt.Sprint(now.UnixMilli())}).ToString()
	cancel()
	if err != nil && !rueidis.IsRedisNil(err) {
		if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(re.Error(), "overrides full") {
			return nil, ErrFull
		}
		return nil, fmt.Errorf("overrides: setting %s: %w", f, err)
	}
	r.refresh(ctx, true)
	return previous(f, old, err, now), nil
}

// Delete implements Store, like Put.
func (r *Redis) Delete(ctx context.Context, limit, key string, now time.Time) (*Override, error) {
	c, err := r.conn()
	if err != nil {
		return nil, err
	}
	f := field(limit, key)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	old, err := r.del.Exec(cctx, c, []string{r.hash, r.version}, []string{f}).ToString()
	cancel()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("overrides: removing %s: %w", f, err)
	}
	r.refresh(ctx, true)
	return previous(f, old, err, now), nil
}

// previous decodes the value a script returned, nil when there was none
// (or it was malformed or expired).
func previous(field, value string, err error, now time.Time) *Override {
	if err != nil {
		return nil
	}
	o, derr := decode(field, value)
	if derr != nil || o.Expired(now) {
		return nil
	}
	return &o
}

// field is the hash field of an override: the limit's name, a colon, and
// the key. A '%' or ':' in the name is written %25 or %3A, so that the
// first colon ends the name: the limits of the configuration have
// neither, Envoy's descriptors ("envoy:edge.api_key") may.
func field(limit, key string) string { return limitEscaper.Replace(limit) + ":" + key }

var (
	limitEscaper   = strings.NewReplacer("%", "%25", ":", "%3A")
	limitUnescaper = strings.NewReplacer("%3A", ":", "%25", "%")
)

// record is the JSON value of an override in Redis.
type record struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	PeriodUS  int64  `json:"period_us"`
	// Calendar, TimeZone and WeekStartsSunday are a calendar policy's
	// (then PeriodUS is 0).
	Calendar         string `json:"calendar,omitempty"`
	TimeZone         string `json:"time_zone,omitempty"`
	WeekStartsSunday bool   `json:"week_starts_sunday,omitempty"`
	Burst            int64  `json:"burst,omitempty"`
	ExpiresAtMS      int64  `json:"expires_at_ms,omitempty"`
	SetBy            string `json:"set_by,omitempty"`
	SetAtMS          int64  `json:"set_at_ms,omitempty"`
}

func encode(o Override) string {
	rec := record{
		Algorithm: o.Policy.Algorithm.String(),
		Limit:     o.Policy.Limit,
		PeriodUS:  int64(o.Policy.Period / time.Microsecond),
		Burst:     o.Policy.Burst,
		SetBy:     o.SetBy,
	}
	if c := o.Policy.Calendar; c.Unit != sluice.NoCalendar {
		rec.Calendar, rec.TimeZone, rec.WeekStartsSunday = c.Unit.String(), c.Location().String(), c.WeekStartsSunday
	}
	if !o.ExpiresAt.IsZero() {
		rec.ExpiresAtMS = o.ExpiresAt.UnixMilli()
	}
	if !o.SetAt.IsZero() {
		rec.SetAtMS = o.SetAt.UnixMilli()
	}
	b, _ := json.Marshal(rec) // a struct of strings and integers
	return string(b)
}

func decode(field, value string) (Override, error) {
	limit, key, ok := strings.Cut(field, ":")
	if !ok || limit == "" || key == "" {
		return Override{}, fmt.Errorf("field %q is not limit:key", field)
	}
	limit = limitUnescaper.Replace(limit)
	var rec record
	if err := json.Unmarshal([]byte(value), &rec); err != nil {
		return Override{}, fmt.Errorf("field %q: %w", field, err)
	}
	alg, err := sluice.ParseAlgorithm(rec.Algorithm)
	if err != nil {
		return Override{}, fmt.Errorf("field %q: %w", field, err)
	}
	if alg == sluice.ConcurrencyAlgorithm {
		return Override{}, fmt.Errorf("field %q: an override cannot be a concurrency limit", field)
	}
	o := Override{
		Limit:  limit,
		Key:    key,
		Policy: sluice.Policy{Name: limit, Algorithm: alg, Limit: rec.Limit, Period: time.Duration(rec.PeriodUS) * time.Microsecond, Burst: rec.Burst},
		SetBy:  rec.SetBy,
	}
	if rec.Calendar != "" {
		u, ok := sluice.ParseCalendarUnit(rec.Calendar)
		if !ok {
			return Override{}, fmt.Errorf("field %q: unknown calendar %q", field, rec.Calendar)
		}
		loc, err := time.LoadLocation(rec.TimeZone)
		if err != nil {
			return Override{}, fmt.Errorf("field %q: %w", field, err)
		}
		o.Policy.Calendar = sluice.Calendar{Unit: u, Zone: loc, WeekStartsSunday: rec.WeekStartsSunday}
	}
	if rec.ExpiresAtMS > 0 {
		o.ExpiresAt = time.UnixMilli(rec.ExpiresAtMS)
	}
	if rec.SetAtMS > 0 {
		o.SetAt = time.UnixMilli(rec.SetAtMS)
	}
	if err := o.Policy.Validate(); err != nil {
		return Override{}, errors.Join(fmt.Errorf("field %q", field), err)
	}
	return o, nil
}
