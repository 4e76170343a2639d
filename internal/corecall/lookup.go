package corecall

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/plant"
)

// Lookup is what a transaction's lookup found (SPEC §2): whether the core
// posted the request, and if it did, what it answered, decoded with the
// transaction's response layout.
type Lookup struct {
	Posted bool
	Body   generated.ResponseBody // set when Posted
	// Status is the core's HTTP status (200 or 404), Elapsed how long the
	// lookup took: the ledger's history records both.
	Status  int
	Elapsed time.Duration
}

// Lookup asks the core whether the request req of transaction tx, sent with
// header GUID guid, was posted: a GET of the lookup path its layout declares
// (never a POST). 200 is posted, with a body that must fit tx's response
// layout and carry the same guid; 404 is never posted. Anything else —
// another status, a body that does not fit or names another GUID, no answer
// — is an error: the caller cannot settle the row from it. A transaction
// declared "lookup none" is refused with generated.ErrNoLookup before any
// call.
func (c *Client) Lookup(ctx context.Context, tx *generated.Transaction, guid string, req generated.RequestBody) (Lookup, error) {
	path, err := req.LookupPath(guid)
	if err != nil {
		return Lookup{}, fmt.Errorf("corecall: lookup %s %s: %w", tx.Code, guid, err)
	}
	start := time.Now()
	res := c.exchange(ctx, start, http.MethodGet, path, guid, nil, nil)
	took := time.Since(start)
	fail := func(format string, args ...any) (Lookup, error) {
		return Lookup{}, fmt.Errorf("corecall: lookup %s %s: GET %s: %w", tx.Code, guid, path, fmt.Errorf(format, args...))
	}
	if res.err != nil {
		return fail("%w", res.err)
	}
	switch st := res.resp.status; {
	case st == http.StatusOK:
	case st == http.StatusNotFound:
		return Lookup{Status: http.StatusNotFound, Elapsed: took}, nil
	case unavailable(st):
		return fail("core answered HTTP %d", st)
	default:
		return fail("%w: HTTP %d", ErrUnusableAnswer, st)
	}
	if res.resp.bodyErr != nil {
		return fail("reading the answer: %v", res.resp.bodyErr)
	}
	// The answer must say which request it is about: one about another
	// GUID, or about none, must not settle this one.
	if err := aboutGUID(res.resp.body, guid); err != nil && !plant.On(plant.LookupOtherGUID) {
		return fail("%w: %v", ErrUnusableAnswer, err)
	}
	body := tx.NewResponse()
	if err := decodeSuccess(body, res.resp.body); err != nil {
		return fail("%w: %v", ErrUnusableAnswer, err)
	}
	return Lookup{Posted: true, Body: body, Status: http.StatusOK, Elapsed: took}, nil
}

// ErrUnusableAnswer marks a lookup the core answered whole with something
// that settles nothing: a status other than 200 and 404 that does not say
// the core is unavailable, or a 200 that does not fit the response layout or
// is about another GUID. The core was reached and is answering; only this
// row's answer is wrong, so a batch run leaves the row unchanged and goes
// on with the next (a run stops only at a core it cannot reach).
var ErrUnusableAnswer = errors.New("the core's answer settles nothing")

// unavailable reports whether an HTTP status says the core, not the one
// request, cannot be served now: too many requests, or a gateway or the
// core itself saying it is down or overloaded.
func unavailable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func quoteOrMissing(s *string) string {
	if s == nil {
		return "missing"
	}
	return fmt.Sprintf("%q", *s)
}

// Base is the core's base URL the client calls below (--core), without a
// trailing slash.
func (c *Client) Base() string { return c.base }

// Answer is the shape of a core's answer to a GET: its status, the media
// type of its body without parameters ("" when it declares none), and its
// body (at most maxBody bytes) with the request's own path and GUID
// replaced by MaskPath and MaskGUID. Two answers are the same answer when
// they are equal (==): a 404 handler that echoes the path or the GUID it
// was asked about answers two requests alike.
type Answer struct {
	Status    int
	MediaType string
	Body      string
}

// The marks that stand in an Answer's body for the request's path and GUID.
const (
	MaskPath = "{path}"
	MaskGUID = "{guid}"
)

// Probe GETs path below the base URL and says how the core answered, for
// settling's check that a lookup's 404 comes from the lookup's own route
// (batch.LookupGuard). Only a GET is ever sent; guid goes in X-GUID as on
// every call. No answer, or a body that cannot be read whole, is an error.
func (c *Client) Probe(ctx context.Context, path, guid string) (Answer, error) {
	res := c.exchange(ctx, time.Now(), http.MethodGet, path, guid, nil, nil)
	if res.err != nil {
		return Answer{}, fmt.Errorf("corecall: GET %s: %w", path, res.err)
	}
	if res.resp.bodyErr != nil {
		return Answer{}, fmt.Errorf("corecall: GET %s: HTTP %d: reading the answer: %w", path, res.resp.status, res.resp.bodyErr)
	}
	mt, _, err := mime.ParseMediaType(res.resp.contentType)
	if err != nil {
		mt = ""
	}
	return Answer{Status: res.resp.status, MediaType: mt, Body: mask(string(res.resp.body), c.prefix+path, path, guid)}, nil
}

// mask replaces in body the request target (target, or path without the
// base URL's prefix), as it is or with its slashes escaped as JSON
// encoders may ("\/"), by MaskPath, then guid by MaskGUID. The longer
// forms go first, so that the target is masked whole.
func mask(body, target, path, guid string) string {
	r := strings.NewReplacer(
		target, MaskPath, strings.ReplaceAll(target, "/", `\/`), MaskPath,
		path, MaskPath, strings.ReplaceAll(path, "/", `\/`), MaskPath,
		guid, MaskGUID,
	)
	return r.Replace(body)
}
