package corecall

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The client speaks the small part of HTTP/1.1 (RFC 9112) a core call
// needs: one request written whole, one response read whole. Nothing here
// retries, redirects or decompresses.

// Limits on what is read of a response besides its body (maxBody). A
// line may be longer than the connection's read buffer: readLine gathers
// it, within these limits.
const (
	maxHeaderBytes = 64 << 10 // a status line and its header fields together, line endings included
	maxChunkLine   = 4 << 10  // one chunk-size line, extensions included
	maxInterim     = 8        // 1xx responses skipped before the final one
)

// errLong is readLine's answer to a line longer than what is left of its
// limit; the caller names the limit.
var errLong = errors.New("line too long")

// errHeaderLong is a header section (or a trailer) over maxHeaderBytes.
var errHeaderLong = fmt.Errorf("header longer than %d bytes", maxHeaderBytes)

// appendRequest appends the request to dst: request line, Host,
// User-Agent (so the core's logs name the relay), the body's
// Content-Type and Content-Length, X-Guid, the blank line, the body. The
// request target is the base URL's path (prefix) followed by path. A
// request without a body carries no Content-Length for GET (as net/http
// sends it) and Content-Length: 0 for any other method, so the core never
// waits for a body. The caller has checked that prefix, path, host and guid hold
// no byte that could end a line or a field (validToken).
func appendRequest(dst []byte, method, prefix, path, host, guid string, body []byte) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, prefix...)
	dst = append(dst, path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	dst = append(dst, "\r\nUser-Agent: lhrelay"...)
	if body != nil {
		dst = append(dst, "\r\nContent-Type: application/json"...)
	}
	if body != nil || method != "GET" {
		dst = append(dst, "\r\nContent-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(body)), 10)
	}
	dst = append(dst, "\r\nX-Guid: "...)
	dst = append(dst, guid...)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// validToken reports whether s can be written as it is into a request line
// or a header field: printable ASCII without spaces, so a value can never
// end the line, split the request line or start another request.
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return s != ""
}

// response is what readResponse read: the final status, the body, and
// whether the connection may carry another request.
type response struct {
	status      int
	contentType string // the Content-Type field's value, "" when absent
	body        []byte
	bodyErr     error // reading or framing the body failed (status is known)
	keepAlive   bool  // the answer was read completely and the core did not ask to close
}

// errNoStatus marks a failure before a final status line was read: no
// response arrived.
type errNoStatus struct{ err error }

func (e errNoStatus) Error() string { return e.err.Error() }
func (e errNoStatus) Unwrap() error { return e.err }

// header is what the client uses of a response's header fields.
type header struct {
	contentLength int64 // -1 when absent
	chunked       bool
	close         bool
	contentType   string // the first Content-Type field's value, "" when absent
	typed         bool   // a Content-Type field was seen
}

// jsonType is the Content-Type the core sends on every answer: returned
// as this constant rather than copied, so reading it costs nothing.
const jsonType = "application/json"

// contentType returns v as a string, without copying the usual value.
func contentType(v []byte) string {
	if string(v) == jsonType {
		return jsonType
	}
	return string(v)
}

// readResponse reads one response from br: 1xx interim answers are
// skipped, then the final status line, the header fields and the body (up
// to maxBody). An error before the final status line is returned as err
// (wrapped in errNoStatus): no response. Once the status is known every
// failure goes into response.bodyErr, and keepAlive is false.
func readResponse(br *bufio.Reader) (response, error) {
	return readResponseInto(br, nil)
}

// readResponseInto is readResponse reading a body of a known length into
// buf's room (buf[:0]) if it fits.
func readResponseInto(br *bufio.Reader, buf []byte) (response, error) {
	var r response
	var h header
	for interim := 0; ; interim++ {
		left := maxHeaderBytes
		proto11, status, err := readStatusLine(br, &left)
		if err != nil {
			return r, errNoStatus{err}
		}
		h, err = readHeader(br, &left)
		if status >= 100 && status <= 199 && status != 101 {
			if err != nil {
				return r, errNoStatus{fmt.Errorf("after an HTTP %d: %w", status, err)}
			}
			if interim == maxInterim {
				return r, errNoStatus{fmt.Errorf("more than %d interim (1xx) responses", maxInterim)}
			}
			continue
		}
		r.status, r.contentType = status, h.contentType
		if err != nil {
			r.bodyErr = err
			return r, nil
		}
		r.keepAlive = proto11 && !h.close
		break
	}
	switch {
	case r.status == 101 || r.status == 204 || r.status == 304:
		// No body (RFC 9112 §6.3); after a 101 the connection is no longer
		// HTTP.
		r.keepAlive = r.keepAlive && r.status != 101
		return r, nil
	case h.chunked:
		r.body, r.bodyErr = readChunked(br)
	case h.contentLength >= 0:
		if h.contentLength > maxBody {
			r.bodyErr = fmt.Errorf("answer longer than %d bytes", maxBody)
			break
		}
		if int64(cap(buf)) >= int64(h.contentLength) {
			r.body = buf[:h.contentLength]
		} else {
			r.body = make([]byte, h.contentLength)
		}
		if _, err := io.ReadFull(br, r.body); err != nil {
			r.body, r.bodyErr = nil, unexpectedEOF(err)
		}
	default:
		// Delimited by the end of the connection (HTTP/1.0 style).
		r.keepAlive = false
		r.body, r.bodyErr = readToEOF(br)
	}
	if r.bodyErr != nil {
		r.body, r.keepAlive = nil, false
	}
	return r, nil
}

// readStatusLine reads "HTTP/1.x SSS reason", taking its length from
// *left (what is left of maxHeaderBytes).
func readStatusLine(br *bufio.Reader, left *int) (proto11 bool, status int, err error) {
	line, err := readLine(br, left)
	if errors.Is(err, errLong) {
		return false, 0, errHeaderLong
	}
	if err != nil {
		return false, 0, err
	}
	const proto = "HTTP/1."
	if len(line) < len(proto)+5 || string(line[:len(proto)]) != proto ||
		(line[7] != '0' && line[7] != '1') || line[8] != ' ' {
		return false, 0, fmt.Errorf("malformed status line %q", clip(line))
	}
	code := line[9:]
	if len(code) > 3 {
		if code[3] != ' ' {
			return false, 0, fmt.Errorf("malformed status line %q", clip(line))
		}
		code = code[:3]
	}
	if len(code) != 3 {
		return false, 0, fmt.Errorf("malformed status line %q", clip(line))
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return false, 0, fmt.Errorf("malformed status line %q", clip(line))
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 {
		return false, 0, fmt.Errorf("malformed status line %q", clip(line))
	}
	return line[7] == '1', status, nil
}

// readHeader reads header fields up to the blank line, taking their
// length from *left (what is left of maxHeaderBytes), and keeps the three
// that frame the body and the connection. Obsolete line folding, a field
// without a colon, conflicting lengths or a transfer coding other than
// chunked are errors: a body framed in a way the client does not follow
// exactly is not read at all.
func readHeader(br *bufio.Reader, left *int) (header, error) {
	h := header{contentLength: -1}
	for {
		line, err := readLine(br, left)
		if errors.Is(err, errLong) {
			return h, errHeaderLong
		}
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			return h, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return h, errors.New("obsolete header line folding")
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return h, fmt.Errorf("malformed header line %q", clip(line))
		}
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		switch {
		case asciiEqualFold(name, "content-length"):
			n, ok := parseLength(value)
			if !ok || (h.contentLength >= 0 && h.contentLength != n) {
				return h, fmt.Errorf("bad Content-Length %q", clip(value))
			}
			h.contentLength = n
		case asciiEqualFold(name, "transfer-encoding"):
			if !asciiEqualFold(value, "chunked") || h.chunked {
				return h, fmt.Errorf("unsupported Transfer-Encoding %q", clip(value))
			}
			h.chunked = true
		case asciiEqualFold(name, "content-type"):
			if !h.typed {
				h.contentType, h.typed = contentType(value), true
			}
		case asciiEqualFold(name, "connection"):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				if asciiEqualFold(bytes.Trim(tok, " \t"), "close") {
					h.close = true
				}
			}
		}
		if h.chunked && h.contentLength >= 0 {
			// RFC 9112 §6.3: a sender must not send both; a message with
			// both is a smuggling attempt or a broken intermediary.
			return h, errors.New("both Transfer-Encoding and Content-Length")
		}
	}
}

