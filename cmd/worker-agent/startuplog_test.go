package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func newHeld() (*heldLog, *slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	inner := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level:       slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
	})
	h := &heldLog{}
	return h, slog.New(h.handler(inner)), &buf
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func TestHeldLogFlushKeepsOrderAndAttrs(t *testing.T) {
	t.Parallel()
	h, log, buf := newHeld()
	log.Info("one")
	log.With("component", "sshd").Warn("two", "k", 1)
	log.WithGroup("g").Info("three", "k", 2)
	if buf.Len() != 0 {
		t.Fatalf("records written before release: %q", buf.String())
	}
	h.release(true)
	log.Info("four")
	h.release(false) // second release is a no-op
	log.Info("five")
	want := "level=INFO msg=one\nlevel=WARN msg=two component=sshd k=1\nlevel=INFO msg=three g.k=2\nlevel=INFO msg=four\nlevel=INFO msg=five\n"
	if buf.String() != want {
		t.Fatalf("log =\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestHeldLogDrop(t *testing.T) {
	t.Parallel()
	h, log, buf := newHeld()
	log.Warn("held")
	h.release(false)
	log.Info("after")
	if buf.String() != "level=INFO msg=after\n" {
		t.Fatalf("log = %q, want only the record after release", buf.String())
	}
}

func TestHeldLogBounded(t *testing.T) {
	t.Parallel()
	h, log, buf := newHeld()
	for range maxHeldRecords + 10 {
		log.Info("x")
	}
	if n := strings.Count(buf.String(), "msg=x"); n != maxHeldRecords+10 {
		t.Fatalf("%d records written, want all %d once the buffer overflowed", n, maxHeldRecords+10)
	}
	if len(h.held) != 0 {
		t.Fatalf("%d records still held after overflow", len(h.held))
	}
}
