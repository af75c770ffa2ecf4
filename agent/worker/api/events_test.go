package api

import (
	"strings"
	"testing"
)

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
