package logcut

import (
	"sync"
	"time"
)

// Limit lets one kind of log line through at most N times in each window
// of Every: a line logged for every refused request (a wrong token, a page
// in a browser) is one per request, so a client sending refusals as fast
// as it can would otherwise write the server's log as fast as it sends. The
// first line through after a window in which lines were held back says
// how many (Held). The zero Limit lets 10 lines through every 10 s.
type Limit struct {
	N     int
	Every time.Duration

	mu      sync.Mutex
	start   time.Time // the window's
	through int       // lines let through in it
	held    int64     // lines held back since the last let through
}

// Allow reports whether a line may be logged now, and, when it may, how
// many were held back before it.
func (l *Limit) Allow() (ok bool, held int64) {
	n, every := l.N, l.Every
	if n <= 0 {
		n = 10
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= every {
		l.start, l.through = now, 0
	}
	if l.through >= n {
		l.held++
		return false, 0
	}
	l.through++
	held, l.held = l.held, 0
	return true, held
}
