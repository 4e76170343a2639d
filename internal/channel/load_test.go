package channel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

func TestRunLoad(t *testing.T) {
	r := testkit.Start(t, nil)
	var mu sync.Mutex
	var progress []channel.Progress
	cfg := channel.LoadConfig{
		Addr: r.Addr, Count: 60, Concurrency: 4, Duplicates: 25, Seed: 7,
		Progress:      func(p channel.Progress) { mu.Lock(); progress = append(progress, p); mu.Unlock() },
		ProgressEvery: time.Millisecond,
	}
	s, err := channel.RunLoad(context.Background(), cfg)
	assert.NilError(t, err)
	assert.Assert(t, s.OK(), "%+v", s)
	assert.Equal(t, s.Tx, "BKTR0001")
	assert.Equal(t, s.Frames, 60)
	assert.Equal(t, s.Answered, 60)
	assert.Equal(t, s.Duplicates, 15)
	assert.DeepEqual(t, s.Codes, map[generated.RspCode]int{generated.RspHTTP200: 60})
	assert.Assert(t, s.TxPerSec > 0)
	assert.Assert(t, s.Latency.Max >= s.Latency.P99 && s.Latency.P99 >= s.Latency.P50 && s.Latency.P50 > 0)
	assert.Equal(t, r.Conns(), 4, "persistent connections")

	// What the relay would see: 45 distinct GUIDs; a reused GUID always
	// comes with the same body; amounts vary within 1..1000; the default
	// withdrawal account.
	frames := r.Frames()
	assert.Equal(t, len(frames), 60)
	tx, _ := channel.LookupTx("BKTR0001")
	var amount generated.FieldSpec
	for _, f := range tx.RequestFields {
		if f.JSON == "amount" {
			amount = f
		}
	}
	assert.Assert(t, amount.Vary, "BKTR0001's layout varies the amount")
	bodies := map[string]string{}
	amounts := map[int64]bool{}
	for _, f := range frames {
		h, body, err := channel.DecodeRequest(f)
		assert.NilError(t, err)
		b := string(f[generated.HeaderLen:])
		if prev, ok := bodies[h.GUID]; ok {
			assert.Equal(t, b, prev, "duplicate %s changed its body", h.GUID)
		}
		bodies[h.GUID] = b
		req := body.(*generated.BKTR0001Request)
		assert.Assert(t, req.Amount >= amount.VaryMin && req.Amount <= amount.VaryMax, "amount %d outside the layout's vary= range", req.Amount)
		amounts[req.Amount] = true
		assert.Equal(t, req.WdAcct, "11002003004007")
	}
	assert.Equal(t, len(bodies), 45)
	assert.Assert(t, len(amounts) > 10, "amounts vary")

	mu.Lock()
	last := progress[len(progress)-1]
	mu.Unlock()
	assert.Equal(t, last.Done, 60)
	assert.Equal(t, last.Total, 60)
	assert.Equal(t, last.Errors, 0)
}

func TestRunLoadFixedFieldsOtherTx(t *testing.T) {
	r := testkit.Start(t, nil)
	s, err := channel.RunLoad(context.Background(), channel.LoadConfig{
		Addr: r.Addr, Tx: "BKIQ0001", Fields: map[string]string{"acct": "42"}, Count: 5, Concurrency: 10,
	})
	assert.NilError(t, err)
	assert.Assert(t, s.OK())
	assert.Equal(t, s.Concurrency, 5, "no more connections than frames")
	for _, f := range r.Frames() {
		_, body, err := channel.DecodeRequest(f)
		assert.NilError(t, err)
		assert.Equal(t, body.(*generated.BKIQ0001Request).Acct, "00000000000042")
	}
}

func TestRunLoadMismatches(t *testing.T) {
	// A confused relay answering every frame with another GUID.
	r := testkit.Start(t, func(f []byte) []byte {
		g := []byte(channel.NewGUID())
		other := append([]byte{}, f...)
		copy(other[12:44], g)
		return testkit.Answer0000(other)
	})
	s, err := channel.RunLoad(context.Background(), channel.LoadConfig{Addr: r.Addr, Count: 10, Concurrency: 2})
	assert.NilError(t, err)
	assert.Equal(t, s.Answered, 10)
	assert.Equal(t, s.Mismatches, 10)
	assert.Assert(t, !s.OK())
	assert.Assert(t, strings.HasPrefix(s.FirstError, "mismatch: answer to BKTR0001"), s.FirstError)
}

