// Command perfstages splits a running relay's CPU profile into the stages
// of a transfer (README, "Performance"): it reads the samples that
// `perf script -F ip,sym` prints, gives each sample to one stage, and
// prints each stage's share, and its microseconds per transfer when told
// the relay's CPU per transfer:
//
//	perf record -F 4000 -g -o relay.data -p "$relay" -- lhsend --count 40000 --concurrency 64
//	perf script -i relay.data -F ip,sym | go run ./internal/perfstages --us-per-tx 75
//
// A sample belongs to the first stage of the list below that any frame of
// its stack matches, so the order says what wins: a TCP send made by the
// core client is the core call's, not the channel's, and a page fault
// inside SQLite is the ledger's. The stages name this tree's functions;
// a sample no stage claims is listed by its outermost frame, so a renamed
// function shows up as "other" instead of vanishing.
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"lhrelay/internal/app"
)

// A stage is a part of a transfer and the frames that mark a sample as its.
type stage struct {
	name   string
	frames *regexp.Regexp
}

var stages = []stage{
	{"core call: request write (TCP send)", regexp.MustCompile(`corecall\.\(\*countingConn\)\.Write`)},
	{"core call: answer read (TCP recv)", regexp.MustCompile(`corecall\.(readResponseInto|readStatusLine|readLine|\(\*countingConn\)\.Read)`)},
	{"core call: stale-connection peek", regexp.MustCompile(`corecall\.\(\*peeker\)`)},
	{"core call: classify, JSON", regexp.MustCompile(`corecall\.(classify|success|PrepareInto)|CoreJSON|corejson\.`)},
	{"core call: pool, deadline, rest", regexp.MustCompile(`corecall\.`)},
	{"frame log line, metrics", regexp.MustCompile(`relay\.\(\*conn\)\.(frameDone|logReceived)|log/slog\.|internal/metrics\.`)},
	{"ledger: claim and outcome hand-off (channel side)", regexp.MustCompile(`ledger\.\(\*Ledger\)\.(Claim|FinishLater)|relay\.\(\*conn\)\.record$|relay\.\(\*Server\)\.finishLater|laterRecord`)},
	{"frame parse, validate", regexp.MustCompile(`wire\.ParseRequestInto|\)\.Decode$|\)\.AppendFields$`)},
	{"answer encode", regexp.MustCompile(`wire\.AppendResponse|generated\.AppendFrame|\)\.AppendTo$`)},
	{"admission", regexp.MustCompile(`internal/admit\.`)},
	{"ledger: fsync", regexp.MustCompile(`^(fsync|fdatasync)$|__x64_sys_(fsync|fdatasync)`)},
	{"ledger: WAL and checkpoint writes (pwrite)", regexp.MustCompile(`pwrite64|walWriteToLog|walWriteOneFrame|unixWrite`)},
	{"ledger: page reads (pread)", regexp.MustCompile(`pread64|unixRead`)},
	{"ledger: file locks (fcntl)", regexp.MustCompile(`fcntl|unixShmLock|unixLock|unixUnlock|posixUnlock`)},
	{"ledger: SQLite's WAL bookkeeping", regexp.MustCompile(`walChecksumBytes|walIndexAppend|sqlite3WalFrames|walEncodeFrame`)},
	{"ledger: history entries (Go)", regexp.MustCompile(`ledger\.\(\*chain\)|appendHistory|histScratch|ledger\.\(\*boxes\)|sha256`)},
	{"ledger: SQLite statements (C, libc)", regexp.MustCompile(`^(sqlite3|vdbe|btree|balance|pcache|pager|getPage|moveTo|insertCell|fillInCell|allocate|freeSpace|cellSize|computeYMD|pageFind|getAndInit|defragment|dropCell|releasePage|accessPayload|clearCell)|^(malloc|_int_malloc|_int_free|free|cfree|malloc_consolidate|pthread_mutex|__GI___pthread_mutex|__memmove|__memcmp|__memset|memcpy)`)},
	{"ledger: PostgreSQL's client (pgx, its round trips)", regexp.MustCompile(`github\.com/jackc/pgx`)},
	{"ledger: writer loop, binding (Go)", regexp.MustCompile(`internal/ledger\.`)},
	{"answer write (TCP send)", regexp.MustCompile(`net\.\(\*conn\)\.Write`)},
	{"frame read (TCP recv)", regexp.MustCompile(`net\.\(\*conn\)\.Read|net\.\(\*netFD\)\.Read|wire\.ReadFrame`)},
	{"runtime: sysmon", regexp.MustCompile(`runtime\.sysmon`)},
	{"runtime: garbage collector", regexp.MustCompile(`runtime\.(gcBgMarkWorker|gcDrain|gcAssist|scanObject|bgsweep|gcStart|markroot|sweepone|bgscavenge)`)},
	{"runtime: allocation", regexp.MustCompile(`runtime\.(mallocgc|newobject|makeslice|growslice)`)},
	{"runtime: scheduler, cgo and syscall transitions", regexp.MustCompile(`runtime\.(findRunnable|schedule|park_m|mcall|netpoll|stopm|startm|wakep|goready|ready|gopark|notesleep|notewakeup|mPark|futex|exitsyscall|entersyscall|reentersyscall|cgocall|asmcgocall|Gosched|gosched)`)},
	{"relay: other Go", regexp.MustCompile(`internal/relay\.`)},
}

