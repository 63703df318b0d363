package envoycompat

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// fixture returns the YAML file testdata/DIR/NAME.yaml.
func fixture(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Time bounds of the suite.
const (
	waitTimeout = 20 * time.Second
	stopTimeout = 15 * time.Second
	callTimeout = 10 * time.Second
)

// copies is how many copies of each case's domain the configuration
// holds: an attempt that crosses a window boundary is run again on a
// fresh copy, whose counters are untouched.
const copies = 4

// server is a `sluice serve` process and a gRPC client of its rate limit
// service.
type server struct {
	*testkit.Proc
	log        *testkit.Log
	http, grpc string
	config     string // the configuration file
	client     rlsv3.RateLimitServiceClient
	// counting reports a server that counts refused hits, as the
	// reference does by default (compatCase.counting).
	counting bool
}

// startServer writes cfg to a file and runs `sluice serve` on it.
func startServer(t *testing.T, name, cfg string) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{log: &testkit.Log{}, config: filepath.Join(dir, "sluice.yaml")}
	testkit.WriteFile(t, s.config, cfg)
	ready := filepath.Join(dir, "ready.json")
	cmd := exec.Command(testkit.Sluice(t), "serve", "--config", s.config, "--ready-file", ready, "--watch", "0")
	s.start(t, name, cmd, ready)
	return s
}

// start runs cmd, a `sluice serve` that writes its addresses to the
// ready file, with its output in s.log; it waits until the service is
// ready and connects s.client to its gRPC address. The process is
// stopped when the test ends.
func (s *server) start(t *testing.T, name string, cmd *exec.Cmd, ready string) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	s.Proc = testkit.StartProc(t, name, cmd)
	s.StopWhenDone(t, stopTimeout, s.log)
	r := testkit.WaitReady(t, name, ready, waitTimeout, s.Ended, s.log)
	s.http, s.grpc = r.HTTP, r.GRPC
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.client = rlsv3.NewRateLimitServiceClient(conn)
}

// reload writes cfg over the configuration file and sends SIGHUP.
func (s *server) reload(t *testing.T, cfg string) {
	t.Helper()
	testkit.WriteFile(t, s.config, cfg)
	if err := s.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// ask sends one request and returns the answer with the client's times
// just before and just after the call.
func (s *server) ask(req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, before, after time.Time, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	before = time.Now()
	resp, err = s.client.ShouldRateLimit(ctx, req)
	after = time.Now()
	return resp, before, after, err
}

// The units, as go-control-plane names them.
const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	week   = rlsv3.RateLimitResponse_RateLimit_WEEK
	month  = rlsv3.RateLimitResponse_RateLimit_MONTH
	year   = rlsv3.RateLimitResponse_RateLimit_YEAR
)

// unitLen is the length of a unit in envoyproxy/ratelimit: a month is 30
// days and a year 365.
var unitLen = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	second: time.Second,
	minute: time.Minute,
	hour:   time.Hour,
	day:    24 * time.Hour,
	week:   7 * 24 * time.Hour,
	month:  30 * 24 * time.Hour,
	year:   365 * 24 * time.Hour,
}

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// status is the expected status of one descriptor.
type status struct {
	code rlsv3.RateLimitResponse_Code
	rpu  uint32
	unit rlsv3.RateLimitResponse_RateLimit_Unit // 0: no current_limit
	mult uint32                                 // unit_multiplier, 0 for 1
	name string                                 // current_limit.name
	rem  uint32
	// noReset: no duration_until_reset (otherwise, with a unit, one that
	// ends the current window of the limit, aligned to multiples of its
	// period since the Unix epoch).
	noReset bool
	// zeroReset: a duration_until_reset of 0 (a limit reported, not
	// charged, whose window has no count yet).
	zeroReset bool
}

// ok is an OK status under rpu per unit with rem left.
func ok(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, rem uint32) status {
	return status{code: OK, rpu: rpu, unit: unit, rem: rem}
}

// over is an OVER_LIMIT status under rpu per unit: nothing left.
func over(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) status {
	return status{code: OVER, rpu: rpu, unit: unit}
}

// shadowOver is a descriptor in shadow mode that is over: OK, nothing left.
func shadowOver(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) status {
	return status{code: OK, rpu: rpu, unit: unit}
}

// none is the status of a descriptor without a limit.
var none = status{code: OK}

// unlimited is the status of an unlimited descriptor.
var unlimited = status{code: OK, rem: math.MaxUint32}

// call is one request of a sequence and its expected answer.
type call struct {
	domain   string // "" for the case's domain
	noDomain bool   // send no domain at all
	descs    []*rlscommon.RateLimitDescriptor
	hits     uint32 // the request's hits_addend
	overall  rlsv3.RateLimitResponse_Code
	want     []status
	// err, when set, is the gRPC error the call must fail with (its code's
	// name, such as "InvalidArgument").
	err string
}

// d builds a descriptor from key, value pairs.
var d = testkit.Descriptor

// dh is d with the descriptor's own hits_addend.
func dh(hits uint64, kv ...string) *rlscommon.RateLimitDescriptor {
	out := d(kv...)
	out.HitsAddend = wrapperspb.UInt64(hits)
	return out
}

// dl is d with Envoy's limit override.
func dl(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, kv ...string) *rlscommon.RateLimitDescriptor {
	out := d(kv...)
	out.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typeUnit(unit)}
	return out
}

