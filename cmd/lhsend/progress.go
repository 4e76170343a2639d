package main

import (
	"fmt"
	"strings"

	"lhrelay/internal/channel"
)

// barWidth is the progress bar's length in characters.
const barWidth = 30

// progressText is a load run's status line: a bar, counts, rate, failures.
func progressText(p channel.Progress) string {
	filled := 0
	if p.Total > 0 {
		filled = barWidth * p.Done / p.Total
	}
	rate := 0.0
	if s := p.Elapsed.Seconds(); s > 0 {
		rate = float64(p.Done) / s
	}
	return fmt.Sprintf("[%s%s] %d/%d %3d%%  %.0f tx/s  failed %d",
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled),
		p.Done, p.Total, 100*p.Done/max(p.Total, 1), rate, p.Errors)
}
