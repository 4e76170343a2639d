// Command lhsend is the channel client (SPEC §9): it builds LH-STD request
// frames, sends them to the relay and prints the decoded answers. Operators
// use it to poke a live relay; the demo and the load benchmark drive it.
//
//	lhsend [--addr HOST:PORT] [--tx CODE] [--guid HEX] [body flags…]    one request from flags
//	lhsend [--addr HOST:PORT] --stdin | -                               requests from JSON objects on stdin
//	lhsend [--addr HOST:PORT] --raw HEX | --raw-file PATH               bytes as they are
//	lhsend [--addr HOST:PORT] --count N [--concurrency C] [--rate R] [--duplicates P]   load
//
// Body flags are the request fields of every registered transaction, named
// after their JSON keys in kebab-case (wdBank → --wd-bank); a field not given
// takes the default its layout declares. See lhsend --help.
//
// Exit status: 0 when every answer arrived (whatever its response code); 1
// when the relay cannot be reached, an answer is missing, malformed or names
// another request, or a load run was cut short; 2 for bad arguments or
// values. Errors are one line on standard error.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/channel"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/generated"
	"lhrelay/internal/tlsconf"
)

// A first signal cuts a load run short and prints its summary; a second
// one kills at once (app.SignalContext).
func main() {
	app.Main(func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return run(ctx, args, os.Stdin, stdout, stderr)
	})
}

// Exit statuses.
const (
	exitOK     = app.ExitOK
	exitFailed = app.ExitAttention   // unreachable, no answer, malformed answer, mismatch
	exitUsage  = app.ExitBadSettings // bad arguments or values
)

const defaultAddr = "127.0.0.1:9200"

type options struct {
	addr           string
	tx             string
	guid           string
	srcOrg, dstOrg string
	fields         map[string]string // body flags given, by JSON key
	flagNames      map[string]string // body flag name by JSON key
	stdin          bool
	json           bool
	raw            []byte
	rawGiven       bool
	timeout        time.Duration
	tlsCA          string      // --tls-ca
	tlsCert        string      // --tls-cert
	tlsKey         string      // --tls-key
	describe       bool        // --describe: list the registered layouts
	print          bool        // --print: print the frames, send nothing
	bad            string      // --bad: spoil the frame to draw this code
	tls            *tls.Config // built from them; nil: plain TCP

	load        bool // --count given
	count       int
	concurrency int
	rate        float64
	duplicates  float64
	seed        uint64
}

// bodyFlag is a command-line flag standing for a request field.
type bodyFlag struct {
	name string // flag name, without dashes
	key  string // JSON key
}

// bodyFlags names a flag for every request JSON key of every registered
// transaction: the key in kebab-case, or the key itself when kebab-case would
// not turn back into it, prefixed with "body-" if an lhsend flag has the name.
func bodyFlags(reserved func(string) bool) []bodyFlag {
	var out []bodyFlag
	for _, key := range channel.AllRequestKeys() {
		name := channel.KebabFlag(key)
		if channel.CamelKey(name) != key {
			name = key
		}
		if reserved(name) {
			name = "body-" + name
		}
		out = append(out, bodyFlag{name: name, key: key})
	}
	return out
}

// fieldUsage describes a body flag: which transactions' fields it fills and
// the defaults their layouts declare.
func fieldUsage(key string) string {
	var owners, defaults []string
	for _, tx := range generated.Transactions() {
		for _, f := range tx.RequestFields {
			if f.JSON != key {
				continue
			}
			owners = append(owners, tx.Code+" "+f.Name)
			switch {
			case f.HasDefault && f.Vary:
				defaults = append(defaults, fmt.Sprintf("%s: default %q; random %d-%d per frame in a load run", tx.Code, f.Default, f.VaryMin, f.VaryMax))
			case f.HasDefault:
				defaults = append(defaults, fmt.Sprintf("%s: default %q", tx.Code, f.Default))
			}
		}
	}
	u := "request field " + strings.Join(owners, ", ")
	if len(defaults) > 0 {
		u += " (" + strings.Join(defaults, "; ") + ")"
	}
	return u
}

