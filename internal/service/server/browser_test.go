package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/memstore"
)

// The browser tests drive the status page in a real headless Chromium
// (Debian's chromium package, which scripts/deps.sh installs). They skip
// when it is missing, unless SLUICE_REQUIRE_BROWSER=1 (as in CI).
//
// With SLUICE_SCREENSHOT=FILE.png, TestStatusPageBrowser first plays five
// minutes of made-up traffic through the handler, so that every chart is
// full, and saves screenshots of the page to FILE, in the light colour
// scheme, and to FILE-dark.png (make screenshot writes
// docs/images/status.png and status-dark.png).

const pageYAML = `
limits:
  api-key: {algorithm: token_bucket, limit: 20, period: 1s, burst: 40}
  per-ip: {algorithm: sliding_window, limit: 300, period: 1m}
  login: {algorithm: fixed_window, limit: 5, period: 1m}
  search: {algorithm: gcra, limit: 5, period: 1s, shadow: true}
`

// chromium returns the path of the Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SLUICE_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("SLUICE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("SLUICE_REQUIRE_BROWSER=1 but there is no Chromium at %s: %v", path, err)
		}
		t.Skipf("no Chromium at %s: install it with `apt-get install chromium chromium-driver` (scripts/deps.sh does), or set SLUICE_CHROMIUM", path)
	}
	return path
}

// browser starts a headless Chromium and returns a context for its first
// tab; it is closed when the test ends.
func browser(t *testing.T, script bool) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	if !script {
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}))
		if err != nil {
			t.Fatalf("disabling JavaScript: %v", err)
		}
	}
	return ctx
}

// browse runs browser actions, failing the test on an error.
func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// inBrowser runs one browser action that returns a value.
func inBrowser[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pageText returns the text of the first element sel selects.
func pageText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return inBrowser(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

// pageAttr returns an attribute of the first element sel selects.
func pageAttr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	return inBrowser(t, ctx, chromedp.AttributeValue(chromedp.CSS(sel), name)).Value
}

// liveClock is the clock of the handler and store under the browser test:
// it can be set to times in the past (to play made-up traffic quickly),
// then follows the real clock.
type liveClock struct {
	mu sync.Mutex
	at time.Time // zero: the real time
}

func (c *liveClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return time.Now()
	}
	return c.at
}

func (c *liveClock) set(t time.Time) {
	c.mu.Lock()
	c.at = t
	c.mu.Unlock()
}

// pageServer is a Handler with its public and admin endpoints on two test
// servers.
type pageServer struct {
	h             *Handler
	clock         *liveClock
	public, admin *httptest.Server
}

