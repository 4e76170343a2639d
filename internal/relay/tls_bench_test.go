package relay

import (
	"crypto/tls"
	"net"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/testkit"
)

// BenchmarkTLSRelay compares, in one run, the relay (no ledger) at 64
// channels over plain TCP on both sides against TLS on both sides with
// client certificates (mTLS) on both sides. The core is an in-process
// simulator (an httptest server, TLS or not), so cpu-µs/tx counts the CPU
// of the channels, the relay and the core together. handshakes/1k-tx
// counts the TLS handshakes at the core and at the relay per 1,000
// transfers: connections are reused on both sides, so both stay near
// (64 channel connections + 64 core connections) / b.N × 1,000.
//
//	go test -run '^$' -bench TLSRelay -benchtime 2000x ./internal/relay/
func BenchmarkTLSRelay(b *testing.B) {
	const conc = 64
	var seq atomic.Uint64
	nextGUID := func() uint64 { return seq.Add(1) % (1 << 16) }
	results := map[string]benchResult{}
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode+"/c64", func(b *testing.B) {
			results[mode] = runTLSLeg(b, mode == "tls", conc, nextGUID)
		})
	}
	p, t := results["plain"], results["tls"]
	if p.txps > 0 && t.txps > 0 {
		b.Logf("c%d: plain %.0f tx/s, %.0f cpu-µs/tx | TLS both sides %.0f tx/s, %.0f cpu-µs/tx | TLS keeps %.0f%% of throughput, +%.0f cpu-µs/tx",
			conc, p.txps, micros(p.cpuPerTx), t.txps, micros(t.cpuPerTx), 100*t.txps/p.txps, micros(t.cpuPerTx-p.cpuPerTx))
	}
}

func runTLSLeg(b *testing.B, secure bool, conc int, nextGUID func() uint64) benchResult {
	var coreHandshakes, relayHandshakes atomic.Int64
	count := func(n *atomic.Int64) func(tls.ConnectionState) error {
		return func(tls.ConnectionState) error { n.Add(1); return nil }
	}
	core := httptest.NewUnstartedServer(newBenchSim())
	b.Cleanup(core.Close)
	clientCfg := corecall.Config{Timeout: 10 * time.Second, MaxIdleConns: conc}
	var relayTLS, chanTLS *tls.Config
	if secure {
		relayCA, channelCA, coreCA := testkit.NewCA(b, "relay CA"), testkit.NewCA(b, "channel CA"), testkit.NewCA(b, "core CA")
		core.TLS = &tls.Config{
			Certificates:     []tls.Certificate{coreCA.Server(b, "core").TLS},
			ClientAuth:       tls.RequireAndVerifyClientCert,
			ClientCAs:        relayCA.Pool(),
			VerifyConnection: count(&coreHandshakes),
		}
		core.StartTLS()
		clientCfg.TLS = &tls.Config{RootCAs: coreCA.Pool(), Certificates: []tls.Certificate{relayCA.Client(b, "relay").TLS}}
		relayTLS = channelTLS(b, relayCA, channelCA)
		relayTLS.VerifyConnection = count(&relayHandshakes)
		chanTLS = &tls.Config{RootCAs: relayCA.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{channelCA.Client(b, "atm").TLS}}
	} else {
		core.Start()
	}
	clientCfg.BaseURL = core.URL
	client, err := corecall.New(clientCfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.CloseIdleConnections)
	addr := startBenchRelayTLS(b, client, conc, nil, relayTLS)
	dial := func() (net.Conn, error) {
		if chanTLS == nil {
			return net.Dial("tcp", addr)
		}
		return tls.Dial("tcp", addr, chanTLS)
	}

	cpu0 := processCPU()
	r := runLoad(b, conc, dialWorkers(b, dial, nextGUID))
	r.cpuPerTx = (processCPU() - cpu0) / time.Duration(b.N)
	b.ReportMetric(micros(r.cpuPerTx), "cpu-µs/tx")
	b.ReportMetric(1000*float64(coreHandshakes.Load())/float64(b.N), "core-handshakes/1k-tx")
	b.ReportMetric(1000*float64(relayHandshakes.Load())/float64(b.N), "channel-handshakes/1k-tx")
	return r
}
