package ledger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"gotest.tools/v3/assert"

	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// TestBinaryArraysAsPgxEncodesThem: the history's columns go in
// PostgreSQL's binary array format byte for byte as pgx's own encoder
// writes them (empty, one and several elements, any text, negative and
// extreme numbers, times before 2000 and in other zones), and as the
// array type the statement's parameter has.
func TestBinaryArraysAsPgxEncodesThem(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	columns := []any{
		&[]string{}, &[]string{""}, &[]string{`a "b" \c`, "{x,y}", "NULL", "é\u2028", "relay-3f9c0d1e2a4b5c6d"},
		&[]int64{}, &[]int64{0, -1, 1<<63 - 1, -1 << 63, 1_732_000_000_000_000},
		&[]int32{}, &[]int32{200, -7, 1<<31 - 1},
		&[]time.Time{}, &[]time.Time{time.Date(2026, 12, 1, 23, 59, 59, 123456000, time.UTC),
			time.Date(1999, 12, 31, 23, 59, 59, 999999000, berlin), time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	m := pgtype.NewMap()
	for _, c := range columns {
		oid := arrayOID(c)
		assert.Assert(t, oid != 0, "%T", c)
		want, err := m.Encode(oid, pgtype.BinaryFormatCode, c, nil)
		assert.NilError(t, err)
		assert.DeepEqual(t, appendBinaryArray(nil, c), want)
	}
	assert.Equal(t, arrayOID(new(string)), uint32(0))
	assert.Equal(t, arrayOID([]string{}), uint32(0)) // a column is passed by pointer
}

// BenchmarkPgHistoryInsert measures one INSERT of a transaction's 64
// history entries on PostgreSQL (rolled back), its columns sent as binary
// arrays (as the writer does) and, for comparison, as text array
// literals, which the server parses element by element. The difference
// is the server's: the client's work is a few microseconds either way.
//
//	go test -run '^$' -bench PgHistoryInsert -benchtime 2000x ./internal/ledger/
func BenchmarkPgHistoryInsert(b *testing.B) {
	l := openLedger(b, pgtest.URL(b))
	ctx := context.Background()
	conn, err := l.st.(*pgStore).pool.Acquire(ctx)
	assert.NilError(b, err)
	defer conn.Release()
	c := newChain(Actor{Command: "relay", Host: "relay-host-01.bank.example", PID: 4242, Instance: "relay-3f9c0d1e2a4b5c6d"})
	ps := make([]pending, 64)
	for i := range ps {
		ps[i] = pending{guid: testkit.GUID(), stateBefore: StateSent, stateAfter: StateDone, rspAfter: codeOK, attempts: 1,
			why: Why{Reason: "core answered HTTP 200", HTTPStatus: 200, Took: 3 * time.Millisecond}}
	}
	es, _ := c.seal(ps, time.Now())
	q := dollarPlaceholders(sqlPgHistoryInsert)
	for _, form := range []string{"binary", "text"} {
		args := new(histScratch).inserts(postgresDialect, es, ps)[0].args
		if form == "text" {
			args = textArrays(args)
		}
		b.Run(form, func(b *testing.B) {
			var pb pgBatch
			for b.Loop() {
				_, err := conn.Exec(ctx, "BEGIN")
				assert.NilError(b, err)
				pb.reset(conn.Conn())
				pb.queue(ctx, q, args)
				pb.send(ctx)
				_, n, err := pb.result(nil, nil)
				assert.NilError(b, err)
				assert.NilError(b, pb.close())
				assert.Equal(b, n, int64(len(es)))
				_, err = conn.Exec(ctx, "ROLLBACK")
				assert.NilError(b, err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(es))/1000, "µs/entry")
		})
	}
}

// textArrays are columns as text array literals (every element quoted,
// quotes and backslashes escaped).
func textArrays(columns []any) []any {
	var out []any
	for _, c := range columns {
		var els []string
		switch v := c.(type) {
		case *[]string:
			els = append(els, *v...)
		case *[]int64:
			for _, n := range *v {
				els = append(els, strconv.FormatInt(n, 10))
			}
		case *[]int32:
			for _, n := range *v {
				els = append(els, strconv.FormatInt(int64(n), 10))
			}
		case *[]time.Time:
			for _, t := range *v {
				els = append(els, t.UTC().Format(atLayout)+"+00")
			}
		}
		for i, e := range els {
			els[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(e) + `"`
		}
		s := "{" + strings.Join(els, ",") + "}"
		out = append(out, &s)
	}
	return out
}
