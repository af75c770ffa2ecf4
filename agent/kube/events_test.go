package kube

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestShorten: an Event's message over the limit is cut in the middle, the
// fix at its end kept whole, and never inside a UTF-8 sequence.
func TestShorten(t *testing.T) {
	long := "dns-wait: " + strings.Repeat("é", 700) + "; hint: apply the fix"
	got := shorten(long, 1024)
	if len(got) > 1024 || !strings.HasSuffix(got, "...; hint: apply the fix") || !utf8.ValidString(got) {
		t.Errorf("shorten kept %d bytes: ...%q", len(got), got[max(0, len(got)-40):])
	}
	if s := shorten("short; hint: x", 1024); s != "short; hint: x" {
		t.Errorf("a short message changed: %q", s)
	}
	// A hint longer than half the limit is not kept whole.
	got = shorten("x; hint: "+strings.Repeat("h", 1100), 1024)
	if len(got) > 1024 || !strings.HasSuffix(got, "...") {
		t.Errorf("a long hint: %d bytes, ends %q", len(got), got[len(got)-10:])
	}
}
