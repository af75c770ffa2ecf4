package awaited

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

func TestLine(t *testing.T) {
	t.Parallel()
	nx := Answer{Kind: "NXDOMAIN"}
	silent := Answer{Kind: "no answer from the DNS server 10.96.0.10:53"}
	refused := func(ip string) Answer {
		return Answer{Kind: "connection refused on port 9022", Detail: "connection refused on " + ip + ":9022"}
	}
	cases := []struct {
		name  string
		hosts []Host
		max   int
		want  string
	}{
		{"none", nil, 3, ""},
		{"no answers: names only", []Host{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}, 3, "a, b, c and 1 more"},
		{"one", []Host{{Name: "a", Answer: silent}}, 3, "a (no answer from the DNS server 10.96.0.10:53)"},
		{"neighbours share an answer", []Host{{Name: "a", Answer: nx}, {Name: "b", Answer: nx}, {Name: "c", Answer: silent}}, 3,
			"a, b (NXDOMAIN), c (no answer from the DNS server 10.96.0.10:53)"},
		{"details per host", []Host{{Name: "a", Answer: refused("10.0.0.1")}, {Name: "b", Answer: refused("10.0.0.2")}}, 3,
			"a (connection refused on 10.0.0.1:9022), b (connection refused on 10.0.0.2:9022)"},
		{"a note stands alone", []Host{{Name: "a", Answer: nx, Note: "pod a-x is Pending"}, {Name: "b", Answer: nx}}, 3,
			"a (pod a-x is Pending; NXDOMAIN), b (NXDOMAIN)"},
		{"one group", []Host{{Name: "a", Answer: nx}, {Name: "b", Answer: nx}, {Name: "c", Answer: nx}, {Name: "d", Answer: nx}}, 3,
			"a, b, c and 1 more (NXDOMAIN)"},
		{"groups, largest first", []Host{{Name: "a", Answer: nx}, {Name: "b", Answer: silent}, {Name: "c", Answer: silent}, {Name: "d"}}, 3,
			"4: 2 with no answer from the DNS server 10.96.0.10:53 (b, c); 1 with NXDOMAIN (a); 1 with no answer yet (d)"},
	}
	for _, tc := range cases {
		if got := Line(tc.hosts, tc.max); got != tc.want {
			t.Errorf("%s: Line = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// 1024 missing workers give a line of a few groups, never 1024 entries.
func TestLineBounded(t *testing.T) {
	t.Parallel()
	var hosts []Host
	for i := range 1024 {
		a := Answer{Kind: "no answer from the DNS server 10.96.0.10:53"}
		switch {
		case i >= 1000:
			a = Answer{Kind: "NXDOMAIN"}
		case i >= 990:
			a = Answer{Kind: fmt.Sprintf("DNS error from 10.96.0.10:53: odd %d", i)} // ten more kinds
		}
		hosts = append(hosts, Host{Name: fmt.Sprintf("tj-node-0-%d.tj", i), Answer: a})
	}
	got := Line(hosts, 3)
	want := "1024: 990 with no answer from the DNS server 10.96.0.10:53 (tj-node-0-0.tj, tj-node-0-1.tj, tj-node-0-2.tj and 987 more); " +
		"24 with NXDOMAIN (tj-node-0-1000.tj, tj-node-0-1001.tj, tj-node-0-1002.tj and 21 more); " +
		"1 with DNS error from 10.96.0.10:53: odd 990 (tj-node-0-990.tj); 1 with DNS error from 10.96.0.10:53: odd 991 (tj-node-0-991.tj); " +
		"and 8 more with 8 other answers"
	if got != want {
		t.Errorf("Line =\n%s\nwant\n%s", got, want)
	}
}

func TestDNS(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err    error
		want   string
		silent bool
	}{
		{&net.DNSError{Err: "no such host", Name: "a", IsNotFound: true}, "NXDOMAIN", false},
		{&net.DNSError{Err: "empty answer", Name: "a", IsNotFound: true}, "no records", false},
		{&net.DNSError{Err: "i/o timeout", Name: "a", Server: "10.96.0.10:53", IsTimeout: true}, "no answer from the DNS server 10.96.0.10:53", true},
		{&net.DNSError{Err: "i/o timeout", Name: "a", IsTimeout: true}, "no answer from the DNS server 127.0.0.1:53", true},
		{&net.DNSError{Err: "read udp 127.0.0.1:1->127.0.0.1:53: read: connection refused", Name: "a", Server: "127.0.0.1:53"},
			"connection refused by the DNS server 127.0.0.1:53", true},
		{&net.DNSError{Err: "server misbehaving", Name: "a", Server: "10.96.0.10:53"}, "DNS error from 10.96.0.10:53: server misbehaving", false},
		{errors.New("SRV target ignored"), "SRV target ignored", false},
	}
	for _, tc := range cases {
		if got := DNS(tc.err, "127.0.0.1:53").Text(); got != tc.want {
			t.Errorf("DNS(%v) = %q, want %q", tc.err, got, tc.want)
		}
		if got := Silent(tc.err); got != tc.silent {
			t.Errorf("Silent(%v) = %v, want %v", tc.err, got, tc.silent)
		}
	}
}

// Net against real failures on loopback: a closed port refuses, and a
// request that outlives its timeout names the address.
func TestNetRealErrors(t *testing.T) {
	t.Parallel()
	closed := net.JoinHostPort("127.0.0.1", strconv.Itoa(sshtest.FreePort(t)))
	_, err := (&http.Client{}).Get("http://" + closed + "/info")
	port := closed[strings.LastIndex(closed, ":")+1:]
	if a := Net(err, closed); a.Kind != "connection refused on port "+port || a.Detail != "connection refused on "+closed {
		t.Errorf("refused: %+v from %v", a, err)
	}

	// A listener that accepts and never answers: the client's timeout.
	silent := net.JoinHostPort("127.0.0.1", strconv.Itoa(sshtest.SilentListener(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+silent+"/info", nil)
	_, err = http.DefaultClient.Do(req)
	if a := Net(err, silent); !strings.HasPrefix(a.Kind, "timeout on port ") || a.Detail != "no answer from "+silent+" (timeout)" {
		t.Errorf("timeout: %+v from %v", a, err)
	}
}

// The tracker's first line waits until every host answered once, names
// each answer, and no line is written once nothing is awaited.
func TestTracker(t *testing.T) {
	t.Parallel()
	tr := NewTracker([]string{"a", "b"}, func(h string) string {
		if h == "b" {
			return "pod b-x is Pending"
		}
		return ""
	})
	lines := make(chan string, 10)
	stop := tr.Report(time.Hour, 10, func(settled, total int, waiting string) {
		lines <- fmt.Sprintf("%d/%d %s", settled, total, waiting)
	})
	tr.Saw(0, Answer{Kind: "connection refused on port 9022", Detail: "connection refused on 10.0.0.1:9022"})
	tr.Waits()
	select {
	case l := <-lines:
		t.Fatalf("line %q before b answered once", l)
	case <-time.After(50 * time.Millisecond):
	}
	tr.Saw(1, HTTP("503 Service Unavailable"))
	if l := <-lines; l != "0/2 a (connection refused on 10.0.0.1:9022), b (pod b-x is Pending; HTTP 503 Service Unavailable)" {
		t.Errorf("line %q", l)
	}
	tr.Settled(0)
	tr.Settled(1)
	stop()
	close(lines)
	for l := range lines {
		t.Errorf("extra line %q", l)
	}
}