// readChunked reads a chunked body (RFC 9112 §7.1) and its trailer.
func readChunked(br *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		left := maxChunkLine
		line, err := readLine(br, &left)
		if errors.Is(err, errLong) {
			return nil, fmt.Errorf("chunk-size line longer than %d bytes", maxChunkLine)
		}
		if err != nil {
			return nil, fmt.Errorf("chunk size: %w", err)
		}
		if semi := bytes.IndexByte(line, ';'); semi >= 0 {
			line = line[:semi] // chunk extensions are ignored
		}
		line = bytes.TrimRight(line, " \t")
		size, ok := parseHex(line)
		if !ok {
			return nil, fmt.Errorf("bad chunk size %q", clip(line))
		}
		if size == 0 {
			break
		}
		if int64(len(body))+size > maxBody {
			return nil, fmt.Errorf("answer longer than %d bytes", maxBody)
		}
		if body == nil {
			body = make([]byte, 0, size)
		}
		n := len(body)
		body = append(body, make([]byte, size)...)
		if _, err := io.ReadFull(br, body[n:]); err != nil {
			return nil, unexpectedEOF(err)
		}
		left = maxChunkLine
		if crlf, err := readLine(br, &left); err != nil || len(crlf) != 0 {
			return nil, errors.New("chunk not followed by CRLF")
		}
	}
	// The trailer: header fields, ignored, up to the blank line.
	left := maxHeaderBytes
	if _, err := readHeader(br, &left); err != nil {
		return nil, fmt.Errorf("trailer: %w", err)
	}
	if body == nil {
		body = []byte{}
	}
	return body, nil
}

