// Package channel is the client side of LH-STD (SPEC §1, §9): what a bank
// channel does to talk to the relay. It builds request frames for any
// registered transaction from values keyed by the layout's JSON keys, sends
// them over persistent TCP connections, decodes the answers, and drives load
// runs with a summary of throughput, latency and response codes.
//
// Nothing here knows a layout: transactions, field names, widths and response
// codes all come from internal/generated, so a new layout file needs no
// change in this package or in cmd/lhsend.
//
// The relay's end-to-end tests, the demo and the load benchmark use it:
//
//	frame, err := channel.BuildRequest(generated.ClientDefault().Code, channel.NewGUID(), fields, time.Now())
//	conn, err := channel.Dial(ctx, "127.0.0.1:9200", 5*time.Second)
//	answer, err := conn.Send(frame)
//	a, err := channel.Decode(answer) // a.Code, a.Header, a.Body
package channel
