package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgBatch sends statements to one connection in one round trip, as one
// extended-protocol sequence ended by a single Sync, and reads their
// results in order. It is what pgx.Batch does in its default mode, minus
// the pipeline's bookkeeping (a list element and several records per
// statement: about half the PostgreSQL ledger's allocations per
// transfer). The statements are prepared once per connection
// (pgx.Conn.Prepare is idempotent: a statement already prepared costs a
// map lookup), their arguments encoded and their rows decoded by the
// connection's type map, as pgx's own rows are.
//
// As with any batch ended by one Sync, the server skips every statement
// after one that fails; here each of those gets the first failure.
//
// Use: reset, queue each statement, send, then result once per queued
// statement in order, then close (always, to free the connection).
type pgBatch struct {
	c       *pgx.Conn
	b       pgconn.Batch
	eqb     pgx.ExtendedQueryBuilder
	formats []int16 // every queued statement's result formats, back to back
	// queueArrays' room: the arrays' bytes, where each ends, each one's
	// slice of them, and their formats.
	arrays []byte
	ends   []int
	values [][]byte
	binary []int16
	mrr    *pgconn.MultiResultReader
	row    pgBatchRow
	err    error // the first failure: every later result returns it
}

// reset readies pb for a new batch on c, keeping its buffers.
func (pb *pgBatch) reset(c *pgx.Conn) {
	*pb = pgBatch{c: c, eqb: pb.eqb, formats: pb.formats[:0], arrays: pb.arrays, ends: pb.ends, values: pb.values, binary: pb.binary, row: pgBatchRow{m: c.TypeMap()}}
}

// queue adds statement q (with $n placeholders) and its arguments.
func (pb *pgBatch) queue(ctx context.Context, q string, args []any) {
	if pb.err != nil {
		return
	}
	sd, err := pb.c.Prepare(ctx, q, q)
	if err != nil {
		pb.err = fmt.Errorf("ledger: prepare: %w", err)
		return
	}
	if pb.queueArrays(sd, args) {
		return
	}
	if err := pb.eqb.Build(pb.c.TypeMap(), sd, args); err != nil {
		pb.err = fmt.Errorf("ledger: encode the arguments of %q: %w", q, err)
		return
	}
	// The batch keeps the result formats until the results are read, and
	// Build reuses its own: a copy, in one slice for the whole batch (a
	// slice already handed out keeps its array when this one grows).
	start := len(pb.formats)
	pb.formats = append(pb.formats, pb.eqb.ResultFormats...)
	pb.b.ExecStatement(sd, pb.eqb.ParamValues, pb.eqb.ParamFormats, pb.formats[start:len(pb.formats):len(pb.formats)])
}

// queueArrays queues a statement whose arguments are all columns (a
// pointer to a slice of string, int64, int32 or time.Time, as
// pgHistoryColumns holds them) for array parameters of those types, and
// says whether it did: each goes as a binary array, built in one buffer
// of pb's.
func (pb *pgBatch) queueArrays(sd *pgconn.StatementDescription, args []any) bool {
	if len(args) == 0 || len(args) != len(sd.ParamOIDs) || len(sd.Fields) != 0 {
		return false
	}
	for i, a := range args {
		if arrayOID(a) != sd.ParamOIDs[i] {
			return false
		}
	}
	pb.arrays, pb.ends, pb.values, pb.binary = pb.arrays[:0], pb.ends[:0], pb.values[:0], pb.binary[:0]
	for _, a := range args {
		pb.arrays = appendBinaryArray(pb.arrays, a)
		pb.ends = append(pb.ends, len(pb.arrays))
		pb.binary = append(pb.binary, pgtype.BinaryFormatCode)
	}
	from := 0
	for _, to := range pb.ends {
		pb.values = append(pb.values, pb.arrays[from:to:to])
		from = to
	}
	pb.b.ExecStatement(sd, pb.values, pb.binary, nil)
	return true
}

// arrayOID is the type of the array a column argument is sent as; 0: it
// is not one.
func arrayOID(a any) uint32 {
	switch a.(type) {
	case *[]string:
		return pgtype.TextArrayOID
	case *[]int64:
		return pgtype.Int8ArrayOID
	case *[]int32:
		return pgtype.Int4ArrayOID
	case *[]time.Time:
		return pgtype.TimestamptzArrayOID
	}
	return 0
}

