package launcherid

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestNewIsRandomAndValid(t *testing.T) {
	start := time.Now()
	a, b := New("1b2c3d4e-0000-4000-8000-000000000001", "tj-launcher-0-0", start), New("", "tj-launcher-0-0", start)
	if !ValidID(a.ID) || !ValidID(b.ID) || a.ID == b.ID {
		t.Fatalf("ids %q %q: want two different valid ids", a.ID, b.ID)
	}
	if a.IsZero() || !(Instance{}).IsZero() {
		t.Fatal("IsZero")
	}
	if got := New("uid with space", "host/evil", start); got.PodUID != "" || got.Hostname != "" {
		t.Fatalf("unusable fields kept: %+v", got)
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, in := range []Instance{
		New("1b2c3d4e-0000-4000-8000-000000000001", "tj-launcher-0-0", time.Unix(1767323045, 123456789)),
		New("", "", time.Unix(1, 0)),
	} {
		got, err := ParseValue(in.Value())
		if err != nil {
			t.Fatalf("ParseValue(%q): %v", in.Value(), err)
		}
		if got.ID != in.ID || got.PodUID != in.PodUID || got.Hostname != in.Hostname || !got.Start.Equal(in.Start) {
			t.Fatalf("round trip of %q: %+v, want %+v", in.Value(), got, in)
		}
	}
}

func TestParseValueRefuses(t *testing.T) {
	id := strings.Repeat("ab", 16)
	for _, s := range []string{
		"",
		"1 " + id + " 5 - -  ",
		"2 " + id + " 5 - -",
		"1 " + id + " -5 - -",
		"1 " + id + " x - -",
		"1 " + strings.ToUpper(id) + " 5 - -",
		"1 " + id[:30] + " 5 - -",
		"1 " + id + " 5 uid host;rm",
		"1 " + id + " 5 " + strings.Repeat("u", 65) + " host",
	} {
		if _, err := ParseValue(s); err == nil {
			t.Errorf("ParseValue(%q) accepted", s)
		}
	}
}

func TestDeclarationRoundTrip(t *testing.T) {
	start := time.Now().Add(-90 * time.Second)
	in := New("1b2c3d4e-0000-4000-8000-000000000001", "tj-launcher-0-0", start)
	got, age, err := ParseDeclaration(in.Declaration(start.Add(90 * time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != in.ID || got.PodUID != in.PodUID || got.Hostname != in.Hostname || !got.Start.Equal(in.Start) {
		t.Fatalf("got %+v, want %+v", got, in)
	}
	if age != 90*time.Second {
		t.Fatalf("age %v, want 90s", age)
	}
	// A clock stepped back: age 0, never negative.
	if _, age, _ := ParseDeclaration(in.Declaration(start.Add(-time.Hour))); age != 0 {
		t.Fatalf("age %v before the start, want 0", age)
	}
	// Fields a later revision of version 1 appends are ignored.
	ext := append(in.Declaration(start), 0, 0, 0, 1, 'x')
	if _, _, err := ParseDeclaration(ext); err != nil {
		t.Fatalf("extended payload refused: %v", err)
	}
}

func TestParseDeclarationRefuses(t *testing.T) {
	id := strings.Repeat("0f", 16)
	for name, w := range map[string]wire{
		"version":   {Version: 2, ID: id, Start: 5},
		"id":        {Version: 1, ID: "x", Start: 5},
		"start":     {Version: 1, ID: id, Start: 0},
		"start-neg": {Version: 1, ID: id, Start: 1 << 63},
		"age":       {Version: 1, ID: id, Start: 5, Age: uint64(MaxAge) + 1},
		"host":      {Version: 1, ID: id, Start: 5, Hostname: "a b"},
		"uid":       {Version: 1, ID: id, Start: 5, PodUID: "\x00"},
	} {
		if _, _, err := ParseDeclaration(ssh.Marshal(w)); err == nil {
			t.Errorf("%s: accepted %+v", name, w)
		}
	}
	if _, _, err := ParseDeclaration([]byte{0, 0}); err == nil {
		t.Error("truncated payload accepted")
	}
}

func TestString(t *testing.T) {
	i := Instance{ID: strings.Repeat("0a", 16), PodUID: "uid-1", Hostname: "tj-launcher-0-0", Start: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	want := "launcher tj-launcher-0-0 (pod uid uid-1, instance 0a0a0a0a, started 2026-01-02T03:04:05Z)"
	if got := i.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func FuzzParseValue(f *testing.F) {
	f.Add(New("uid", "host", time.Unix(5, 0)).Value())
	f.Add("1 " + strings.Repeat("ab", 16) + " 5 - -")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		i, err := ParseValue(s)
		if err != nil {
			return
		}
		j, err := ParseValue(i.Value())
		if err != nil || j != i {
			t.Fatalf("%q parsed as %+v, which does not round trip: %+v %v", s, i, j, err)
		}
	})
}

func FuzzParseDeclaration(f *testing.F) {
	i := New("uid", "host", time.Unix(5, 0))
	f.Add(i.Declaration(time.Unix(7, 0)))
	f.Add([]byte{})
	f.Add(ssh.Marshal(wire{Version: 1, ID: strings.Repeat("ab", 16), Start: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, age, err := ParseDeclaration(b)
		if err != nil {
			return
		}
		if age < 0 || age > MaxAge || !ValidID(got.ID) || got.Start.UnixNano() <= 0 {
			t.Fatalf("accepted %+v age %v", got, age)
		}
	})
}
