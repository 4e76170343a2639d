// Package conformance checks the SPEC's plain path end to end, for every
// transaction in the registry: a relay assembled as production assembles
// it (internal/assemble), a fresh ledger per case (SQLite, and PostgreSQL
// when the tests have one), a real HTTP core whose 404s are a framework's
// JSON, then resolve and reprocess (internal/batch) on that same ledger.
//
// The table is built from the registry when the tests run, not written by
// hand: for each generated.Transactions() entry, every response code of
// SPEC §4 that can apply to it, reached in each way §5 and §6 name (a core
// answering 200, 422 with each result or another, each other status with
// the layout's status mappings, never answering, 504, a 200 it cannot use,
// a refused connection; an unregistered TX_CODE, a broken header, length
// or field, a bad value derived from each field's kind; the same GUID in
// flight or with another request; the replay of a posted one). For each it
// proves the answer's bytes, the core calls about the GUID, the ledger row
// (or its absence), and what resolve and then reprocess do with the row by
// SPEC §7: an unknown outcome settled through the transaction's own lookup
// (posted, never posted, or posted after an early lookup) or, for a
// transaction declaring lookup none, as never posted without a core call;
// a row that was never sent sent again once, after its lookup; nothing
// settled twice and nothing unknown resent. A layout added is covered with
// no change here, and a response code added without a way to reach it
// fails TestTableCoversSection4.
//
// The package has no code of its own; see its _test.go files.
package conformance
