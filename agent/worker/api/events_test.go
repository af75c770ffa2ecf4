package api

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestOOMSentence: the account and the diagnosis say an OOM kill in one
// wording, which tells the three cases apart: at the cgroup's own limit,
// below it (the node ran out) and without a limit.
func TestOOMSentence(t *testing.T) {
	for _, tc := range []struct {
		m    Memory
		want string
	}{
		{Memory{LimitBytes: 256 << 20, UsageBytes: 256 << 20, PeakBytes: 256 << 20, AtLimit: true},
			"OOM: rank 3 on w-1 was killed by the kernel's OOM killer at its container's memory limit of 256 MiB (peak usage 256 MiB)"},
		{Memory{LimitBytes: 256 << 20, UsageBytes: 256 << 20, AtLimit: true},
			"OOM: rank 3 on w-1 was killed by the kernel's OOM killer at its container's memory limit of 256 MiB"},
		{Memory{LimitBytes: 64 << 30, UsageBytes: 3 << 29, PeakBytes: 64 << 30},
			"OOM: rank 3 on w-1 was killed by the kernel's OOM killer below its memory limit of 64 GiB (usage 1.5 GiB): the node ran out of memory"},
		{Memory{UsageBytes: 1 << 30},
			"OOM: rank 3 on w-1 was killed by the kernel's OOM killer with no memory limit on its pod (usage 1 GiB): the node ran out of memory"},
	} {
		if got := OOMSentence("rank 3 on w-1", tc.m); got != tc.want {
			t.Errorf("OOMSentence(%+v) =\n%s\nwant\n%s", tc.m, got, tc.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 200 << 20: "200 MiB", 3 << 29: "1.5 GiB", 1<<64 - 1: "16384 PiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDecodeEvents(t *testing.T) {
	ev, err := DecodeEvents(strings.NewReader(`{"hostname":"w","memory":{"limitBytes":5,"version":2},"events":[{"seq":1,"kind":"oom-kill","rank":3,"exitCode":-1,"future":true}]}`))
	if err != nil || ev.Hostname != "w" || ev.Memory.LimitBytes != 5 || len(ev.Events) != 1 || ev.Events[0].Rank != 3 {
		t.Fatalf("DecodeEvents = %+v, %v", ev, err)
	}
	if _, err := DecodeEvents(strings.NewReader("<html>")); err == nil || !strings.Contains(err.Error(), EventsPath) {
		t.Fatalf("err = %v; want the path named", err)
	}
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add([]byte(`{"events":[{"kind":"rank-exit","rank":-1}]}`))
	f.Add([]byte(`{"memory":{"limitBytes":18446744073709551615}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeEvents(strings.NewReader(string(data)))
	})
}

// TestEventsQuery: a query survives Encode and ParseEventsQuery; Match
// pages recorded events by Seq and keeps provisional ones, all bounded
// below by Since.
func TestEventsQuery(t *testing.T) {
	since := time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)
	q := EventsQuery{After: 41, Since: since}
	v, err := url.ParseQuery(q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseEventsQuery(v); err != nil || got.After != 41 || !got.Since.Equal(since) {
		t.Fatalf("round trip of %q = %+v, %v", q.Encode(), got, err)
	}
	if got, err := ParseEventsQuery(url.Values{}); err != nil || got != (EventsQuery{}) {
		t.Errorf("empty query = %+v, %v; want everything", got, err)
	}
	for _, bad := range []url.Values{{"after": {"-1"}}, {"after": {"x"}}, {"since": {"yesterday"}}} {
		if _, err := ParseEventsQuery(bad); err == nil {
			t.Errorf("ParseEventsQuery(%v) = nil error", bad)
		}
	}
	for _, tc := range []struct {
		ev   Event
		want bool
	}{
		{Event{Seq: 42, Time: since}, true},
		{Event{Seq: 41, Time: since.Add(time.Hour)}, false},
		{Event{Seq: 42, Time: since.Add(-time.Nanosecond)}, false},
		{Event{Time: since, Provisional: true}, true},
		{Event{Time: since.Add(-time.Second), Provisional: true}, false},
	} {
		if got := q.Match(tc.ev); got != tc.want {
			t.Errorf("Match(seq %d, %s, provisional %v) = %v, want %v", tc.ev.Seq, tc.ev.Time, tc.ev.Provisional, got, tc.want)
		}
	}
}

func FuzzParseEventsQuery(f *testing.F) {
	f.Add("after=3&since=2025-01-02T03:04:05Z")
	f.Add("after=18446744073709551616")
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseEventsQuery(v)
		if err != nil {
			return
		}
		back, err := url.ParseQuery(q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if again, err := ParseEventsQuery(back); err != nil || again.After != q.After || !again.Since.Equal(q.Since) {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", raw, q, q.Encode(), again, err)
		}
	})
}
