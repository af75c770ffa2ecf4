package main

import (
	"context"
	"log/slog"
	"sync"
)

// maxHeldRecords bounds the startup buffer; past it the records are
// written out and the handler passes everything through.
const maxHeldRecords = 512

// heldLog holds log records back until startup ends, so that a failed
// startup prints exactly one line (its error) instead of a log followed by
// the error. release(true) writes the held records in order and passes
// later ones through; release(false) drops them.
type heldLog struct {
	mu       sync.Mutex
	released bool
	held     []heldRecord
}

type heldRecord struct {
	h slog.Handler
	r slog.Record
}

// handler wraps inner so that its records (and those of handlers derived
// with WithAttrs/WithGroup) are held until release.
func (l *heldLog) handler(inner slog.Handler) slog.Handler {
	return &heldHandler{log: l, inner: inner}
}

func (l *heldLog) release(flush bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return
	}
	l.released = true
	if flush {
		l.flushLocked()
	}
	l.held = nil
}

func (l *heldLog) flushLocked() {
	for _, hr := range l.held {
		_ = hr.h.Handle(context.Background(), hr.r)
	}
	l.held = nil
}

type heldHandler struct {
	log   *heldLog
	inner slog.Handler
}

func (h *heldHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *heldHandler) Handle(ctx context.Context, r slog.Record) error {
	l := h.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return h.inner.Handle(ctx, r)
	}
	l.held = append(l.held, heldRecord{h: h.inner, r: r.Clone()})
	if len(l.held) >= maxHeldRecords {
		l.released = true
		l.flushLocked()
	}
	return nil
}

func (h *heldHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &heldHandler{log: h.log, inner: h.inner.WithAttrs(as)}
}

func (h *heldHandler) WithGroup(name string) slog.Handler {
	return &heldHandler{log: h.log, inner: h.inner.WithGroup(name)}
}
