package console

import "strconv"

// picture is a GUID's history drawn as lanes, one per writer (a relay
// instance, a resolve run, …), the entries left to right in time order:
// drawn when several writers took part or a late answer or conflict is
// among them, where a table hides who answered what after whom. The
// template renders it as inline SVG; every coordinate is computed here.
type picture struct {
	Width, Height int
	Lanes         []lane
	Dots          []dot
	Links         []link
}

type lane struct {
	Y     int
	Label string // the writer: command and instance
	Host  string
}

type dot struct {
	X, Y   int
	N      int
	Label  string // the state after
	Time   string
	Late   bool
	LabelY int
}

type link struct{ X1, Y1, X2, Y2 int }

const (
	laneH   = 70
	stepW   = 150
	leftPad = 230
	topPad  = 30
)

// draw returns nil when one writer made every change and nothing came
// late: the timeline table says it all.
func draw(tl []entryView) *picture {
	if len(tl) == 0 {
		return nil
	}
	laneOf := map[string]int{}
	var p picture
	late := false
	for _, e := range tl {
		if _, ok := laneOf[e.Chain]; !ok {
			laneOf[e.Chain] = len(p.Lanes)
			p.Lanes = append(p.Lanes, lane{Y: topPad + len(p.Lanes)*laneH + laneH/2, Label: e.Command + " " + e.Chain, Host: e.Host + " pid " + strconv.Itoa(e.PID)})
		}
		late = late || e.Late
	}
	if len(p.Lanes) < 2 && !late {
		return nil
	}
	for i, e := range tl {
		y := p.Lanes[laneOf[e.Chain]].Y
		d := dot{X: leftPad + i*stepW + stepW/2, Y: y, N: e.N, Label: e.After, Time: e.At.UTC().Format("15:04:05.000"), Late: e.Late, LabelY: y - 14}
		if i > 0 {
			prev := p.Dots[i-1]
			p.Links = append(p.Links, link{prev.X, prev.Y, d.X, d.Y})
		}
		p.Dots = append(p.Dots, d)
	}
	p.Width = leftPad + len(tl)*stepW + 20
	p.Height = topPad + len(p.Lanes)*laneH + 20
	return &p
}
