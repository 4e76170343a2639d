package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"lhrelay/internal/channel"
)

// isTerminal reports whether w is a terminal, where a progress bar is
// welcome; in a pipe, a file or a CI log it would only be noise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// barWidth is the progress bar's length in characters.
const barWidth = 30

// progressBar redraws one status line of a load run in place.
type progressBar struct {
	w     io.Writer
	drawn bool
}

func (b *progressBar) update(p channel.Progress) {
	filled := 0
	if p.Total > 0 {
		filled = barWidth * p.Done / p.Total
	}
	rate := 0.0
	if s := p.Elapsed.Seconds(); s > 0 {
		rate = float64(p.Done) / s
	}
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d %3d%%  %.0f tx/s  failed %d\x1b[K",
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled),
		p.Done, p.Total, 100*p.Done/max(p.Total, 1), rate, p.Errors)
	b.drawn = true
}

// clear erases the status line, leaving the terminal as it was.
func (b *progressBar) clear() {
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.drawn = false
	}
}
