package admit

import "time"

// SetClock makes l read the time from now instead of time.Now.
func SetClock(l *Limiter, now func() time.Time) { l.now = now }

// GateLen is the number of calls waiting in Sending.
func GateLen(l *Limiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gate.Len()
}
