package channel

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"lhrelay/internal/generated"
)

// Result is the outcome of one frame of a load run.
type Result struct {
	GUID      string
	Sent      bool // written to a connection
	Answered  bool // a valid answer came back (it may still be a mismatch)
	Malformed bool // something came back that is not a valid answer
	Mismatch  bool // the answer's GUID or TX_CODE is not the request's
	Duplicate bool // the frame reused an earlier frame's GUID and body
	Code      generated.RspCode
	// Latency runs from writing the frame to having read the whole answer;
	// set when Answered or Malformed.
	Latency time.Duration
	Err     error
}

// Latency sums up the answer times of a load run. Percentiles are nearest
// rank: P90 is the smallest latency that at least 90% of answers did not
// exceed.
type Latency struct {
	P50, P90, P99, Max, Mean time.Duration
}

// Summary is the outcome of a load run.
type Summary struct {
	Tx          string
	Addr        string
	Concurrency int // connections used

	Frames     int // frames planned
	Sent       int // frames written to a connection
	Answered   int // frames with a valid answer
	Duplicates int // frames that reused an earlier GUID
	Errors     int // frames without an answer: connection failures, timeouts
	Malformed  int // frames whose answer was not a valid response
	Mismatches int // answered frames whose answer named another GUID or TX_CODE
	// Codes counts the answered frames by response code.
	Codes map[generated.RspCode]int
	// CodeLatency is the answer time of the frames answered with each code
	// (how fast a refusal such as E902 comes back, beside a posting).
	CodeLatency map[generated.RspCode]Latency
	// GUIDs counts the distinct GUIDs by their final code: the answer to
	// the last frame that carried the GUID (a duplicate resends it). It
	// is what a back office sees: how many transfers were posted, refused,
	// left unknown (E901) or never sent (E902).
	GUIDs map[generated.RspCode]int

	Elapsed  time.Duration
	TxPerSec float64 // answered frames per second of Elapsed
	Latency  Latency

	// FirstError is the first failure of the run, for the operator to start from.
	FirstError string
}

// OK reports whether every planned frame got a valid answer to its own
// request.
func (s Summary) OK() bool {
	return s.Frames > 0 && s.Answered == s.Frames && s.Mismatches == 0 && s.Malformed == 0
}

// Summarize adds up the results of a run that took elapsed.
func Summarize(results []Result, elapsed time.Duration) Summary {
	s := Summary{Frames: len(results), Elapsed: elapsed, Codes: make(map[generated.RspCode]int),
		CodeLatency: make(map[generated.RspCode]Latency), GUIDs: make(map[generated.RspCode]int)}
	var lat []time.Duration
	byCode := map[generated.RspCode][]time.Duration{}
	final := map[string]generated.RspCode{} // by GUID, in frame order
	for _, r := range results {
		if r.Answered && r.GUID != "" {
			final[r.GUID] = r.Code
		}
		if r.Sent {
			s.Sent++
		}
		if r.Duplicate {
			s.Duplicates++
		}
		switch {
		case r.Answered:
			s.Answered++
			s.Codes[r.Code]++
			if r.Mismatch {
				s.Mismatches++
			}
			lat = append(lat, r.Latency)
			byCode[r.Code] = append(byCode[r.Code], r.Latency)
		case r.Malformed:
			s.Malformed++
		case r.Err != nil:
			s.Errors++
		}
		if r.Err != nil && s.FirstError == "" {
			s.FirstError = r.Err.Error()
		}
	}
	if elapsed > 0 {
		s.TxPerSec = float64(s.Answered) / elapsed.Seconds()
	}
	s.Latency = latencyOf(lat)
	for c, l := range byCode {
		s.CodeLatency[c] = latencyOf(l)
	}
	for _, c := range final {
		s.GUIDs[c]++
	}
	return s
}

func latencyOf(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return Latency{
		P50:  percentile(lat, 50),
		P90:  percentile(lat, 90),
		P99:  percentile(lat, 99),
		Max:  lat[len(lat)-1],
		Mean: sum / time.Duration(len(lat)),
	}
}

// percentile is the nearest-rank p-th percentile of sorted, non-empty data.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted))/100)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// codeOrder lists the codes of s in the order of the response code table,
// then any others.
func (s Summary) codeOrder() []generated.RspCode { return codesOf(s.Codes) }

// codesOf lists the codes counted in n in the order of the response code
// table, then any others.
func codesOf(n map[generated.RspCode]int) []generated.RspCode {
	var out []generated.RspCode
	for _, src := range generated.Sources() {
		if c := src.Code(); n[c] > 0 && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(n)) {
		if !slices.Contains(out, c) && n[c] > 0 {
			out = append(out, c)
		}
	}
	return out
}

