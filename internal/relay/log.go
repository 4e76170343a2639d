package relay

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// Masking keeps this many characters of an account number at each end.
const (
	maskKeepStart = 2
	maskKeepEnd   = 4
)

// maskAccount hides the middle of an account number for logs above debug:
// 11002003004005 → 11********4005. A value too short to keep both ends is
// hidden whole.
func maskAccount(v string) string {
	var b strings.Builder
	b.Grow(len(v))
	writeMasked(&b, v)
	return b.String()
}

func writeMasked(b *strings.Builder, v string) {
	keepEnds := len(v) > maskKeepStart+maskKeepEnd
	for i := range len(v) {
		if keepEnds && (i < maskKeepStart || i >= len(v)-maskKeepEnd) {
			b.WriteByte(v[i])
		} else {
			b.WriteByte('*')
		}
	}
}

// fieldsAttr is a request body's fields as one "req" group keyed by their
// JSON keys, account numbers masked unless full is set. The masked values
// are cut from one string: one allocation however many accounts a frame
// carries.
func fieldsAttr(req generated.RequestBody, full bool) slog.Attr {
	fields := req.Fields()
	var masked string
	if !full {
		var b strings.Builder
		n := 0
		for _, f := range fields {
			if f.Account {
				n += len(f.Value)
			}
		}
		b.Grow(n)
		for _, f := range fields {
			if f.Account {
				writeMasked(&b, f.Value)
			}
		}
		masked = b.String()
	}
	attrs := make([]slog.Attr, len(fields))
	for i, f := range fields {
		v := f.Value
		if f.Account && !full {
			v, masked = masked[:len(v)], masked[len(v):]
		}
		attrs[i] = slog.String(f.JSON, v)
	}
	return slog.GroupAttrs("req", attrs...)
}

// maskedError is err's text with every account number of req (when it
// decoded) and every offending value of an account field masked: a core
// call's error can carry the URL path (BKIQ0001 puts the account in it), a
// field error carries the bytes it refused.
func maskedError(err error, tx *generated.Transaction, req generated.RequestBody) string {
	msg := err.Error()
	if req != nil {
		for _, f := range req.Fields() {
			if f.Account && f.Value != "" {
				msg = strings.ReplaceAll(msg, f.Value, maskAccount(f.Value))
			}
		}
	}
	var fe *fixedwidth.FieldError
	if tx != nil && errors.As(err, &fe) && fe.Got != "" && accountField(tx, fe.Field) {
		msg = strings.ReplaceAll(msg, fe.Got, maskAccount(fe.Got))
	}
	return msg
}

// accountField reports whether the request layout of tx marks the field
// named name (e.g. WD_ACCT) as an account number.
func accountField(tx *generated.Transaction, name string) bool {
	for _, f := range tx.NewRequest().Fields() {
		if f.Name == name {
			return f.Account
		}
	}
	return false
}

// frameLevel is the level of a frame's line: info for the core's and the
// ledger's ordinary answers, warn for what an operator or a channel
// developer should look at — a rejected frame (E101, E102), an unknown
// outcome (E901), a core that cannot be reached (E902), a GUID in progress
// (E903) or reused (E904).
func frameLevel(rsp generated.RspCode) slog.Level {
	switch rsp {
	case generated.RspUnknownTx, generated.RspBadFrame, generated.RspReadTimeout,
		generated.RspConnectFail, generated.RspInProgress, generated.RspGUIDReused:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// frameDone counts an answered frame and writes its one log line (package
// comment, Logs). It runs before the answer is written, so a channel that
// has its answer finds the frame counted and logged.
func (c *conn) frameDone(st *frameState) {
	s := c.s
	if s.metrics != nil {
		s.metrics.FrameAnswered(st.txCode, st.rsp)
	}
	level := frameLevel(st.rsp)
	if !c.logEnabled(level) {
		return
	}
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs,
		slog.String("guid", st.guid),
		slog.String("tx", st.txCode),
		slog.String("rsp", string(st.rsp)),
		slog.String("state", string(st.state)),
		slog.Int("attempts", st.attempts),
		slog.Float64("latency_ms", millis(time.Since(st.start))),
		slog.String("remote", c.remote),
	)
	if c.client != "" {
		attrs = append(attrs, slog.String("client", c.client))
	}
	if st.claim != 0 {
		attrs = append(attrs, slog.String("claim", st.claim.String()))
	}
	if st.why != "" {
		attrs = append(attrs, slog.String("why", st.why), slog.Int("len", len(st.frame)))
	}
	if st.called {
		attrs = append(attrs, slog.Int("status", st.res.Status), slog.Float64("core_ms", millis(st.res.Elapsed)))
		if st.res.ConnReused && st.res.Status == 0 {
			attrs = append(attrs, slog.Bool("conn_reused", true))
		}
	}
	if st.err != nil {
		attrs = append(attrs, slog.String("err", maskedError(st.err, st.tx, st.req)))
	}
	if st.req != nil {
		attrs = append(attrs, fieldsAttr(st.req, false))
	}
	s.log.LogAttrs(s.base, level, "frame", attrs...)
}

// logReceived writes, at debug level only, the request as decoded with its
// fields unmasked: for tracing one transaction through a test system.
func (c *conn) logReceived(st *frameState) {
	if !c.logEnabled(slog.LevelDebug) {
		return
	}
	c.s.log.LogAttrs(c.s.base, slog.LevelDebug, "frame received",
		slog.String("guid", st.guid),
		slog.String("tx", st.txCode),
		slog.String("src_org", st.hdr.SrcOrg),
		slog.String("dst_org", st.hdr.DstOrg),
		slog.String("sent_at", st.hdr.SentAt),
		slog.String("remote", c.remote),
		fieldsAttr(st.req, true),
	)
}

// millis is d in milliseconds with microsecond precision, for log lines
// that a person reads and a machine sums.
func millis(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1e3
}

// logEnabled is a cheap check before building a log line's attributes.
func (c *conn) logEnabled(level slog.Level) bool {
	return c.s.log.Enabled(c.s.base, level)
}
