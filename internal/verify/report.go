package verify

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// write stores the schedule's history in dir: the schedule drawn, every
// attempt (the core's truth log is already there), the violations, and one
// HTML timeline per GUID with a violation.
func (h *history) write(dir string, s Schedule, vs []Violation) error {
	if err := writeJSON(filepath.Join(dir, "schedule.json"), s); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "attempts.jsonl"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, a := range h.attempts {
		if err := enc.Encode(a); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "violations.json"), vs); err != nil {
		return err
	}
	gs := h.byGUID()
	for _, v := range vs {
		if err := writeTimeline(filepath.Join(dir, "guid-"+v.GUID+".html"), s, gs[v.GUID], vs); err != nil {
			return err
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

type timelineRow struct {
	At    time.Time
	Until time.Time
	Who   string
	What  string
}

var timeline = template.Must(template.New("t").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>GUID {{.GUID}}</title>
<style>body{font-family:sans-serif} td{padding:2px 8px;vertical-align:top} .bad{color:#b00} .bar{background:#48c;height:10px}</style></head>
<body><h1>GUID {{.GUID}}</h1>
<p>Schedule {{.Index}} of seed {{.Seed}} ({{.Store}}). Re-run: <code>go run ./cmd/verify --seed {{.Seed}} --first {{.Index}} --schedules 1 --store {{.Store}}</code></p>
<h2>Violations</h2><ul>{{range .Violations}}<li class="bad"><b>{{.Check}}</b><ul>{{range .Events}}<li>{{.}}</li>{{end}}</ul></li>{{end}}</ul>
<h2>Every event of this GUID, in time order</h2>
<table><tr><th>time</th><th>who</th><th>what</th><th></th></tr>
{{range .Rows}}<tr><td>{{.At.Format "15:04:05.000000"}}</td><td>{{.Who}}</td><td>{{.What}}</td><td><div class="bar" style="margin-left:{{$.Offset .At}}px;width:{{$.Width .At .Until}}px"></div></td></tr>{{end}}
</table><p>{{.Row}}</p></body></html>
`))

type timelinePage struct {
	GUID       string
	Index      int
	Seed       uint64
	Store      string
	Violations []Violation
	Rows       []timelineRow
	Row        string
	t0, t1     time.Time
}

const timelineWidth = 600.0

func (p timelinePage) Offset(t time.Time) int {
	span := p.t1.Sub(p.t0)
	if span <= 0 {
		return 0
	}
	return int(timelineWidth * float64(t.Sub(p.t0)) / float64(span))
}

func (p timelinePage) Width(from, to time.Time) int {
	return max(p.Offset(to)-p.Offset(from), 2)
}

func writeTimeline(path string, s Schedule, g *guidHistory, vs []Violation) error {
	p := timelinePage{GUID: g.guid, Index: s.Index, Seed: s.Seed, Store: s.Store, Row: rowString(g.row)}
	for _, v := range vs {
		if v.GUID == g.guid {
			p.Violations = append(p.Violations, v)
		}
	}
	for _, a := range g.attempts {
		p.Rows = append(p.Rows, timelineRow{At: a.Sent, Until: a.Answered, Who: fmt.Sprintf("channel → relay%d", a.Relay), What: a.String()})
	}
	for _, e := range g.arrived {
		p.Rows = append(p.Rows, timelineRow{At: e.At, Until: e.At, Who: "core", What: truthString(e)})
	}
	for _, e := range g.posted {
		p.Rows = append(p.Rows, timelineRow{At: e.At, Until: e.At, Who: "core", What: truthString(e)})
	}
	for _, e := range g.h.truth {
		if e.Ev == "lookup" && e.GUID == g.guid {
			p.Rows = append(p.Rows, timelineRow{At: e.At, Until: e.At, Who: "core", What: truthString(e)})
		}
	}
	for _, e := range g.h.entries[g.guid] {
		// Stamped by the database's clock, which a schedule may shift.
		p.Rows = append(p.Rows, timelineRow{At: e.At, Until: e.At, Who: "ledger history (database clock)", What: entryString(e)})
	}
	for _, r := range g.h.reprocess {
		p.Rows = append(p.Rows, timelineRow{At: r.from, Until: r.to, Who: "reprocess", What: "a reprocess run"})
	}
	sort.Slice(p.Rows, func(i, j int) bool { return p.Rows[i].At.Before(p.Rows[j].At) })
	if len(p.Rows) > 0 {
		p.t0, p.t1 = p.Rows[0].At, p.Rows[0].Until
		for _, r := range p.Rows {
			if r.Until.After(p.t1) {
				p.t1 = r.Until
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := timeline.Execute(f, p); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
