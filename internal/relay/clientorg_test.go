package relay

import (
	"crypto/tls"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// TestClientOrgs (SPEC 5.9): a client certificate bound to SRC_ORGs sends
// as those and is answered E102, never sent, for any other; a certificate
// that matches no rule may send as none.
func TestClientOrgs(t *testing.T) {
	serverCA, channelCA := testkit.NewCA(t, "relay CA"), testkit.NewCA(t, "channel CA")
	orgs, err := ParseClientOrgs("CN=atm-0001:081,082; OU=none:999")
	assert.NilError(t, err)
	core := &counting{h: simCore(0)}
	oe := startObserved(t, observed{core: core, metrics: true, more: func(c *envConfig) {
		c.tls = channelTLS(t, serverCA, channelCA)
		c.clientOrgs = orgs
	}})
	frameAs := func(guid, srcOrg string) []byte {
		h := header(guid, testkit.TransferTx().Code)
		h.SrcOrg = srcOrg
		f, err := generated.AppendFrame(nil, h, &generated.BKTR0001Request{WdBank: "081", WdAcct: acctRich, DpBank: "004", DpAcct: acctOther, Amount: 50000, Memo: "rent"})
		assert.NilError(t, err)
		return f
	}
	atm1 := oe.dialTLS(&tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{channelCA.Client(t, "atm-0001").TLS}})
	ok := testkit.GUID()
	assert.Equal(t, oe.send(atm1, frameAs(ok, "081")).code(), string(generated.RspHTTP200))
	assert.Equal(t, oe.row(ok).State, ledger.StateDone)

	other := testkit.GUID()
	assert.Equal(t, oe.send(atm1, frameAs(other, "004")).code(), string(generated.RspBadFrame))
	oe.noRow(other)
	line := oe.frameLine(other)
	assert.Equal(t, line["client"], "CN=atm-0001,O=lhrelay tests")
	assert.Assert(t, line["why"] != nil, "%v", line)

	atm2 := oe.dialTLS(&tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{channelCA.Client(t, "atm-0002").TLS}})
	none := testkit.GUID()
	assert.Equal(t, oe.send(atm2, frameAs(none, "081")).code(), string(generated.RspBadFrame))
	oe.noRow(none)
	assert.Equal(t, core.calls.Load(), int64(1), "only the allowed frame reached the core")
}

func TestParseClientOrgs(t *testing.T) {
	co, err := ParseClientOrgs("O=Bank A:081,082\nou=atm:081 # the fleet\n\nDNS=gw.bank.example:004")
	assert.NilError(t, err)
	assert.Equal(t, len(co.rules), 3)
	assert.Equal(t, co.rules[1].field, "OU")
	for _, bad := range []string{"", "O=Bank A", "XX=a:081", "O=:081", "O=a:081,", "# only a comment"} {
		_, err := ParseClientOrgs(bad)
		assert.Assert(t, err != nil, "%q accepted", bad)
	}
}