// appendBinaryArray appends column a (arrayOID says it is one) in
// PostgreSQL's binary array format, as pgx writes it: one dimension, no
// NULLs, the element type, the length and lower bound 1, then each
// element as its length and its bytes (a timestamp: microseconds since
// 2000-01-01 UTC).
func appendBinaryArray(b []byte, a any) []byte {
	u32, u64 := binary.BigEndian.AppendUint32, binary.BigEndian.AppendUint64
	header := func(elem uint32, n int) []byte {
		return u32(u32(u32(u32(u32(b, 1), 0), elem), uint32(n)), 1)
	}
	switch v := a.(type) {
	case *[]string:
		b = header(pgtype.TextOID, len(*v))
		for _, s := range *v {
			b = append(u32(b, uint32(len(s))), s...)
		}
	case *[]int64:
		b = header(pgtype.Int8OID, len(*v))
		for _, n := range *v {
			b = u64(u32(b, 8), uint64(n))
		}
	case *[]int32:
		b = header(pgtype.Int4OID, len(*v))
		for _, n := range *v {
			b = u32(u32(b, 4), uint32(n))
		}
	case *[]time.Time:
		b = header(pgtype.TimestamptzOID, len(*v))
		for _, t := range *v {
			b = u64(u32(b, 8), uint64(t.UnixMicro()-pgEpochMicros))
		}
	}
	return b
}

// pgEpochMicros is PostgreSQL's epoch for timestamps, 2000-01-01 UTC, in
// Unix microseconds.
const pgEpochMicros = 946684800 * 1_000_000

// send sends every statement queued. Nothing is sent when queueing one
// failed: every result then returns that failure.
func (pb *pgBatch) send(ctx context.Context) {
	if pb.err == nil {
		pb.mrr = pb.c.PgConn().ExecBatch(ctx, &pb.b)
	}
}

// result reads the next statement's result: each is called with every
// row (nil: the rows are not read), or, when dest is not nil, the first
// row is scanned into dest (none: errNoRows). It returns how many rows
// came back and how many the statement changed.
func (pb *pgBatch) result(each func(scanner) error, dest []any) (rows, changed int64, err error) {
	if pb.err != nil {
		return 0, 0, pb.err
	}
	if !pb.mrr.NextResult() {
		pb.err = pb.mrr.Close()
		if pb.err == nil {
			pb.err = errors.New("ledger: the database answered fewer statements than the batch sent")
		}
		return 0, 0, pb.err
	}
	rr := pb.mrr.ResultReader()
	var rowErr error
	for rr.NextRow() {
		rows++
		if rowErr != nil {
			continue
		}
		pb.row.fields, pb.row.values = rr.FieldDescriptions(), rr.Values()
		switch {
		case dest != nil && rows == 1:
			rowErr = pb.row.Scan(dest...)
		case each != nil:
			rowErr = each(&pb.row)
		}
	}
	pb.row.values = nil // valid only until the next row
	tag, err := rr.Close()
	switch {
	case err != nil:
		pb.err = err
		return 0, 0, err
	case rowErr != nil:
		pb.err = rowErr
		return rows, 0, rowErr
	case dest != nil && rows == 0:
		return 0, 0, errNoRows
	}
	return rows, tag.RowsAffected(), nil
}

// close reads whatever is left of the batch's answer and frees the
// connection. It returns the first failure.
func (pb *pgBatch) close() error {
	if pb.mrr != nil {
		if err := pb.mrr.Close(); err != nil && pb.err == nil {
			pb.err = err
		}
		pb.mrr = nil
	}
	return pb.err
}

// pgBatchRow is the result row a pgBatch is reading.
type pgBatchRow struct {
	m      *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte
}

// Scan decodes the row into dest, one destination a column, as pgx.Rows
// does.
func (r *pgBatchRow) Scan(dest ...any) error {
	if len(dest) != len(r.values) {
		return fmt.Errorf("ledger: %d destinations for %d columns", len(dest), len(r.values))
	}
	for i, d := range dest {
		f := &r.fields[i]
		if err := r.m.Scan(f.DataTypeOID, f.Format, r.values[i], d); err != nil {
			return fmt.Errorf("ledger: scan column %s: %w", f.Name, err)
		}
	}
	return nil
}
