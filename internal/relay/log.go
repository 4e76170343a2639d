package relay

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

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
	return string(appendMasked(make([]byte, 0, len(v)), v))
}

// appendMasked appends v masked as maskAccount says.
func appendMasked(dst []byte, v string) []byte {
	keepEnds := len(v) > maskKeepStart+maskKeepEnd
	for i := range len(v) {
		if keepEnds && (i < maskKeepStart || i >= len(v)-maskKeepEnd) {
			dst = append(dst, v[i])
		} else {
			dst = append(dst, '*')
		}
	}
	return dst
}

// lineScratch is what a frame's log lines are built in: their attributes,
// the request's field values, and the bytes of the values made for the
// line (masked account numbers, formatted integers), which the
// attributes' strings point into. linePool hands them out.
type lineScratch struct {
	attrs  []slog.Attr
	req    []slog.Attr
	fields []generated.FieldValue
	text   []byte
	pooled bool // from linePool, and going back to it
}

var linePool = sync.Pool{New: func() any {
	return &lineScratch{
		attrs:  make([]slog.Attr, 0, 16),
		req:    make([]slog.Attr, 0, 8),
		fields: make([]generated.FieldValue, 0, 8),
		text:   make([]byte, 0, 128),
		pooled: true,
	}
}}

// scratch returns the scratch for one line written with the server's
// handler; release it once the line is written. The handlers of package
// slog write the line before Handle returns and keep nothing of it, so
// their scratch is pooled; another handler may keep the record (a test's,
// a buffering one), so it gets scratch of its own that nothing writes to
// again.
func (c *conn) scratch() *lineScratch {
	switch c.s.log.Handler().(type) {
	case *slog.JSONHandler, *slog.TextHandler:
		return linePool.Get().(*lineScratch)
	}
	return &lineScratch{}
}

func (sc *lineScratch) release() {
	if !sc.pooled {
		return
	}
	clear(sc.attrs[:cap(sc.attrs)]) // drop what the strings point to
	clear(sc.req[:cap(sc.req)])
	clear(sc.fields[:cap(sc.fields)])
	sc.attrs, sc.req, sc.fields, sc.text = sc.attrs[:0], sc.req[:0], sc.fields[:0], sc.text[:0]
	linePool.Put(sc)
}

// made returns the bytes appended to sc.text since from as a string, without
// a copy: sc.text is only ever appended to while a line is built, so those
// bytes do not change until the scratch is reused.
func (sc *lineScratch) made(from int) string {
	if from == len(sc.text) {
		return ""
	}
	return unsafe.String(&sc.text[from], len(sc.text)-from)
}

// fieldsAttr is a request body's fields as one "req" group keyed by their
// JSON keys, account numbers masked unless full is set.
func (sc *lineScratch) fieldsAttr(req generated.RequestBody, full bool) slog.Attr {
	sc.fields = req.AppendFields(sc.fields[:0])
	attrs := sc.req[:0]
	for _, f := range sc.fields {
		v := f.Value
		switch {
		case f.Integer:
			from := len(sc.text)
			sc.text = strconv.AppendInt(sc.text, f.Int, 10)
			v = sc.made(from)
		case f.Account && !full:
			from := len(sc.text)
			sc.text = appendMasked(sc.text, v)
			v = sc.made(from)
		}
		attrs = append(attrs, slog.String(f.JSON, v))
	}
	sc.req = attrs
	return slog.Attr{Key: "req", Value: slog.GroupValue(attrs...)}
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
// has its answer finds the frame counted and logged. The line's attributes
// go to the handler as one group with an empty key, which handlers inline:
// a record holds five attributes without allocating, and a frame line has
// more.
func (c *conn) frameDone(st *frameState) {
	s := c.s
	if s.metrics != nil {
		s.metrics.FrameAnswered(st.txCode, st.rsp)
	}
	level := frameLevel(st.rsp)
	if !c.logEnabled(level) {
		return
	}
	sc := c.scratch()
	defer sc.release()
	attrs := append(sc.attrs[:0],
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
		attrs = append(attrs, sc.fieldsAttr(st.req, false))
	}
	sc.attrs = attrs
	s.log.LogAttrs(s.base, level, "frame", slog.Attr{Value: slog.GroupValue(attrs...)})
}

// logReceived writes, at debug level only, the request as decoded with its
// fields unmasked: for tracing one transaction through a test system.
func (c *conn) logReceived(st *frameState) {
	if !c.logEnabled(slog.LevelDebug) {
		return
	}
	sc := c.scratch()
	defer sc.release()
	c.s.log.LogAttrs(c.s.base, slog.LevelDebug, "frame received",
		slog.String("guid", st.guid),
		slog.String("tx", st.txCode),
		slog.String("src_org", st.hdr.SrcOrg),
		slog.String("dst_org", st.hdr.DstOrg),
		slog.String("sent_at", st.hdr.SentAt),
		slog.String("remote", c.remote),
		sc.fieldsAttr(st.req, true),
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
