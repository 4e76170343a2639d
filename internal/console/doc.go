// Package console is the operator's console of a ledger (ledger serve): a
// read-only web server that shows, on one page each, what an operator
// asks when a branch calls: the ledger at a glance (rows by state and
// code, the oldest UNKNOWN and SENT rows, rows out of attempts, conflicts,
// the last audit), the rows that need a person, and a GUID's whole story
// (its row, its request and response decoded field by field through the
// generated layouts, its history as a timeline, whether that history
// verifies).
//
// It reads through package ledger's read API on a Ledger opened with
// ledger.OpenReadOnly, so it cannot change a row. Every page is
// html/template over assets embedded in the binary (no script or style
// inline, a strict Content-Security-Policy, nothing fetched from
// elsewhere: bank operations networks have no internet). Account numbers
// (the layouts' fields with option account) are shown masked but for
// their last four digits unless Config.ShowAccounts. Every GUID page
// viewed is logged with who asked (the client certificate's subject, or
// the token's name): PCI DSS 10.2.1.
//
// Pages that count the whole ledger read counts the console keeps (a
// snapshot refreshed every Config.Refresh, and the audit run every
// Config.AuditEvery), so that each page answers in milliseconds on a
// ledger of millions of rows; every page says how old its counts are.
package console
