package relay

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
)

// pgServer measures the throwaway PostgreSQL server a benchmark leg's
// ledger runs on: its WAL flushes (pg_stat_wal.wal_sync: the fsyncs the
// server did for commits, grouped or not) and its CPU time (the postmaster
// and every process it forked, from /proc, exited backends included).
type pgServer struct {
	b     *testing.B
	pid   int
	admin string
}

type pgSample struct {
	walSyncs int64
	cpu      time.Duration
}

func newPGServer(b *testing.B) pgServer {
	return pgServer{b: b, pid: pgtest.ServerPID(b), admin: pgtest.AdminURL(b)}
}

// sample reads the counters. Call it once the ledger is closed and its
// backends have exited: a backend reports its WAL statistics at most once
// a second while it lives, and always when it exits.
func (s pgServer) sample() pgSample {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		s.b.Fatal(err)
	}
	defer c.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := c.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'lhrelay'`).Scan(&n); err != nil {
			s.b.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			s.b.Fatalf("%d ledger backends still running", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var p pgSample
	if err := c.QueryRow(ctx, `SELECT wal_sync FROM pg_stat_wal`).Scan(&p.walSyncs); err != nil {
		s.b.Fatal(err)
	}
	p.cpu = treeCPU(s.pid)
	return p
}

// treeCPU is the CPU time of process pid, of its children alive, and of
// those it has reaped (Linux /proc; clock ticks of 10 ms). A child reaped
// while /proc is being listed would be in neither count (the ledger's
// backends exit together, just before the sample), so the listing is
// repeated until pid reaped nobody meanwhile.
func treeCPU(pid int) time.Duration {
	const tick = 10 * time.Millisecond
	fields := func(p string) []string {
		b, err := os.ReadFile(filepath.Join("/proc", p, "stat"))
		if err != nil {
			return nil
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from state (3) on
	}
	num := func(f []string, field int) int64 { // field numbers as in proc(5)
		n, _ := strconv.ParseInt(f[field-3], 10, 64)
		return n
	}
	reaped := func() (own, children int64) {
		f := fields(strconv.Itoa(pid))
		if f == nil {
			return 0, 0
		}
		return num(f, 14) + num(f, 15), num(f, 16) + num(f, 17)
	}
	for {
		_, before := reaped()
		var alive int64
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			if f := fields(d.Name()); f != nil && num(f, 4) == int64(pid) {
				alive += num(f, 14) + num(f, 15)
			}
		}
		own, after := reaped()
		if after == before {
			return time.Duration(own+after+alive) * tick
		}
	}
}

// openBenchPG opens a PostgreSQL ledger in a fresh schema for one leg.
func openBenchPG(b *testing.B) *ledger.Ledger {
	led, err := ledger.Open(pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	return led
}
