package coresim

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// logTimeLayout is RFC 3339 with milliseconds.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// requestLog writes request lines through one buffer. Whoever writes the last
// line of a burst flushes (the waiting counter reaches zero), so under load
// many lines share one write system call, and when the server is idle every
// line reaches the file at once, with no timer or goroutine to manage.
type requestLog struct {
	waiting atomic.Int32 // writers that want mu, or hold it
	mu      sync.Mutex
	w       *bufio.Writer
}

func newRequestLog(w io.Writer) *requestLog {
	return &requestLog{w: bufio.NewWriterSize(w, 32<<10)}
}

func (l *requestLog) write(start time.Time, method, path, guid string, status int, took time.Duration) {
	l.waiting.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()

	// Format straight into the buffer's free space: no allocation per line.
	b := l.w.AvailableBuffer()
	b = start.AppendFormat(b, logTimeLayout)
	b = append(b, ' ')
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, ' ')
	b = appendLogField(b, guid)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = strconv.AppendFloat(b, float64(took)/float64(time.Millisecond), 'f', 3, 64)
	b = append(b, "ms\n"...)
	_, _ = l.w.Write(b)

	if l.waiting.Add(-1) == 0 {
		_ = l.w.Flush()
	}
}

// appendLogField appends s as one space-free token of printable ASCII, so that
// a hostile X-GUID header cannot forge a line or shift the columns: other bytes
// become '?', and the value is cut at 64 bytes.
func appendLogField(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	if len(s) > 64 {
		s = s[:64]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' {
			c = '?'
		}
		b = append(b, c)
	}
	return b
}

// statusWriter remembers the status a handler sent.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) serveLogged(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	t0 := time.Now() // monotonic, even when s.now is a fake clock
	sw := &statusWriter{ResponseWriter: w}
	s.mux.ServeHTTP(sw, r)
	took := time.Since(t0)

	guid := r.Header.Get(headerGUID)
	if guid == "" {
		// The mux has filled in the path values of the matched pattern.
		guid = r.PathValue("guid")
	}
	status := sw.status
	if status == 0 {
		status = http.StatusOK // handler wrote nothing: net/http sends 200
	}
	s.log.write(start, r.Method, r.URL.EscapedPath(), guid, status, took)
}