func newPageServer(t *testing.T) *pageServer {
	t.Helper()
	c := &liveClock{}
	store := memstore.New(memstore.Options{Now: c.Now})
	cfg, err := config.Parse("/etc/sluice/sluice.yaml", []byte(pageYAML), config.Formats{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg, store, Options{Registry: prometheus.NewRegistry(), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := &pageServer{h: h, clock: c, public: httptest.NewServer(h.Public()), admin: httptest.NewServer(h.Admin())}
	t.Cleanup(s.public.Close)
	t.Cleanup(s.admin.Close)
	return s
}

// check sends one decision request to the public server.
func (s *pageServer) check(t *testing.T, limit, key string) {
	t.Helper()
	resp, err := http.Post(s.public.URL+"/v1/check", "application/json",
		strings.NewReader(fmt.Sprintf(`{"limit":%q,"key":%q}`, limit, key)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/check: %s", resp.Status)
	}
}

func TestStatusPageBrowser(t *testing.T) {
	shot := os.Getenv("SLUICE_SCREENSHOT")
	s := newPageServer(t)
	if shot != "" {
		playTraffic(t, s)
	}
	ctx := browser(t, true)

	browse(t, ctx, "loading the page", chromedp.Navigate(s.admin.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#live`)))
	names := inBrowser(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.card[data-limit]')).map(c => c.dataset.limit)`))
	if want := []string{"api-key", "login", "per-ip", "search"}; !slices.Equal(names, want) {
		t.Errorf("the page shows limits %v, want %v", names, want)
	}
	if got, want := pageText(t, ctx, `.card[data-limit="api-key"] .params`), "20 per 1s, burst 40"; got != want {
		t.Errorf("api-key's parameters read %q, want %q", got, want)
	}

	// The chart moves once traffic comes: the right end of its denied
	// line rises with the denials made through the public listener, and
	// its total grows.
	const chartSVG = `.card[data-limit="api-key"] svg`
	const deniedPath = `.card[data-limit="api-key"] path[data-series="denied"]`
	before := atoi(pageAttr(t, ctx, chartSVG, "data-total"))
	if d := pageAttr(t, ctx, deniedPath, "d"); shot == "" && d != "" {
		t.Fatalf("before any traffic the denied line is %q, want none", d)
	}
	for range 60 {
		s.check(t, "api-key", "mallory")
	}
	var total int
	var denied string
	defer func() {
		if t.Failed() {
			t.Logf("the api-key chart last showed data-total %d (before: %d) and denied line %q", total, before, denied)
		}
	}()
	testkit.WaitFor(t, 15*time.Second, "the api-key chart to move after 60 decisions", func() bool {
		total = atoi(pageAttr(t, ctx, chartSVG, "data-total"))
		denied = pageAttr(t, ctx, deniedPath, "d")
		return total != before && recentRise(denied, 5)
	})
	if got := pageText(t, ctx, `#live`); got != "live" {
		t.Errorf("#live reads %q, want live", got)
	}
	if got := pageText(t, ctx, `#denied tbody`); !strings.Contains(got, "mallory") {
		t.Errorf("the most denied keys read %q, want mallory among them", got)
	}

	// Explain, from the form.
	browse(t, ctx, "explaining a key",
		chromedp.SetValue(chromedp.CSS(`#explain select`), "api-key"),
		chromedp.SendKeys(chromedp.CSS(`#explain input[name=key]`), "mallory"),
		chromedp.Click(chromedp.CSS(`#explain button`)),
		chromedp.WaitVisible(chromedp.CSS(`#explain-out p`)),
	)
	if got := pageText(t, ctx, `#explain-out p`); !strings.Contains(got, "The bucket holds") || !strings.Contains(got, "A request of cost 1 would be") {
		t.Errorf("the explanation reads %q, want the bucket's content and a decision", got)
	}

	if shot != "" {
		// Wait for the next poll, so the picture shows the whole
		// history, without the explanation.
		updated := pageAttr(t, ctx, `#main`, "data-updated")
		testkit.WaitFor(t, 5*time.Second, "the page's next poll", func() bool {
			return pageAttr(t, ctx, `#main`, "data-updated") != updated
		})
		inBrowser(t, ctx, chromedp.Evaluate[bool](`document.getElementById('explain-out').hidden = true`))
		// A viewport as tall as the page, so that the sticky header stays
		// at the top of the picture.
		height := inBrowser(t, ctx, chromedp.Evaluate[int64](`document.documentElement.scrollHeight`))
		browse(t, ctx, "sizing the viewport", chromedp.EmulateViewport(1280, height))
		for _, scheme := range []string{"light", "dark"} {
			browse(t, ctx, "choosing the colour scheme", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
					Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
				})
				return err
			}))
			png := inBrowser(t, ctx, chromedp.FullScreenshot(100))
			file := shot
			if scheme == "dark" {
				file = strings.TrimSuffix(shot, ".png") + "-dark.png"
			}
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s (%d bytes)", file, len(png))
		}
	}
}

// TestStatusPageNoScript loads the page with JavaScript disabled: the
// limits, the counts and the denied keys are there, rendered by the
// server.
func TestStatusPageNoScript(t *testing.T) {
	s := newPageServer(t)
	at := time.Now().Truncate(time.Second).Add(50 * time.Millisecond)
	s.clock.set(at)
	for range 10 {
		s.check(t, "login", "eve@example.com")
	}
	// The last minute's counts are of whole seconds: move on past this one
	// so that they include the checks above.
	s.clock.set(at.Add(time.Second))
	ctx := browser(t, false)
	browse(t, ctx, "loading the page", chromedp.Navigate(s.admin.URL+"/"), chromedp.WaitReady(chromedp.CSS(`#main`)))
	names := inBrowser(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.card[data-limit] h3')).map(h => h.textContent)`))
	if want := []string{"api-key", "login", "per-ip", "search"}; !slices.Equal(names, want) {
		t.Errorf("the page shows limits %v, want %v", names, want)
	}
	if !inBrowser(t, ctx, chromedp.Evaluate[bool](`document.getElementById('live').hidden`)) {
		t.Error("#live is shown, so the script ran; want JavaScript off")
	}
	if got := pageText(t, ctx, `#denied tbody`); !strings.Contains(got, "eve@example.com") {
		t.Errorf("the most denied keys read %q, want eve@example.com", got)
	}
	if got := pageText(t, ctx, `.card[data-limit="login"] [data-minute="denied"]`); got != "5" {
		t.Errorf("login's denials in the last minute read %q, want 5", got)
	}
	// The decisions of the last whole second are not drawn until it is
	// over too; the server-rendered chart of a second later has them.
	s.clock.set(at.Add(2 * time.Second))
	browse(t, ctx, "reloading the page", chromedp.Reload(), chromedp.WaitReady(chromedp.CSS(`#main`)))
	if pageAttr(t, ctx, `.card[data-limit="login"] path[data-series="allowed"]`, "d") == "" {
		t.Error("login's allowed line is empty in the server-rendered chart, want the 5 allowed decisions drawn")
	}
}

// recentRise reports whether any of the last n points of an SVG path of
// the page's charts lies above the baseline (y = 100).
func recentRise(d string, n int) bool {
	pts := strings.FieldsFunc(d, func(r rune) bool { return r == 'M' || r == 'L' })
	for _, p := range pts[max(len(pts)-n, 0):] {
		if _, y, ok := strings.Cut(p, ","); ok && y != "100" {
			return true
		}
	}
	return false
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// playTraffic plays five minutes of made-up traffic through the handler on
// a clock that runs from five minutes ago to now, so that the screenshot
// shows full charts: steady use, a burst on one API key, an abusive IP, a
// password guesser, and a dry-run limit that would deny.
func playTraffic(t *testing.T, s *pageServer) {
	t.Helper()
	start := time.Now().Add(-statusSeconds * time.Second).Truncate(time.Second)
	post := func(limit, key string) {
		req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(fmt.Sprintf(`{"limit":%q,"key":%q}`, limit, key)))
		s.h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for sec := range statusSeconds {
		at := start.Add(time.Duration(sec) * time.Second)
		type burst struct {
			limit, key string
			n          int
		}
		wave := 8 + (sec/7)%5 // a little variation
		bursts := []burst{
			{"api-key", "key-4f2a", wave},
			{"api-key", "key-91c0", 6 + (sec/11)%4},
			{"per-ip", "203.0.113.7", 2},
			{"per-ip", "198.51.100.23", 3},
			{"search", "198.51.100.23", 4 + (sec/13)%4},
		}
		if sec >= 95 && sec < 125 {
			bursts = append(bursts, burst{"api-key", "key-7be3", 45}) // a client in a loop
		}
		if sec >= 170 && sec < 245 {
			bursts = append(bursts, burst{"per-ip", "192.0.2.66", 9}) // a scraper
		}
		if sec >= 40 && sec < 230 {
			bursts = append(bursts, burst{"login", "admin@example.com", 2}) // a password guesser
		}
		if sec%15 == 0 {
			bursts = append(bursts, burst{"login", fmt.Sprintf("user%d@example.com", sec%4), 1})
		}
		total := 0
		for _, b := range bursts {
			total += b.n
		}
		i := 0
		for round := 0; i < total; round++ {
			for _, b := range bursts {
				if round < b.n {
					s.clock.set(at.Add(time.Duration(i) * time.Second / time.Duration(total)))
					post(b.limit, b.key)
					i++
				}
			}
		}
	}
	s.clock.set(time.Time{})
}
