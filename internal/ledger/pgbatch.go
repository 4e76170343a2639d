package ledger

import (
	"context"
	"errors"
	"fmt"

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
	// queueText's room: the arguments' bytes, and each one's slice of them.
	text       []byte
	textValues [][]byte
	mrr        *pgconn.MultiResultReader
	row        pgBatchRow
	err        error // the first failure: every later result returns it
}

// reset readies pb for a new batch on c, keeping its buffers.
func (pb *pgBatch) reset(c *pgx.Conn) {
	*pb = pgBatch{c: c, eqb: pb.eqb, formats: pb.formats[:0], text: pb.text, textValues: pb.textValues, row: pgBatchRow{m: c.TypeMap()}}
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
	if pb.queueText(sd, args) {
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

// queueText queues a statement whose arguments are all *string (the
// history's array literals, pgHistoryInsert) and says whether it did:
// they go as text, which is what pgx makes of a string, copied into one
// buffer of pb's rather than reached by reflection, one allocation each.
func (pb *pgBatch) queueText(sd *pgconn.StatementDescription, args []any) bool {
	if len(args) == 0 || len(args) != len(sd.ParamOIDs) || len(sd.Fields) != 0 {
		return false
	}
	for _, a := range args {
		if p, ok := a.(*string); !ok || p == nil {
			return false
		}
	}
	pb.text, pb.textValues = pb.text[:0], pb.textValues[:0]
	for _, a := range args {
		pb.text = append(pb.text, *a.(*string)...)
	}
	from := 0
	for _, a := range args {
		to := from + len(*a.(*string))
		pb.textValues = append(pb.textValues, pb.text[from:to:to])
		from = to
	}
	pb.b.ExecStatement(sd, pb.textValues, nil, nil) // no formats: all text
	return true
}

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
