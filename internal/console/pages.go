package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// page is what every page's template gets: the page's own data and the
// frame around it.
type page struct {
	Title  string
	Ledger string // its path or URL (no password)
	Store  string
	Who    string
	Now    time.Time
	Data   any
}

func (s *Server) parseTemplates() error {
	funcs := template.FuncMap{
		"utc":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"utcms":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
		"ago":     ago,
		"meaning": meaning,
		"dash":    dash,
		"list":    func(v ...string) []string { return v },
		"ms":      func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) },
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return err
	}
	s.pages = map[string]*template.Template{}
	for _, n := range names {
		if n == "templates/base.html" {
			continue
		}
		t, err := template.New("base.html").Funcs(funcs).ParseFS(files, "templates/base.html", n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		s.pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return nil
}

// render executes a page into a buffer first: a template error is a 500,
// never half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	var b bytes.Buffer
	p := page{Title: title, Ledger: s.l.Path(), Store: s.l.Store(), Who: whoOf(r), Now: time.Now(), Data: data}
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.log.Error("console: rendering a page", "page", name, "err", err)
		http.Error(w, "500 the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, r, status, "error", strconv.Itoa(status), msg)
}

// overviewView is the overview page's data.
type overviewView struct {
	O           *Overview
	Audit       AuditResult
	States      []stateCount
	ShowAccount bool
	Cfg         Config
	RefreshMs   int64
	Unknown     int64
}

type stateCount struct {
	State string
	Count int64
}

func (s *Server) overviewView(r *http.Request) overviewView {
	o, a := s.currentOverview(r.Context())
	v := overviewView{O: o, Audit: a, Cfg: s.cfg, RefreshMs: s.cfg.Refresh.Milliseconds(), Unknown: o.ByState[ledger.StateUnknown]}
	for _, st := range ledger.States {
		v.States = append(v.States, stateCount{string(st), o.ByState[st]})
	}
	return v
}

func (s *Server) pageOverview(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "overview", "Overview", s.overviewView(r))
}

// overviewJSON is /api/overview: what the overview page shows, for its
// refresh (console.js) and for scripts.
type overviewJSON struct {
	Total         int64            `json:"total"`
	ByState       map[string]int64 `json:"byState"`
	ByCode        []codeJSON       `json:"byCode"`
	OldestUnknown string           `json:"oldestUnknown,omitempty"`
	OldestSent    string           `json:"oldestSent,omitempty"`
	StaleSent     int64            `json:"staleSent"`
	Resend        int64            `json:"resend"`
	OutOfAttempts int64            `json:"outOfAttempts"`
	Read          string           `json:"read"`
	Error         string           `json:"error,omitempty"`
	Audit         auditJSON        `json:"audit"`
}

type codeJSON struct {
	State   string `json:"state"`
	RspCode string `json:"rspCode"`
	Meaning string `json:"meaning"`
	Count   int64  `json:"count"`
}

type auditJSON struct {
	Ran       bool   `json:"ran"`
	Running   bool   `json:"running"`
	OK        bool   `json:"ok"`
	Started   string `json:"started,omitempty"`
	Error     string `json:"error,omitempty"`
	Chains    int    `json:"chains"`
	Entries   int64  `json:"entries"`
	Conflicts int64  `json:"conflicts"`
}

