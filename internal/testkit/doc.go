// Package testkit is what the project's tests share: request frames drawn
// from the generated registry and fresh GUIDs (frames.go), a core that
// holds and announces the calls reaching it and an address nothing
// listens on (core.go), the ledger's two stores and raw access to their
// rows (ledger.go), a channel-side LH-STD responder (responder.go),
// certificates made on the spot (certs.go), the settings-sources cases
// every command runs (sources.go), a log buffer a test can wait on
// (syncbuffer.go) and a small file system to fill, free and remount
// (disk.go).
//
// It imports neither package ledger, relay nor batch, whose own in-package
// tests use it: what it needs from them the caller passes in (OpenRaw's
// store, for one). The PostgreSQL server the tests run on is package
// pgtest, apart, because programs (cmd/verify) start one too and a test
// binary starts it from TestMain.
package testkit
