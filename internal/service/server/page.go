package server

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/service/metrics"
)

// The status page: one HTML file with its style and script inlined, so that
// it needs nothing from anywhere else.
var (
	//go:embed web/status.html
	pageHTML string
	//go:embed web/status.css
	pageCSS string
	//go:embed web/status.js
	pageJS string

	pageTemplate = template.Must(template.New("status").Parse(pageHTML))
)

// pageData is what the status page template shows.
type pageData struct {
	*statusJSON
	CSS         template.CSS
	JS          template.JS
	Updated     string
	StatusWord  string
	StatusClass string
	Keys        string
	LocalShare  string
	Counters    int
	Ratio       string
	Tiles       []tile
	Charts      []chart
}

type tile struct {
	Outcome, Label, Class string
	Rate                  string
	Minute                uint64
}

type chart struct {
	limitJSON
	Params string
	Max    uint64
	Total  uint64
	Area   string
	Lines  []line
	Minute []count
}

type line struct{ Outcome, Class, D string }

type count struct {
	Outcome, Label, Class string
	N                     uint64
}

// outcomeClass and outcomeLabel name the outcomes on the page.
var (
	outcomeClass = [numOutcomes]string{"allowed", "denied", "shadow", "degraded"}
	outcomeLabel = [numOutcomes]string{"allowed", "denied", "shadow denied", "degraded"}
)

// servePage answers GET / with the status page, rendered on the server so
// that it reads without JavaScript; its script then keeps it live.
func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	s := h.status(r.Context())
	d := &pageData{
		statusJSON: s,
		CSS:        template.CSS(pageCSS),
		JS:         template.JS(pageJS),
		Updated:    time.UnixMilli(s.Now).UTC().Format("15:04:05 UTC"),
		Counters:   sketchCounters,
	}
	d.StatusWord, d.StatusClass = health(s.Store)
	if s.Store.Keys != nil {
		d.Keys = groupDigits(uint64(*s.Store.Keys))
	}
	if l := s.Store.Local; l != nil {
		d.LocalShare = localShare(l)
	}
	var last10, minute [numOutcomes]uint64
	for _, l := range s.Limits {
		c := chart{limitJSON: l, Params: params(l)}
		for o, name := range metrics.Outcomes {
			vals := l.Series[name]
			for _, v := range vals {
				c.Max = max(c.Max, v)
				c.Total += v
			}
			for _, v := range vals[len(vals)-10:] {
				last10[o] += v
			}
			minute[o] += l.LastMinute[name]
			c.Minute = append(c.Minute, count{Outcome: name, Label: outcomeClass[o], Class: outcomeClass[o], N: l.LastMinute[name]})
		}
		c.Max = niceMax(c.Max)
		for o, name := range metrics.Outcomes {
			p := linePath(l.Series[name], c.Max)
			c.Lines = append(c.Lines, line{Outcome: name, Class: outcomeClass[o], D: p})
			if o == iAllowed && p != "" {
				c.Area = p + "L299,100L0,100Z"
			}
		}
		d.Charts = append(d.Charts, c)
	}
	for o, name := range metrics.Outcomes {
		t := tile{Outcome: name, Label: outcomeLabel[o], Class: outcomeClass[o], Rate: tenths(last10[o]), Minute: minute[o]}
		if last10[o] == 0 {
			t.Class += " zero"
		}
		d.Tiles = append(d.Tiles, t)
	}
	d.Ratio = "–"
	if decided := minute[iAllowed] + minute[iDenied]; decided > 0 {
		d.Ratio = tenths((minute[iDenied]*1000+decided/2)/decided) + "%"
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		h.logger.LogAttrs(r.Context(), slog.LevelError, "status page: rendering failed", slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "rendering the status page failed")
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	// The page loads nothing from elsewhere, and nothing may frame it.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// health sums up the store's state in a word for the page's header, with
// its CSS class (status.js's health does the same).
func health(s storeJSON) (word, class string) {
	switch {
	case s.Status == "partly unreachable":
		return "store partly unreachable", "warn"
	case s.Status == "unreachable" || s.Circuit == "open":
		return "store unreachable", "bad"
	case s.Circuit == "half-open":
		return "store recovering", "warn"
	}
	return "healthy", "ok"
}

// params describes a limit's numbers in a few words.
func params(l limitJSON) string {
	s := groupDigits(uint64(l.Limit)) + " per " + l.Period
	if l.Burst > 0 && l.Burst != l.Limit {
		s += ", burst " + groupDigits(uint64(l.Burst))
	}
	return s
}

// niceMax returns the smallest of 1, 2 or 5 times a power of ten that is
// at least m (and at least 1): the top of a chart's scale.
func niceMax(m uint64) uint64 {
	for p := uint64(1); ; p *= 10 {
		for _, f := range []uint64{1, 2, 5} {
			if m <= f*p {
				return f * p
			}
		}
	}
}

// linePath draws vals as an SVG path over x = 0..len(vals)−1 and y = 100
// (zero) to 0 (top), in tenths of a unit; empty when every value is 0.
func linePath(vals []uint64, top uint64) string {
	var b strings.Builder
	b.Grow(len(vals) * 9)
	any := false
	for i, v := range vals {
		any = any || v > 0
		if i == 0 {
			b.WriteByte('M')
		} else {
			b.WriteByte('L')
		}
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(',')
		b.WriteString(tenths(1000 - (v*2000+top)/(2*top)))
	}
	if !any {
		return ""
	}
	return b.String()
}

// tenths writes n/10 with one decimal when it is not whole.
func tenths(n uint64) string {
	if n%10 == 0 {
		return strconv.FormatUint(n/10, 10)
	}
	return strconv.FormatUint(n/10, 10) + "." + strconv.FormatUint(n%10, 10)
}

// groupDigits writes n with thousands separated by commas.
func groupDigits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// localShare describes the share of decisions that never reached Redis, as
// the page's script does (localShare in status.js).
func localShare(l *localJSON) string {
	return fmt.Sprintf("%.1f%% of %s decisions", 100*l.Share, groupDigits(l.Decisions))
}
