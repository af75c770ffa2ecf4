//go:build linux

package sshd

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// A flood of idle TCP connections from one address holds at most
// PerSourceMaxStartups slots; everyone else still logs in, and the flooder
// is told why it is refused instead of meeting silence.
func TestPerSourceFloodDoesNotLockOut(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	ts := startServer(t, func(c *Config) { c.PerSourceMaxStartups = 3; c.Metrics = m })
	flooder := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	const flood = 100
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < flood; i++ {
		c, err := flooder.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	waitFor(t, func() bool { return metricValue(m.connections.WithLabelValues(connRejectedPerSource)) == flood-3 },
		"every connection past the per-source limit refused")
	if n, by := ts.limits.held(); n != 3 || by["127.0.0.2"] != 3 {
		t.Fatalf("held %d %v, want 3 from 127.0.0.2", n, by)
	}
	// The flood is still open (3 idle pre-auth connections, the rest
	// refused): a login from another address goes through at once.
	c := ts.dial(t)
	if r := run(t, c, "echo in", nil); r.stdout != "in\n" {
		t.Fatalf("login during the flood: %+v", r)
	}
	// One more from the flooder reads the refusal line, which names the
	// limit and its flag.
	extra, err := flooder.Dial("tcp", ts.addr)
	must(t, err)
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(extra).ReadString('\n')
	for _, want := range []string{RefusalMarker, "127.0.0.2", "per-source limit 3", "--ssh.per-source-max-startups"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal line %q lacks %q", line, want)
		}
	}
	if strings.HasPrefix(line, "SSH-") || len(line) > 255 {
		t.Errorf("refusal line %q must not start with SSH- and must fit 255 bytes (RFC 4253 4.2)", line)
	}
	if !strings.Contains(ts.logs.String(), "ssh connection refused: too many unauthenticated connections") {
		t.Errorf("refusal not logged:\n%s", ts.logs)
	}
}

// OpenSSH's random early drop: none below begin, rate% at begin rising
// linearly to 100% at full; the per-source limit comes first.
func TestStartupLimiter(t *testing.T) {
	t.Parallel()
	l := newStartupLimiter(Config{MaxStartupsBegin: 10, MaxStartupsRate: 30, MaxStartups: 100, PerSourceMaxStartups: 100})
	var r int
	l.intn = func(int) int { return r }
	for _, tc := range []struct {
		n, r int
		drop bool
	}{
		{0, 0, false}, {9, 0, false},
		{10, 29, true}, {10, 30, false}, // 30% at begin
		{55, 64, true}, {55, 65, false}, // 30 + 70*45/90 = 65%
		{99, 98, true}, {99, 99, false},
		{100, 99, true}, {500, 99, true},
	} {
		r = tc.r
		if got := l.drop(tc.n); got != tc.drop {
			t.Errorf("drop(%d) with random %d = %v, want %v", tc.n, tc.r, got, tc.drop)
		}
	}

	p := newStartupLimiter(Config{MaxStartupsBegin: 4, MaxStartupsRate: 100, MaxStartups: 4, PerSourceMaxStartups: 2})
	p.intn = func(int) int { t.Fatal("no random draw below begin or at full"); return 0 }
	rel1, _, _ := p.acquire("10.0.0.1")
	rel2, _, _ := p.acquire("10.0.0.1")
	if rel1 == nil || rel2 == nil {
		t.Fatal("first two from one source refused")
	}
	if rel, reason, line := p.acquire("10.0.0.1"); rel != nil || reason != connRejectedPerSource || !strings.Contains(line, "per-source limit 2") {
		t.Fatalf("third from one source: %v %q %q", rel != nil, reason, line)
	}
	rel3, _, _ := p.acquire("10.0.0.2")
	rel4, _, _ := p.acquire("10.0.0.3")
	if rel3 == nil || rel4 == nil {
		t.Fatal("other sources refused below full")
	}
	if rel, reason, line := p.acquire("10.0.0.4"); rel != nil || reason != connRejectedMaxStartups || !strings.Contains(line, "--ssh.max-startups 4") {
		t.Fatalf("at full: %v %q %q", rel != nil, reason, line)
	}
	rel1()
	rel1() // idempotent
	if n, by := p.held(); n != 3 || by["10.0.0.1"] != 1 {
		t.Fatalf("after release: %d %v", n, by)
	}
	rel2()
	if _, by := p.held(); len(by) != 2 {
		t.Fatalf("empty source not forgotten: %v", by)
	}
}

func TestParseMaxStartups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in                string
		begin, rate, full int
		out               string // FormatMaxStartups of the result
		err               string
	}{
		{in: "100", begin: 100, rate: 100, full: 100, out: "100"},
		{in: "10:30:100", begin: 10, rate: 30, full: 100, out: "10:30:100"},
		{in: " 20:30:100 ", begin: 20, rate: 30, full: 100, out: "20:30:100"},
		{in: "1:100:1", begin: 1, rate: 100, full: 1, out: "1"},
		{in: "0", err: "positive"},
		{in: "-5", err: "positive"},
		{in: "10:30", err: "BEGIN:RATE:FULL"},
		{in: "50:30:10", err: "above FULL"},
		{in: "10:101:100", err: "percentage"},
		{in: "lots", err: "positive"},
		{in: "", err: "positive"},
	} {
		b, r, f, err := ParseMaxStartups(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMaxStartups(%q) = %v, want error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || b != tc.begin || r != tc.rate || f != tc.full {
			t.Errorf("ParseMaxStartups(%q) = %d:%d:%d %v", tc.in, b, r, f, err)
		}
		if got := FormatMaxStartups(b, r, f); got != tc.out {
			t.Errorf("FormatMaxStartups(%d,%d,%d) = %q, want %q", b, r, f, got, tc.out)
		}
	}
}

func FuzzParseMaxStartups(f *testing.F) {
	for _, s := range []string{"100", "10:30:100", "0", "1:1:1", "a:b:c", "9999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, r, full, err := ParseMaxStartups(s)
		if err != nil {
			return
		}
		if b < 1 || b > full || r < 1 || r > 100 {
			t.Fatalf("ParseMaxStartups(%q) accepted %d:%d:%d", s, b, r, full)
		}
		b2, r2, f2, err := ParseMaxStartups(FormatMaxStartups(b, r, full))
		if err != nil || b2 != b || f2 != full || (b < full && r2 != r) {
			t.Fatalf("round trip of %q: %d:%d:%d %v", s, b2, r2, f2, err)
		}
	})
}
