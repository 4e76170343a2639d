package app

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// IsTerminal reports whether w is a terminal, where a status line is
// welcome; in a pipe, a file, a scheduler's log or CI it would be noise.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// redrawEvery bounds how often a status line is redrawn.
const redrawEvery = 100 * time.Millisecond

// StatusLine is one line redrawn in place on a terminal while a long run
// goes on, and erased at its end. Elsewhere it writes nothing, so that logs
// hold only the run's summary.
type StatusLine struct {
	mu    sync.Mutex
	w     io.Writer // nil: not a terminal
	last  time.Time
	drawn bool
}

// NewStatusLine draws on w when w is a terminal.
func NewStatusLine(w io.Writer) *StatusLine {
	if !IsTerminal(w) {
		w = nil
	}
	return &StatusLine{w: w}
}

// Enabled reports whether the line is drawn at all.
func (s *StatusLine) Enabled() bool { return s != nil && s.w != nil }

// Show redraws the line with text, at most ten times a second unless
// final (the last state of a run is always shown).
func (s *StatusLine) Show(text string, final bool) {
	if !s.Enabled() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !final && time.Since(s.last) < redrawEvery {
		return
	}
	s.last = time.Now()
	fmt.Fprintf(s.w, "\r%s\x1b[K", text)
	s.drawn = true
}

// Clear erases the line, leaving the terminal as it was.
func (s *StatusLine) Clear() {
	if !s.Enabled() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drawn {
		fmt.Fprint(s.w, "\r\x1b[K")
		s.drawn = false
	}
}
