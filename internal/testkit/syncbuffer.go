package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a process's output goroutine, a
// server's log handler and the test can use at once.
type SyncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	waits map[string]chan struct{}
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for text, ch := range b.waits {
		if bytes.Contains(p, []byte(text)) {
			close(ch)
			delete(b.waits, text)
		}
	}
	return b.buf.Write(p)
}

// When returns a channel closed once a Write containing text has happened
// after this call (a log handler writes each record with one Write).
func (b *SyncBuffer) When(text string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waits == nil {
		b.waits = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	b.waits[text] = ch
	return ch
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