func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request) {
	v := s.overviewView(r)
	o := v.O
	j := overviewJSON{Total: o.Total, ByState: map[string]int64{}, StaleSent: o.StaleSent, Resend: o.Resend,
		OutOfAttempts: o.OutOfAttempts, Read: o.Read.UTC().Format(time.RFC3339Nano), Error: o.Err}
	for _, st := range v.States {
		j.ByState[st.State] = st.Count
	}
	for _, c := range o.ByCode {
		j.ByCode = append(j.ByCode, codeJSON{string(c.State), c.RspCode, meaning(c.RspCode), c.Count})
	}
	if !o.OldestUnknown.IsZero() {
		j.OldestUnknown = o.OldestUnknown.UTC().Format("2006-01-02 15:04:05")
	}
	if !o.OldestSent.IsZero() {
		j.OldestSent = o.OldestSent.UTC().Format("2006-01-02 15:04:05")
	}
	a := v.Audit
	j.Audit = auditJSON{Ran: a.Ran, Running: a.Running, OK: a.OK, Error: a.Err, Chains: a.Summary.Chains,
		Entries: a.Summary.Entries, Conflicts: a.Summary.ConflictCount}
	if !a.Started.IsZero() {
		j.Audit.Started = a.Started.UTC().Format(time.RFC3339)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(j)
}

// A need is one reason a row needs a person, and the rows it selects.
type need struct {
	Key, Title, Hint string
	filter           func(Config) ledger.Filter
}

var needs = []need{needUnknown, needStale, needFailed, needOut}

var (
	needUnknown = need{
		"unknown", "UNKNOWN", "sent, result unknown: settled by the relay's --settle-every or resolve, never resent",
		func(Config) ledger.Filter { return ledger.Filter{States: []ledger.State{ledger.StateUnknown}} }}
	needStale = need{"stale", "SENT too long", "older than the stale window: a relay may have died mid-call; resolve --stale-sent settles it",
		func(c Config) ledger.Filter {
			return ledger.Filter{States: []ledger.State{ledger.StateSent}, OlderThan: c.StaleSent}
		}}
	needFailed = need{"failed", "FAILED, never sent", "reprocess sends it again",
		func(c Config) ledger.Filter { f := failedNotSent(); f.MaxAttempts = c.MaxAttempts; return f }}
	needOut = need{"out", "out of attempts", "reprocess will not send it again: someone must decide",
		func(c Config) ledger.Filter { f := failedNotSent(); f.MinAttempts = c.MaxAttempts; return f }}
)

// needsView is the page of rows that need a person.
type needsView struct {
	Needs    []need
	Sel      map[string]bool
	TxCodes  []string
	Tx       string
	State    string
	Age      string // minimum age in seconds, as typed
	Rows     []needRow
	Next     string // the next page's URL, "" on the last page
	First    bool
	PageSize int
}

type needRow struct {
	ledger.Row
	Need need
	Age  time.Duration
}

// cursorSep separates a cursor's time and GUID (neither holds it).
const cursorSep = "~"

func encodeCursor(c ledger.Cursor) string {
	return c.UpdatedAt.UTC().Format(time.RFC3339Nano) + cursorSep + c.GUID
}

func decodeCursor(s string) (ledger.Cursor, error) {
	at, guid, ok := strings.Cut(s, cursorSep)
	if !ok {
		return ledger.Cursor{}, errors.New("bad cursor")
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil || !validGUID(guid) {
		return ledger.Cursor{}, errors.New("bad cursor")
	}
	return ledger.Cursor{UpdatedAt: t, GUID: guid}, nil
}

// validGUID: 32 lowercase hex digits (SPEC 1).
func validGUID(g string) bool {
	return len(g) == 32 && strings.Trim(g, "0123456789abcdef") == ""
}

func (s *Server) pageNeeds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := needsView{Needs: needs, Sel: map[string]bool{}, Tx: q.Get("tx"), State: q.Get("state"), Age: q.Get("age"), PageSize: s.cfg.PageSize}
	for _, tx := range generated.Transactions() {
		v.TxCodes = append(v.TxCodes, tx.Code)
	}
	for _, k := range q["need"] {
		v.Sel[k] = true
	}
	if len(v.Sel) == 0 {
		for _, n := range needs {
			v.Sel[n.Key] = true
		}
	}
	if v.Tx != "" && !slices.Contains(v.TxCodes, v.Tx) {
		s.fail(w, r, http.StatusBadRequest, "unknown transaction "+strconv.Quote(v.Tx))
		return
	}
	if v.State != "" && !ledger.State(v.State).Valid() {
		s.fail(w, r, http.StatusBadRequest, "unknown state "+strconv.Quote(v.State))
		return
	}
	var age time.Duration
	if v.Age != "" {
		n, err := strconv.ParseUint(v.Age, 10, 31)
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, "age: want whole seconds")
			return
		}
		age = time.Duration(n) * time.Second
	}
	var cur ledger.Cursor
	if a := q.Get("after"); a != "" {
		c, err := decodeCursor(a)
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, "after: "+err.Error())
			return
		}
		cur = c
	}
	v.First = cur.IsZero()
	// One keyset page per need, merged: each is a range of the (state,
	// updated_at) index, and the first PageSize of their union in
	// (updated_at, guid) order are the page.
	n := s.cfg.PageSize
	var rows []needRow
	// FAILED/E902 rows are read once when both of their needs are asked
	// for, and told apart by their attempts: either need alone would read
	// through the other's rows to find none of its own.
	both := v.Sel[needFailed.Key] && v.Sel[needOut.Key]
	for _, nd := range needs {
		if !v.Sel[nd.Key] || both && nd.Key == needOut.Key {
			continue
		}
		f := nd.filter(s.cfg)
		if both && nd.Key == needFailed.Key {
			f = failedNotSent()
		}
		if v.State != "" && !slices.Contains(f.States, ledger.State(v.State)) {
			continue
		}
		f.TxCode = v.Tx
		f.OlderThan = max(f.OlderThan, age)
		page, err := s.l.Page(r.Context(), f, cur, n+1)
		if err != nil {
			s.log.Error("console: reading rows", "err", err)
			s.fail(w, r, http.StatusInternalServerError, "the ledger could not be read")
			return
		}
		for _, row := range page {
			why := nd
			if both && nd.Key == needFailed.Key && row.Attempts >= s.cfg.MaxAttempts {
				why = needOut
			}
			rows = append(rows, needRow{Row: row, Need: why})
		}
	}
	slices.SortFunc(rows, func(a, b needRow) int {
		if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.GUID, b.GUID)
	})
	if len(rows) > n {
		rows = rows[:n]
		next := url.Values{}
		for k, vs := range q {
			if k != "after" {
				next[k] = vs
			}
		}
		next.Set("after", encodeCursor(ledger.After(rows[n-1].Row)))
		v.Next = "/needs?" + next.Encode()
	}
	now := time.Now()
	if o, _ := s.currentOverview(r.Context()); !o.Now.IsZero() {
		now = o.Now.Add(time.Since(o.Read)) // the database's clock, as ages are measured
	}
	for i := range rows {
		rows[i].Age = now.Sub(rows[i].UpdatedAt)
		rows[i].Request, rows[i].Response = nil, nil
	}
	v.Rows = rows
	s.render(w, r, http.StatusOK, "needs", "Rows that need a person", v)
}

