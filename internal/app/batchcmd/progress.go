package batchcmd

import (
	"fmt"
	"io"
	"strings"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/batch"
)

// Progress returns a progress callback that keeps a status line on w
// while a run goes, when w is a terminal: rows done of those selected,
// rows a second, the outcomes so far and the time left at that pace, e.g.
//
//	reprocess: 1200/2000 rows, 3140 rows/s, 0000=1195 E902=5, about 0s left
//
// It returns nil (no callback, no work) when w is not a terminal: a
// scheduler's log holds only the summary line.
func Progress(w io.Writer, label string) func(batch.Progress) {
	line := app.NewStatusLine(w)
	if !line.Enabled() {
		return nil
	}
	start := time.Now()
	return func(p batch.Progress) {
		if p.Final {
			line.Clear()
			return
		}
		line.Show(progressText(label, p, time.Since(start)), false)
	}
}

// progressText is the status line of p, elapsed into the run.
func progressText(label string, p batch.Progress, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d/%d rows", label, p.Done, p.Total)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(p.Done) / s
		fmt.Fprintf(&b, ", %.0f rows/s", rate)
	}
	sep := ", "
	p.Summary.Each(func(outcome string, n int) {
		if n == 0 || outcome == "selected" {
			return
		}
		fmt.Fprintf(&b, "%s%s=%d", sep, outcome, n)
		sep = " "
	})
	if left := p.Total - p.Done; left > 0 && rate > 0 {
		fmt.Fprintf(&b, ", about %v left", time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second))
	}
	return b.String()
}