// req is a call of descs expecting overall and want.
func req(overall rlsv3.RateLimitResponse_Code, descs []*rlscommon.RateLimitDescriptor, want ...status) call {
	return call{descs: descs, overall: overall, want: want}
}

// one is a call of a single descriptor.
func one(desc *rlscommon.RateLimitDescriptor, want status) call {
	overall := OK
	if want.code == OVER {
		overall = OVER
	}
	return call{descs: []*rlscommon.RateLimitDescriptor{desc}, overall: overall, want: []status{want}}
}

// ds lists descriptors.
func ds(descs ...*rlscommon.RateLimitDescriptor) []*rlscommon.RateLimitDescriptor { return descs }

// repeat is n times c.
func repeat(n int, c call) []call {
	out := make([]call, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// countdown is the calls of one descriptor against a fresh limit of rpu
// per unit: rpu admitted, each with one fewer left, then one refused.
func countdown(desc *rlscommon.RateLimitDescriptor, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) []call {
	var out []call
	for i := uint32(1); i <= rpu; i++ {
		out = append(out, one(desc, ok(rpu, unit, rpu-i)))
	}
	return append(out, one(desc, over(rpu, unit)))
}

// seq joins call lists.
func seq(parts ...[]call) []call {
	var out []call
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// check compares one answer with its expectation and returns what differs.
func (c call) check(resp *rlsv3.RateLimitResponse, before, after time.Time) []string {
	var bad []string
	if resp.GetOverallCode() != c.overall {
		bad = append(bad, fmt.Sprintf("overall_code = %v, want %v", resp.GetOverallCode(), c.overall))
	}
	if len(resp.GetStatuses()) != len(c.want) {
		return append(bad, fmt.Sprintf("%d statuses, want %d", len(resp.GetStatuses()), len(c.want)))
	}
	for i, w := range c.want {
		for _, p := range w.check(resp.Statuses[i], before, after) {
			bad = append(bad, fmt.Sprintf("status %d: %s", i, p))
		}
	}
	return bad
}

// suiteStart is when the test binary started, before any sluice serve
// it runs.
var suiteStart = time.Now()

func (w status) check(got *rlsv3.RateLimitResponse_DescriptorStatus, before, after time.Time) []string {
	var bad []string
	if got.GetCode() != w.code {
		bad = append(bad, fmt.Sprintf("code = %v, want %v", got.GetCode(), w.code))
	}
	if got.GetLimitRemaining() != w.rem {
		bad = append(bad, fmt.Sprintf("limit_remaining = %d, want %d", got.GetLimitRemaining(), w.rem))
	}
	cl := got.GetCurrentLimit()
	if w.unit == 0 {
		if cl != nil {
			bad = append(bad, fmt.Sprintf("current_limit = %v, want none", cl))
		}
		if got.GetDurationUntilReset() != nil {
			bad = append(bad, fmt.Sprintf("duration_until_reset = %v, want none", got.GetDurationUntilReset().AsDuration()))
		}
		return bad
	}
	mult := max(w.mult, 1)
	if cl.GetRequestsPerUnit() != w.rpu || cl.GetUnit() != w.unit || max(cl.GetUnitMultiplier().GetValue(), 1) != mult || cl.GetName() != w.name {
		bad = append(bad, fmt.Sprintf("current_limit = {%v}, want %d per %d %v named %q", cl, w.rpu, mult, w.unit, w.name))
	}
	if w.noReset {
		if got.GetDurationUntilReset() != nil {
			bad = append(bad, fmt.Sprintf("duration_until_reset = %v, want none", got.GetDurationUntilReset().AsDuration()))
		}
		return bad
	}
	if got.GetDurationUntilReset() == nil {
		return append(bad, "no duration_until_reset")
	}
	if w.zeroReset {
		if r := got.GetDurationUntilReset().AsDuration(); r != 0 {
			bad = append(bad, fmt.Sprintf("duration_until_reset = %v, want 0", r))
		}
		return bad
	}
	// The window of the limit is aligned to multiples of its period since
	// the Unix epoch, as envoyproxy/ratelimit's windows are: the reset
	// is the end of the window the call fell in (the reference gives it
	// in whole seconds, rounded up; Sluice to the microsecond).
	period := unitLen[w.unit] * time.Duration(mult)
	end := windowEnd(before, period)
	// The memory store's clock is the wall clock at its start plus the
	// monotonic clock since: a step of the wall clock since then moves
	// the two apart by the step, which the bounds allow for.
	now := time.Now()
	step := (now.Round(0).Sub(suiteStart.Round(0)) - now.Sub(suiteStart)).Abs()
	// 5 ms below: a loaded machine's Redis has answered 2.9 ms after the
	// call's end as this process read it.
	lo, hi := end.Sub(after)-5*time.Millisecond-step, end.Sub(before)+2*time.Millisecond+step
	if r := got.GetDurationUntilReset().AsDuration(); r < lo || r > hi {
		bad = append(bad, fmt.Sprintf("duration_until_reset = %v, want within [%v, %v] (the end of the window at %v)", r, lo, hi, end.UTC()))
	}
	return bad
}

// windowEnd returns the end of the window of period p that t is in.
func windowEnd(t time.Time, p time.Duration) time.Time {
	us := t.UnixMicro()
	pu := p.Microseconds()
	return time.UnixMicro((us/pu + 1) * pu)
}

// typeUnit converts a unit of the response to the override's type (the
// two enums share their numbers).
func typeUnit(u rlsv3.RateLimitResponse_RateLimit_Unit) typev3.RateLimitUnit {
	return typev3.RateLimitUnit(u)
}