// searchView is the search page's data.
type searchView struct {
	Q       string
	Matches []ledger.GUIDMatch
	More    bool // more than searchMax match
	Error   string
}

// searchMax is how many GUIDs a search lists.
const searchMax = 50

func (s *Server) pageSearch(w http.ResponseWriter, r *http.Request) {
	q := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("q")))
	v := searchView{Q: q}
	switch {
	case q == "":
	case len(q) > 32 || strings.Trim(q, "0123456789abcdef") != "":
		v.Error = "a GUID is 32 hex digits: search by its first few"
	default:
		m, err := s.l.SearchGUIDs(r.Context(), q, searchMax+1)
		if err != nil {
			s.log.Error("console: search", "err", err)
			s.fail(w, r, http.StatusInternalServerError, "the ledger could not be read")
			return
		}
		if len(m) == 1 && m[0].GUID == q || len(m) == 1 && r.URL.Query().Get("go") != "" {
			http.Redirect(w, r, "/guid/"+m[0].GUID, http.StatusSeeOther)
			return
		}
		if len(m) > searchMax {
			m, v.More = m[:searchMax], true
		}
		v.Matches = m
	}
	s.log.Info("console: search", "who", whoOf(r), "q", q)
	s.render(w, r, http.StatusOK, "search", "Search", v)
}

func (s *Server) pageLogin(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", "Log in", s.cfg.Tokens != nil)
}

// postLogin takes a token from the login form and keeps it in a cookie
// that scripts cannot read and that no other site's request carries.
func (s *Server) postLogin(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Tokens == nil {
		s.fail(w, r, http.StatusNotFound, "this console takes no token")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	name, ok := s.cfg.Tokens.name(tok)
	if !ok {
		s.log.Warn("console: login refused: unknown token", "remote", r.RemoteAddr)
		s.render(w, r, http.StatusForbidden, "login", "Log in", true)
		return
	}
	s.log.Info("console: login", "who", "token "+name, "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	case d < 48*time.Hour:
		return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + " days"
}

func meaning(code string) string {
	if code == "" {
		return ""
	}
	return generated.RspCode(code).Meaning()
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "–"
	}
	return s
}
