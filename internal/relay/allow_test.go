package relay

import (
	"net"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

func TestAllowList(t *testing.T) {
	allow, err := ParseAllow("127.0.0.1/32, 10.0.0.0/8")
	assert.NilError(t, err)
	core := &counting{h: simCore(0)}
	oe := startObserved(t, observed{core: core, metrics: true, more: func(c *envConfig) { c.allow = allow }})

	// From 127.0.0.2 (Linux routes all of 127/8 to lo): closed unread.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", oe.addr)
	assert.NilError(t, err)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.Close()
	guid := testkit.GUID()
	c.Write(transferFrame(t, guid)) // may fail: the relay may have closed it already
	expectClosed(t, c)
	oe.noRow(guid)
	assert.Equal(t, core.calls.Load(), int64(0))
	assert.Equal(t, oe.srv.NotAllowed(), int64(1))
	assert.Equal(t, oe.scrape()["lhrelay_connections_not_allowed_total"], "1")
	assert.Assert(t, strings.Contains(oe.log.String(), "address not in --allow"))

	// From 127.0.0.1: served.
	assert.Equal(t, oe.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, core.calls.Load(), int64(1))
}

func TestParseAllow(t *testing.T) {
	got, err := ParseAllow("10.0.0.0/8,192.168.1.7,::1")
	assert.NilError(t, err)
	assert.Equal(t, len(got), 3)
	assert.Equal(t, got[1].String(), "192.168.1.7/32")
	assert.Equal(t, got[2].String(), "::1/128")
	for _, bad := range []string{"", "10.0.0.0/8,", "10.1.2.3/8", "nonsense", "10.0.0.0/33", "::ffff:0:0/80"} {
		_, err := ParseAllow(bad)
		assert.Assert(t, err != nil, "%q accepted", bad)
	}
}

// TestAllowIPv4Mapped: an IPv4-mapped entry admits the IPv4 clients it
// names, whose addresses are matched unmapped.
func TestAllowIPv4Mapped(t *testing.T) {
	got, err := ParseAllow("::ffff:127.0.0.1,::ffff:10.0.0.0/104")
	assert.NilError(t, err)
	assert.Equal(t, got[0].String(), "127.0.0.1/32")
	assert.Equal(t, got[1].String(), "10.0.0.0/8")
	e := startEnv(t, envConfig{core: simCore(0), allow: got})
	assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, e.srv.NotAllowed(), int64(0))
}