func TestRunLoadErrorsRedial(t *testing.T) {
	// Every third frame is dropped with its connection: the frame counts as
	// an error and the worker dials again for the next.
	var n atomic.Int64
	r := testkit.Start(t, func(f []byte) []byte {
		if n.Add(1)%3 == 0 {
			return nil
		}
		return testkit.Answer0000(f)
	})
	s, err := channel.RunLoad(context.Background(), channel.LoadConfig{Addr: r.Addr, Count: 12, Concurrency: 1, Timeout: time.Second})
	assert.NilError(t, err)
	assert.Equal(t, s.Sent, 12)
	assert.Equal(t, s.Answered, 8)
	assert.Equal(t, s.Errors, 4)
	assert.Equal(t, r.Conns(), 4) // the first, and one after each drop but the last
	assert.Assert(t, !s.OK())
	assert.Assert(t, strings.Contains(s.FirstError, "no answer"), s.FirstError)
}

func TestRunLoadMalformed(t *testing.T) {
	r := testkit.Start(t, func(f []byte) []byte {
		a := testkit.Answer0000(f)
		a[44] = 'S' // FLAG of a request
		return a
	})
	s, err := channel.RunLoad(context.Background(), channel.LoadConfig{Addr: r.Addr, Count: 3, Concurrency: 1})
	assert.NilError(t, err)
	assert.Equal(t, s.Malformed, 3)
	assert.Equal(t, s.Answered, 0)
	assert.Assert(t, !s.OK())
	assert.Assert(t, strings.Contains(s.FirstError, "malformed answer"), s.FirstError)
}

func TestRunLoadRate(t *testing.T) {
	r := testkit.Start(t, nil)
	s, err := channel.RunLoad(context.Background(), channel.LoadConfig{Addr: r.Addr, Count: 11, Concurrency: 4, Rate: 200})
	assert.NilError(t, err)
	assert.Assert(t, s.OK())
	// 11 frames at 200/s: the 11th may leave 50ms after the first.
	assert.Assert(t, s.Elapsed >= 45*time.Millisecond, s.Elapsed)
	assert.Assert(t, s.Elapsed < 5*time.Second, s.Elapsed) // not paced by far more than the rate, on a loaded machine
}

func TestRunLoadUnreachable(t *testing.T) {
	s, err := channel.RunLoad(context.Background(), channel.LoadConfig{Addr: refusedAddr(t), Count: 5, Concurrency: 2})
	assert.ErrorContains(t, err, "cannot reach relay")
	assert.Equal(t, s.Frames, 0)
}

func TestRunLoadCancel(t *testing.T) {
	// Three frames are answered, the rest held until the test ends; the
	// run is cancelled once a held frame has arrived, whatever the
	// machine's speed.
	const answered = 3
	var n atomic.Int64
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	r := testkit.Start(t, func(f []byte) []byte {
		if n.Add(1) > answered {
			once.Do(func() { close(held) })
			<-release
		}
		return testkit.Answer0000(f)
	})
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-held
		cancel()
	}()
	s, err := channel.RunLoad(ctx, channel.LoadConfig{Addr: r.Addr, Count: 1000, Concurrency: 2})
	assert.Assert(t, errors.Is(err, context.Canceled), err)
	assert.ErrorContains(t, err, "load run interrupted")
	assert.Equal(t, s.Frames, 1000)
	// An answer written just before the cancel may not have been read.
	assert.Assert(t, s.Answered >= 1 && s.Answered <= answered, s.Answered)
	assert.Assert(t, s.Sent < 30)
	assert.Assert(t, !s.OK())
}

func TestLoadConfigValidate(t *testing.T) {
	good := channel.LoadConfig{Addr: "127.0.0.1:1", Count: 1, Concurrency: 1}
	assert.NilError(t, good.Validate())
	cases := []struct {
		change func(*channel.LoadConfig)
		want   string
	}{
		{func(c *channel.LoadConfig) { c.Addr = "" }, "no relay address"},
		{func(c *channel.LoadConfig) { c.Count = 0 }, "count 0"},
		{func(c *channel.LoadConfig) { c.Concurrency = -1 }, "concurrency -1"},
		{func(c *channel.LoadConfig) { c.Rate = -5 }, "rate -5"},
		{func(c *channel.LoadConfig) { c.Duplicates = 101 }, "duplicates 101: want a percentage 0-100"},
		{func(c *channel.LoadConfig) { c.Tx = "NOPE0001" }, `unknown transaction "NOPE0001"`},
		{func(c *channel.LoadConfig) { c.Fields = map[string]string{"wdAcct": "abc"} }, "WD_ACCT"},
		{func(c *channel.LoadConfig) { c.Fields = map[string]string{"bank": "LHB"} }, `no request field with JSON key "bank"`},
		{func(c *channel.LoadConfig) { c.SrcOrg = "LONG" }, "SRC_ORG"},
	}
	for _, tc := range cases {
		c := good
		tc.change(&c)
		assert.ErrorContains(t, c.Validate(), tc.want)
		_, err := channel.RunLoad(context.Background(), c)
		assert.ErrorContains(t, err, tc.want)
	}
}
