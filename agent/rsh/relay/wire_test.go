package relay

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestOpenRoundTrip(t *testing.T) {
	for _, o := range []Open{
		{Token: "5f0c7a", Args: []string{"-p", "2222", "host", " orted -mca ess \"env\""}, Env: []string{"PODMPI_SSH_WAIT=0", "HOME=/home/x"},
			Stdio: [3]Stream{StreamNull, StreamFD, StreamStdout}},
		{Args: []string{"h", "true"}, Env: []string{}, Stdio: [3]Stream{StreamFD, StreamFD, StreamFD}},
		{Args: []string{"h", ""}, Env: []string{"A="}, Stdio: [3]Stream{StreamNull, StreamNull, StreamNull}},
	} {
		got, err := DecodeOpen(EncodeOpen(o))
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		if !reflect.DeepEqual(got, o) {
			t.Fatalf("round trip: got %+v, want %+v", got, o)
		}
	}
	if n := (Open{Stdio: [3]Stream{StreamFD, StreamFD, StreamStdout}}).FDs(); n != 2 {
		t.Fatalf("FDs = %d, want 2", n)
	}
}

func TestDecodeOpenRejects(t *testing.T) {
	good := EncodeOpen(Open{Args: []string{"h", "true"}, Env: []string{"A=b"}})
	for name, p := range map[string][]byte{
		"empty":            nil,
		"other protocol":   []byte("SSH-2.0-x"),
		"truncated":        good[:len(good)-1],
		"trailing bytes":   append(append([]byte{}, good...), 0),
		"stderr mode 9":    withStdio(good, 2, 9),
		"stdout as stdout": withStdio(good, 1, byte(StreamStdout)),
		"no stdout to share": func() []byte {
			b := withStdio(good, 1, byte(StreamNull))
			return withStdio(b, 2, byte(StreamStdout))
		}(),
		"no arguments":       EncodeOpen(Open{Env: []string{"A=b"}}),
		"env without =":      EncodeOpen(Open{Args: []string{"h"}, Env: []string{"A"}}),
		"NUL in an argument": EncodeOpen(Open{Args: []string{"h", "a\x00b"}}),
		"NUL in the token":   EncodeOpen(Open{Token: "a\x00", Args: []string{"h"}}),
		"token too long":     append([]byte(magic+"\x00\x00\x00"), 0, 0, 0, 9, 'a'),
		"version 1":          append([]byte("podmpi-rsh/1\x00"), good[len(magic):]...),
		"huge count":         append([]byte(magic+"\x00\x00\x00"), 0xff, 0xff, 0xff, 0xff),
	} {
		if _, err := DecodeOpen(p); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

func withStdio(p []byte, i int, mode byte) []byte {
	b := bytes.Clone(p)
	b[len(magic)+i] = mode
	return b
}

func TestFrames(t *testing.T) {
	var b []byte
	b = AppendFrame(b, FrameSignal, []byte{15})
	b = AppendFrame(b, FrameExit, []byte{7})
	r := bytes.NewReader(b)
	for _, want := range []struct {
		typ byte
		p   []byte
	}{{FrameSignal, []byte{15}}, {FrameExit, []byte{7}}} {
		typ, p, err := ReadFrame(r)
		if err != nil || typ != want.typ || !bytes.Equal(p, want.p) {
			t.Fatalf("frame %d %v %v, want %d %v", typ, p, err, want.typ, want.p)
		}
	}
	big := []byte{FrameOpen, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bytes.NewReader(big)); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("oversized frame: %v", err)
	}
}

func TestSentEnv(t *testing.T) {
	env := []string{"PATH=/bin", "PODMPI_SSH_WAIT=0", "HOME=/h", EnvToken + "=old", "USER=u", "SECRET=x", "PODMPI_RSH_FAILURE_DIR=/d", "broken", EnvToken + "=t0k"}
	got := SentEnv(env)
	want := []string{"PODMPI_SSH_WAIT=0", "HOME=/h", "USER=u", "PODMPI_RSH_FAILURE_DIR=/d"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SentEnv = %q, want %q (the token travels in the request, not with the variables)", got, want)
	}
	if tok := Token(env); tok != "t0k" {
		t.Fatalf("Token = %q, want the last entry's", tok)
	}
}

func FuzzDecodeOpen(f *testing.F) {
	f.Add(EncodeOpen(Open{Token: "5f0c7a", Args: []string{"-p", "2222", "host", "orted"}, Env: []string{"HOME=/h"}, Stdio: [3]Stream{1, 0, 2}}))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, p []byte) {
		o, err := DecodeOpen(p)
		if err != nil {
			return
		}
		if len(o.Args) == 0 || o.FDs() > 3 {
			t.Fatalf("accepted %+v", o)
		}
		again, err := DecodeOpen(EncodeOpen(o))
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("re-encoding %+v: %+v, %v", o, again, err)
		}
	})
}
