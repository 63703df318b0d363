package server

import (
	"sync"
	"time"
)

// storeErrorLogEvery is how often a store failure is logged while the
// store keeps failing: every failure is counted in the metrics, but one
// line per interval keeps a dead backend from flooding the log with a line
// per request.
const storeErrorLogEvery = 10 * time.Second

// logLimiter lets one log line through per interval and counts the lines
// it held back. The zero value lets the first line through. It is safe for
// concurrent use.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now and, if so, how many
// were held back since the last one.
func (l *logLimiter) allow(now time.Time, every time.Duration) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.suppressed++
		return 0, false
	}
	suppressed, l.suppressed, l.last = l.suppressed, 0, now
	return suppressed, true
}