const usageText = `usage:
  lhsend [--addr HOST:PORT] [--tx CODE] [--guid HEX] [body flags...] [--json]
  lhsend [--addr HOST:PORT] --stdin | -        JSON request objects on stdin
  lhsend [--addr HOST:PORT] --raw HEX | --raw-file PATH
  lhsend [--addr HOST:PORT] --count N [--concurrency C] [--rate R] [--duplicates P]

Sends LH-STD request frames to the relay and prints the decoded answers
(SPEC section 9). JSON objects hold the layout's JSON keys plus optional "tx"
and "guid"; body flags given too override their values.

Exit status: 0 every answer arrived; 1 unreachable, missing, malformed or
mismatched answer; 2 bad arguments.

`

// parseArgs reads the command line. Its errors are one line, for stderr.
func parseArgs(args []string, usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("lhsend", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := options{fields: make(map[string]string), flagNames: make(map[string]string)}
	fs.StringVar(&o.addr, "addr", defaultAddr, "relay `HOST:PORT`")
	fs.StringVar(&o.tx, "tx", generated.ClientDefault().Code, "transaction `code`: "+strings.Join(channel.TxCodes(), ", "))
	fs.StringVar(&o.guid, "guid", "", "request `GUID`, 32 lowercase hex digits (default: a fresh random one)")
	fs.StringVar(&o.srcOrg, "src-org", generated.DefaultSrcOrg, "sending institution (SRC_ORG)")
	fs.StringVar(&o.dstOrg, "dst-org", generated.DefaultDstOrg, "receiving institution (DST_ORG)")
	fs.BoolVar(&o.stdin, "stdin", false, "read JSON request objects from standard input (same as -)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of tables")
	fs.Func("raw", "send these bytes, written as `hex`, as they are (to probe malformed input)", func(v string) error {
		b, err := channel.ParseHex(v)
		o.raw, o.rawGiven = b, true
		return err
	})
	fs.Func("raw-file", "send the bytes of `file` as they are", func(v string) error {
		if o.rawGiven {
			return errors.New("give --raw or --raw-file, not both")
		}
		b, err := os.ReadFile(v)
		o.raw, o.rawGiven = b, true
		return err
	})
	cliflag.SecondsVar(fs, &o.timeout, "answer-timeout", channel.DefaultTimeout, "`seconds` to wait for the connection and for each answer (e.g. 5, 0.5); not --timeout, which is a core call's")
	fs.IntVar(&o.count, "count", 0, "load: send `N` frames and print a summary")
	fs.IntVar(&o.concurrency, "concurrency", 1, "load: `connections` in parallel, each carrying one frame at a time")
	fs.Float64Var(&o.rate, "rate", 0, "load: cap on `frames/s` over all connections (0 = as fast as answers come)")
	fs.Float64Var(&o.duplicates, "duplicates", 0, "load: `percent` of frames reusing an earlier frame's GUID and body (ledger replay)")
	fs.Uint64Var(&o.seed, "seed", 0, "load: `seed` for amounts and duplicates, to repeat a run (0 = random)")

	fs.BoolVar(&o.describe, "describe", false, "print the registered transactions (core call, lookup, each request field's offset, length and kind) and exit")
	fs.BoolVar(&o.print, "print", false, "print the request frames instead of sending them")
	fs.StringVar(&o.bad, "bad", "", "send the request spoilt so that the relay answers `code`: "+string(generated.RspUnknownTx)+" (a TX_CODE no layout registers) or "+string(generated.RspBadFrame)+" (one body byte short)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "speak TLS to the relay, trusting the CAs of this PEM `file` (default with --tls-cert: the system's)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM `file` of a client certificate to present (a relay with --tls-client-ca requires one; with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM `file` of the private key of --tls-cert")

	fixed := func(name string) bool { return fs.Lookup(name) != nil || cliflag.Standard(name) }
	for _, bf := range bodyFlags(fixed) {
		o.flagNames[bf.key] = bf.name
		fs.Func(bf.name, fieldUsage(bf.key), func(v string) error {
			o.fields[bf.key] = v
			return nil
		})
	}

	// "-" stands for --stdin, and flags may follow it.
	positional, err := cliflag.Read(fs, args, cliflag.Usage{Out: usage, Text: usageText, DashFlag: "stdin"})
	if err != nil {
		return o, err
	}
	if len(positional) > 0 {
		return o, fmt.Errorf("unexpected argument %q", positional[0])
	}
	fs.Visit(func(f *flag.Flag) { o.load = o.load || f.Name == "count" })
	return o, o.check(fs)
}

// check refuses combinations of flags that make no sense together.
func (o *options) check(fs *flag.FlagSet) error {
	var given []string
	fs.Visit(func(f *flag.Flag) { given = append(given, f.Name) })
	has := func(name string) bool { return slices.Contains(given, name) }
	if o.addr == "" {
		return errors.New("--addr: empty address")
	}
	if err := o.buildTLS(); err != nil {
		return err
	}
	if o.bad != "" && (o.stdin || o.load || o.rawGiven) {
		return errors.New("--bad spoils one request built from the flags: no --stdin, --count or --raw with it")
	}
	if o.print && (o.load || o.rawGiven) {
		return errors.New("--print prints the requests built from the flags or --stdin: no --count or --raw with it")
	}
	if o.rawGiven {
		if o.stdin || o.load || len(o.fields) > 0 || has("tx") || has("guid") {
			return errors.New("--raw/--raw-file send bytes as they are: no --stdin, --count, --tx, --guid or body flags with them")
		}
		return nil
	}
	if o.load {
		if o.guid != "" {
			return errors.New("--guid with --count: a load run varies GUIDs (use --duplicates to reuse them)")
		}
		if o.count < 1 {
			return fmt.Errorf("--count %d: want at least 1", o.count)
		}
		if o.concurrency < 1 {
			return fmt.Errorf("--concurrency %d: want at least 1", o.concurrency)
		}
		return nil
	}
	for _, name := range []string{"concurrency", "rate", "duplicates", "seed"} {
		if has(name) {
			return fmt.Errorf("--%s is for load runs: give --count too", name)
		}
	}
	return nil
}

// buildTLS makes the TLS configuration of --tls-ca, --tls-cert and
// --tls-key: none of them means plain TCP.
func (o *options) buildTLS() error {
	if o.tlsCA == "" && o.tlsCert == "" && o.tlsKey == "" {
		return nil
	}
	cfg := tlsconf.Harden(&tls.Config{})
	if o.tlsCA != "" {
		pool, err := tlsconf.LoadPool(o.tlsCA)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert %s / --tls-key %s: %w", o.tlsCert, o.tlsKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	o.tls = cfg
	return nil
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	switch {
	case o.describe:
		if err := describe(stdout); err != nil {
			return fail(stderr, exitFailed, err)
		}
		return exitOK
	case o.rawGiven:
		return runRaw(ctx, o, stdout, stderr)
	case o.load:
		return runLoad(ctx, o, stdin, stdout, stderr)
	}
	return runRequests(ctx, o, stdin, stdout, stderr)
}

// fail prints err as one line and returns code.
func fail(stderr io.Writer, code int, err error) int {
	if code == exitUsage {
		err = app.Bad(err)
	}
	return app.Report(stderr, "lhsend", err)
}

// requests reads the requests to send: one from the flags, or one per JSON
// object on stdin with the flags' values as defaults (tx, guid) and
// overrides (body fields). Body fields given nowhere are left out: the
// caller fills them with the layout's defaults (channel.WithDefaults).
func requests(o options, stdin io.Reader) ([]channel.Request, error) {
	reqs := []channel.Request{{Fields: map[string]string{}}}
	if o.stdin {
		var err error
		if reqs, err = channel.ReadJSONRequests(stdin); err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
	}
	used := make(map[string]bool, len(o.fields))
	var lastKeys []string
	for i := range reqs {
		r := &reqs[i]
		r.Tx = cmp.Or(r.Tx, o.tx)
		r.GUID = cmp.Or(r.GUID, o.guid)
		r.SrcOrg, r.DstOrg = o.srcOrg, o.dstOrg
		tx, err := channel.LookupTx(r.Tx)
		if err != nil {
			return nil, err
		}
		lastKeys = channel.RequestKeys(tx)
		for key, v := range o.fields {
			// With several JSON requests, a body flag fills those whose
			// transaction has the field.
			if slices.Contains(lastKeys, key) {
				r.Fields[key] = v
				used[key] = true
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(o.fields)) {
		if !used[key] {
			return nil, fmt.Errorf("--%s is not a field of %s (its fields: %s)", o.flagName(key), reqs[len(reqs)-1].Tx, o.flagList(lastKeys))
		}
	}
	return reqs, nil
}

// flagName is the flag standing for a body field's JSON key.
func (o options) flagName(key string) string {
	return cmp.Or(o.flagNames[key], channel.KebabFlag(key))
}

func (o options) flagList(keys []string) string {
	var out []string
	for _, k := range keys {
		out = append(out, "--"+o.flagName(k))
	}
	return strings.Join(out, ", ")
}

// exchange is one request and its answer, for printing.
type exchange struct {
	Request     json.RawMessage `json:"request"`
	Answer      channel.Answer  `json:"answer"`
	LatencyMs   float64         `json:"latencyMs"`
	SentFrame   string          `json:"sentFrame"`
	AnswerFrame string          `json:"answerFrame"`
}

func runRequests(ctx context.Context, o options, stdin io.Reader, stdout, stderr io.Writer) int {
	reqs, err := requests(o, stdin)
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	frames := make([][]byte, len(reqs))
	for i, r := range reqs {
		tx, err := channel.LookupTx(r.Tx)
		if err != nil {
			return fail(stderr, exitUsage, err)
		}
		r.Fields = channel.WithDefaults(tx, r.Fields)
		r.GUID = cmp.Or(r.GUID, channel.NewGUID())
		if frames[i], err = r.Frame(time.Now()); err != nil {
			return fail(stderr, exitUsage, err)
		}
		if o.bad != "" {
			if frames[i], err = spoil(frames[i], generated.RspCode(o.bad)); err != nil {
				return fail(stderr, exitUsage, err)
			}
		}
	}
	if o.print {
		for _, f := range frames {
			if _, err := fmt.Fprintf(stdout, "%s\n", f); err != nil {
				return fail(stderr, exitFailed, err)
			}
		}
		return exitOK
	}
	if o.bad != "" {
		o.raw = frames[0]
		return runRaw(ctx, o, stdout, stderr)
	}
	conn, err := channel.Dial(ctx, o.addr, o.timeout, channel.WithTLS(o.tls))
	if err != nil {
		return fail(stderr, exitFailed, err)
	}
	defer conn.Close()
	stopOnCancel := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopOnCancel()

	for _, frame := range frames {
		h, body, err := channel.DecodeRequest(frame)
		if err != nil {
			return fail(stderr, exitFailed, fmt.Errorf("built a frame that does not decode: %w", err))
		}
		t0 := time.Now()
		ans, err := conn.Send(frame)
		latency := time.Since(t0)
		if err != nil {
			return fail(stderr, exitFailed, fmt.Errorf("%s %s: %w", h.TxCode, h.GUID, err))
		}
		a, err := channel.Decode(ans)
		if err != nil {
			return fail(stderr, exitFailed, fmt.Errorf("%s %s: %w: %s", h.TxCode, h.GUID, err, channel.Quote(ans)))
		}
		if err := printExchange(stdout, o.json, frame, h, body, ans, a, latency); err != nil {
			return fail(stderr, exitFailed, err)
		}
		if a.Header.GUID != h.GUID || a.Header.TxCode != h.TxCode {
			return fail(stderr, exitFailed, fmt.Errorf("mismatch: answer to %s %s names %s %s", h.TxCode, h.GUID, a.Header.TxCode, a.Header.GUID))
		}
	}
	return exitOK
}

func printExchange(w io.Writer, asJSON bool, frame []byte, h generated.Header, body generated.RequestBody,
	ans []byte, a channel.Answer, latency time.Duration) error {
	if asJSON {
		req, err := body.CoreJSON(h.GUID)
		if err != nil {
			return err
		}
		return json.NewEncoder(w).Encode(exchange{
			Request:     req,
			Answer:      a,
			LatencyMs:   float64(latency) / float64(time.Millisecond),
			SentFrame:   string(frame),
			AnswerFrame: string(ans),
		})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "request\t%s %s  %s → %s  %d bytes\n", h.TxCode, h.GUID, h.SrcOrg, h.DstOrg, len(frame))
	for _, f := range body.Fields() {
		fmt.Fprintf(tw, "  %s\t%s\n", f.Name, f.Value)
	}
	fmt.Fprintf(tw, "answer\t%d bytes in %.2fms\n", len(ans), float64(latency)/float64(time.Millisecond))
	for _, row := range a.Rows() {
		fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

// rawAnswer is one frame that came back to --raw, for printing.
type rawAnswer struct {
	Frame  string          `json:"frame"`
	Answer *channel.Answer `json:"answer,omitempty"`
	Error  string          `json:"error,omitempty"`
}

type rawOutput struct {
	Sent    string      `json:"sent"`
	Answers []rawAnswer `json:"answers"`
	Rest    string      `json:"rest,omitempty"`
	End     string      `json:"end"`
}

func runRaw(ctx context.Context, o options, stdout, stderr io.Writer) int {
	res, err := channel.Probe(ctx, o.addr, o.raw, o.timeout, channel.WithTLS(o.tls))
	if err != nil {
		return fail(stderr, exitFailed, err)
	}
	out := rawOutput{Sent: string(o.raw), End: "connection closed by the relay"}
	if res.End != nil {
		out.End = res.End.Error()
	}
	if len(res.Rest) > 0 {
		out.Rest = string(res.Rest)
	}
	var bad error
	for _, f := range res.Frames {
		ra := rawAnswer{Frame: string(f)}
		a, err := channel.Decode(f)
		ra.Answer = &a
		if err != nil {
			ra.Error = err.Error()
			if bad == nil {
				bad = err
			}
		}
		out.Answers = append(out.Answers, ra)
	}
	if o.json {
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return fail(stderr, exitFailed, err)
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "sent\t%d bytes to %s: %s\n", len(o.raw), o.addr, channel.Quote(o.raw))
		for i, ra := range out.Answers {
			fmt.Fprintf(tw, "answer %d\t%d bytes: %s\n", i+1, len(ra.Frame), channel.Quote([]byte(ra.Frame)))
			if ra.Error != "" {
				fmt.Fprintf(tw, "  error\t%s\n", ra.Error)
			}
			for _, row := range ra.Answer.Rows() {
				fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
			}
		}
		if len(res.Rest) > 0 {
			fmt.Fprintf(tw, "not a frame\t%d bytes: %s\n", len(res.Rest), channel.Quote(res.Rest))
		}
		fmt.Fprintf(tw, "end\t%s\n", out.End)
		if err := tw.Flush(); err != nil {
			return fail(stderr, exitFailed, err)
		}
	}
	switch {
	case bad != nil:
		return fail(stderr, exitFailed, bad)
	case len(res.Frames) == 0:
		return fail(stderr, exitFailed, fmt.Errorf("no answer frame from %s (%s)", o.addr, out.End))
	}
	return exitOK
}

func runLoad(ctx context.Context, o options, stdin io.Reader, stdout, stderr io.Writer) int {
	reqs, err := requests(o, stdin)
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	if len(reqs) != 1 {
		return fail(stderr, exitUsage, fmt.Errorf("--count takes one JSON request object as a template, got %d", len(reqs)))
	}
	if reqs[0].GUID != "" {
		return fail(stderr, exitUsage, errors.New("a load run varies GUIDs: no \"guid\" in the JSON template (use --duplicates to reuse them)"))
	}
	cfg := channel.LoadConfig{
		Addr: o.addr, Tx: reqs[0].Tx, SrcOrg: o.srcOrg, DstOrg: o.dstOrg, Fields: reqs[0].Fields,
		Count: o.count, Concurrency: o.concurrency, Rate: o.rate, Duplicates: o.duplicates,
		Timeout: o.timeout, Seed: o.seed, TLS: o.tls,
	}
	if err := cfg.Validate(); err != nil {
		return fail(stderr, exitUsage, err)
	}
	bar := app.NewStatusLine(stderr)
	if bar.Enabled() {
		cfg.Progress = func(p channel.Progress) { bar.Show(progressText(p), false) }
	}
	s, runErr := channel.RunLoad(ctx, cfg)
	bar.Clear()
	if runErr != nil && s.Frames == 0 {
		return fail(stderr, exitFailed, runErr)
	}
	if o.json {
		err = json.NewEncoder(stdout).Encode(s)
	} else {
		err = s.WriteText(stdout)
	}
	if err != nil {
		return fail(stderr, exitFailed, err)
	}
	switch {
	case runErr != nil:
		return fail(stderr, exitFailed, runErr)
	case !s.OK():
		return fail(stderr, exitFailed, fmt.Errorf("%d of %d frames without a valid answer to their own request (errors %d, malformed %d, mismatches %d)",
			s.Frames-s.Answered+s.Mismatches, s.Frames, s.Errors, s.Malformed, s.Mismatches))
	}
	return exitOK
}
