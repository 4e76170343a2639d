// Package cmd holds the lhrelay commands, one directory each: relay,
// resolve, reprocess, purge, ledger, lhsend, coresim, sandbox, demo and
// verify.
// Every one runs in internal/app's runner; its tests here run each built
// command as an operator would and hold them to the runner's promises.
package cmd