func main() { app.Main(run) }

func run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("perfstages", flag.ContinueOnError)
	fs.SetOutput(stderr)
	usPerTx := fs.Float64("us-per-tx", 0, "the relay's CPU per transfer in µs, measured without perf; 0 prints shares only")
	minShare := fs.Float64("min-share", 0.4, "fold the unclaimed lines under this share (in %) into one")
	if err := fs.Parse(args); err != nil {
		return app.Report(stderr, "perfstages", app.Bad(err))
	}
	in := io.Reader(os.Stdin)
	if fs.NArg() > 0 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return app.Report(stderr, "perfstages", app.Bad(err))
		}
		defer f.Close()
		in = f
	}
	counts, total, err := attribute(in)
	if err == nil && total == 0 {
		err = errors.New("no samples in the input (perf script -F ip,sym)")
	}
	if err != nil {
		return app.Report(stderr, "perfstages", app.Badf("reading perf script's output: %w", err))
	}
	write(stdout, counts, total, *usPerTx, *minShare)
	return app.ExitOK
}

// attribute reads perf script's samples (a header line, then one indented
// line per frame, leaf first) and counts the samples of each stage; an
// unclaimed sample counts as "other: " and its outermost frame.
func attribute(r io.Reader) (counts map[string]int, total int, err error) {
	counts = make(map[string]int)
	var stack []string
	flush := func() {
		if len(stack) > 0 {
			counts[stageOf(stack)]++
			total++
		}
		stack = stack[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || (line[0] != ' ' && line[0] != '\t') {
			flush()
			continue
		}
		// "\t  4df1ae lhrelay/internal/relay.newConn": address, symbol.
		_, sym, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			stack = append(stack, strings.TrimSpace(sym))
		}
	}
	flush()
	return counts, total, sc.Err()
}

// stageOf is the first stage any frame of stack matches.
func stageOf(stack []string) string {
	for _, s := range stages {
		for _, frame := range stack {
			if s.frames.MatchString(frame) {
				return s.name
			}
		}
	}
	return "other: " + stack[len(stack)-1]
}

// write prints one line a stage, largest first, folding the unclaimed
// lines under minShare percent into one.
func write(w io.Writer, counts map[string]int, total int, usPerTx, minShare float64) {
	type line struct {
		name  string
		count int
	}
	var lines []line
	folded := 0
	for name, n := range counts {
		if strings.HasPrefix(name, "other: ") && 100*float64(n)/float64(total) < minShare {
			folded += n
			continue
		}
		lines = append(lines, line{name, n})
	}
	if folded > 0 {
		lines = append(lines, line{fmt.Sprintf("other (each under %.1f%%)", minShare), folded})
	}
	slices.SortFunc(lines, func(a, b line) int {
		return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.name, b.name))
	})
	for _, l := range lines {
		share := float64(l.count) / float64(total)
		if usPerTx > 0 {
			fmt.Fprintf(w, "%5.1f%%  %6.1f µs  %s\n", 100*share, usPerTx*share, l.name)
		} else {
			fmt.Fprintf(w, "%5.1f%%  %s\n", 100*share, l.name)
		}
	}
	fmt.Fprintf(w, "%d samples\n", total)
}