// ms renders a duration in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// WriteText prints the summary for an operator.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	conns := "connections"
	if s.Concurrency == 1 {
		conns = "connection"
	}
	fmt.Fprintf(tw, "load\t%d × %s to %s over %d %s in %s\n",
		s.Frames, s.Tx, s.Addr, s.Concurrency, conns, s.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "answered\t%d of %d (sent %d, duplicate GUIDs %d)\n", s.Answered, s.Frames, s.Sent, s.Duplicates)
	fmt.Fprintf(tw, "throughput\t%.1f tx/s\n", s.TxPerSec)
	fmt.Fprintf(tw, "latency\tp50 %s  p90 %s  p99 %s  max %s  mean %s\n",
		ms(s.Latency.P50), ms(s.Latency.P90), ms(s.Latency.P99), ms(s.Latency.Max), ms(s.Latency.Mean))
	label := "codes"
	for _, c := range s.codeOrder() {
		l := s.CodeLatency[c]
		fmt.Fprintf(tw, "%s\t%s %6d  p50 %s  p99 %s  %s\n", label, c, s.Codes[c], ms(l.P50), ms(l.P99), c.Meaning())
		label = ""
	}
	if label != "" {
		fmt.Fprintf(tw, "codes\tnone\n")
	}
	label = "GUIDs by final code"
	for _, c := range codesOf(s.GUIDs) {
		fmt.Fprintf(tw, "%s\t%s %6d\n", label, c, s.GUIDs[c])
		label = ""
	}
	fmt.Fprintf(tw, "mismatches\t%d\n", s.Mismatches)
	fmt.Fprintf(tw, "malformed\t%d\n", s.Malformed)
	fmt.Fprintf(tw, "errors\t%d\n", s.Errors)
	if s.FirstError != "" {
		fmt.Fprintf(tw, "first error\t%s\n", strings.ReplaceAll(s.FirstError, "\n", " "))
	}
	return tw.Flush()
}

type codeCountJSON struct {
	Count   int     `json:"count"`
	Meaning string  `json:"meaning"`
	P50Ms   float64 `json:"p50Ms"`
	P99Ms   float64 `json:"p99Ms"`
}

type summaryJSON struct {
	Tx          string                   `json:"tx"`
	Addr        string                   `json:"addr"`
	Concurrency int                      `json:"concurrency"`
	Frames      int                      `json:"frames"`
	Sent        int                      `json:"sent"`
	Answered    int                      `json:"answered"`
	Duplicates  int                      `json:"duplicates"`
	Errors      int                      `json:"errors"`
	Malformed   int                      `json:"malformed"`
	Mismatches  int                      `json:"mismatches"`
	Codes       map[string]codeCountJSON `json:"codes"`
	GUIDs       map[string]int           `json:"guidsByFinalCode"`
	ElapsedMs   float64                  `json:"elapsedMs"`
	TxPerSec    float64                  `json:"txPerSec"`
	LatencyMs   map[string]float64       `json:"latencyMs"`
	FirstError  string                   `json:"firstError,omitempty"`
	OK          bool                     `json:"ok"`
}

// MarshalJSON renders the summary with durations in milliseconds and each
// response code's meaning.
func (s Summary) MarshalJSON() ([]byte, error) {
	toMs := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	j := summaryJSON{
		Tx: s.Tx, Addr: s.Addr, Concurrency: s.Concurrency,
		Frames: s.Frames, Sent: s.Sent, Answered: s.Answered, Duplicates: s.Duplicates,
		Errors: s.Errors, Malformed: s.Malformed, Mismatches: s.Mismatches,
		Codes:     make(map[string]codeCountJSON, len(s.Codes)),
		ElapsedMs: toMs(s.Elapsed), TxPerSec: s.TxPerSec,
		LatencyMs: map[string]float64{
			"p50": toMs(s.Latency.P50), "p90": toMs(s.Latency.P90), "p99": toMs(s.Latency.P99),
			"max": toMs(s.Latency.Max), "mean": toMs(s.Latency.Mean),
		},
		FirstError: s.FirstError,
		OK:         s.OK(),
	}
	for c, n := range s.Codes {
		l := s.CodeLatency[c]
		j.Codes[string(c)] = codeCountJSON{Count: n, Meaning: c.Meaning(), P50Ms: toMs(l.P50), P99Ms: toMs(l.P99)}
	}
	j.GUIDs = make(map[string]int, len(s.GUIDs))
	for c, n := range s.GUIDs {
		j.GUIDs[string(c)] = n
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote, so that a program driving
// lhsend --json reads its summary as this type. What the JSON leaves out
// stays zero: each code's P90, Max and Mean, and each code's meaning, which
// belongs to the code table, not to the run.
func (s *Summary) UnmarshalJSON(raw []byte) error {
	var j summaryJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return err
	}
	fromMs := func(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
	*s = Summary{
		Tx: j.Tx, Addr: j.Addr, Concurrency: j.Concurrency,
		Frames: j.Frames, Sent: j.Sent, Answered: j.Answered, Duplicates: j.Duplicates,
		Errors: j.Errors, Malformed: j.Malformed, Mismatches: j.Mismatches,
		Codes:       make(map[generated.RspCode]int, len(j.Codes)),
		CodeLatency: make(map[generated.RspCode]Latency, len(j.Codes)),
		GUIDs:       make(map[generated.RspCode]int, len(j.GUIDs)),
		Elapsed:     fromMs(j.ElapsedMs), TxPerSec: j.TxPerSec,
		Latency: Latency{
			P50: fromMs(j.LatencyMs["p50"]), P90: fromMs(j.LatencyMs["p90"]), P99: fromMs(j.LatencyMs["p99"]),
			Max: fromMs(j.LatencyMs["max"]), Mean: fromMs(j.LatencyMs["mean"]),
		},
		FirstError: j.FirstError,
	}
	for c, n := range j.Codes {
		s.Codes[generated.RspCode(c)] = n.Count
		s.CodeLatency[generated.RspCode(c)] = Latency{P50: fromMs(n.P50Ms), P99: fromMs(n.P99Ms)}
	}
	for c, n := range j.GUIDs {
		s.GUIDs[generated.RspCode(c)] = n
	}
	return nil
}