// readToEOF reads a body delimited by the end of the connection.
func readToEOF(br *bufio.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(br, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("answer longer than %d bytes", maxBody)
	}
	return b, nil
}

// readLine returns the next line without its CRLF (a bare LF is accepted,
// RFC 9112 §2.2) and takes its length, line ending included, from *left:
// a line longer than *left is errLong. A line that fits br's buffer is
// returned from the buffer, uncopied and valid until the next read from
// br; a longer one is gathered into a slice of its own (readLongLine).
func readLine(br *bufio.Reader, left *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		line, err = readLongLine(br, line, *left)
	}
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	if len(line) > *left {
		return nil, errLong
	}
	*left -= len(line)
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readLongLine gathers a line that filled br's buffer: start is its first
// part (the buffer, overwritten by the next read, so it is copied), the
// rest is read up to and including the '\n'. It stops with errLong as soon
// as the line is longer than most, so a line without an end costs at most
// most bytes and one buffer.
func readLongLine(br *bufio.Reader, start []byte, most int) ([]byte, error) {
	line := append([]byte(nil), start...)
	for len(line) <= most {
		more, err := br.ReadSlice('\n')
		line = append(line, more...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
	return nil, errLong
}

// unexpectedEOF reports an EOF in the middle of a message as such: the
// core closed the connection before its answer was complete.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseLength parses a Content-Length: decimal digits only, at most 18 of
// them (no overflow).
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseHex parses a chunk size: hex digits only, at most 15 of them.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
// the case of b.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// clip shortens what an error quotes of the core's bytes.
func clip(b []byte) string {
	const most = 64
	if len(b) > most {
		return string(b[:most]) + "…"
	}
	return string(b)
}
