package discovery

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// startDNS serves a tiny DNS zone on 127.0.0.1 UDP: names starting with "ok"
// get A 10.0.0.1 (and an empty AAAA answer), names starting with "fail" get
// SERVFAIL, everything else NXDOMAIN. It lets the tests check the error
// classification against Go's real resolver.
func startDNS(t *testing.T) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n]); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
}

func dnsAnswer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	// Walk the question name.
	i, labels := 12, []string{}
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	end := i + 5
	resp := append([]byte(nil), q[:end]...)
	binary.BigEndian.PutUint16(resp[6:8], 0)   // ANCOUNT
	binary.BigEndian.PutUint16(resp[8:10], 0)  // NSCOUNT
	binary.BigEndian.PutUint16(resp[10:12], 0) // ARCOUNT
	name := strings.Join(labels, ".")
	rcode := uint16(3) // NXDOMAIN
	switch {
	case strings.HasPrefix(name, "fail"):
		rcode = 2 // SERVFAIL
	case strings.HasPrefix(name, "ok"):
		rcode = 0
		if qtype == 1 {
			binary.BigEndian.PutUint16(resp[6:8], 1)
			resp = append(resp, 0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 0, 0, 1)
		}
	case strings.HasPrefix(name, "_ssh._tcp.srv"):
		// Three SRV records, one whose target is not a valid DNS name.
		rcode = 0
		if qtype == 33 {
			targets := []string{"ok-0.job.test", "bad name!.job.test", "ok-1.job.test"}
			binary.BigEndian.PutUint16(resp[6:8], uint16(len(targets)))
			for _, tgt := range targets {
				var rdata []byte
				rdata = append(rdata, 0, 0, 0, 10, 0x08, 0xAE) // priority 0, weight 10, port 2222
				for _, l := range strings.Split(tgt, ".") {
					rdata = append(rdata, byte(len(l)))
					rdata = append(rdata, l...)
				}
				rdata = append(rdata, 0)
				resp = append(resp, 0xC0, 12, 0, 33, 0, 1, 0, 0, 0, 30, byte(len(rdata)>>8), byte(len(rdata)))
				resp = append(resp, rdata...)
			}
		}
	}
	binary.BigEndian.PutUint16(resp[2:4], 0x8180|rcode) // QR, RD, RA
	return resp
}

func TestRealResolverClassification(t *testing.T) {
	t.Parallel()
	r := startDNS(t)
	spec := Spec{Workers: []string{"ok-0.job.test.", "missing-1.job.test.", "fail-2.job.test."}}
	plan := mustResolve(t, spec)

	res, missing, err := DiscoverNow(context.Background(), spec, plan, r)
	if !reflect.DeepEqual(names(res), []string{"ok-0.job.test."}) || !reflect.DeepEqual(res[0].Addrs, []string{"10.0.0.1"}) {
		t.Fatalf("res = %+v", res)
	}
	if !reflect.DeepEqual(missing, []string{"missing-1.job.test.", "fail-2.job.test."}) {
		t.Errorf("missing = %v", missing)
	}
	if err == nil || !strings.Contains(err.Error(), "fail-2.job.test.") || strings.Contains(err.Error(), "missing-1") {
		t.Errorf("DiscoverNow error = %v, want one naming only the SERVFAIL name", err)
	}

	_, err = Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock(), Timeout: 2 * time.Second})
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("error = %v", err)
	}
	if !IsNotFound(te.LastErr["missing-1.job.test."]) {
		t.Errorf("NXDOMAIN from the real resolver not classified as not found: %v", te.LastErr["missing-1.job.test."])
	}
	if IsNotFound(te.LastErr["fail-2.job.test."]) {
		t.Errorf("SERVFAIL classified as not found: %v", te.LastErr["fail-2.job.test."])
	}
	if !strings.Contains(err.Error(), "missing-1.job.test. (no such host), fail-2.job.test. (DNS error: ") {
		t.Errorf("message:\n%s", err)
	}
	if strings.Contains(err.Error(), "relative name") {
		t.Errorf("names with a trailing dot are absolute:\n%s", err)
	}
}

// Go's resolver drops an SRV record whose target is not a valid name and
// returns the others with an error. The valid targets are kept, and the bad
// one is named in a warning (it used to discard the whole answer).
func TestRealResolverMalformedSRVTarget(t *testing.T) {
	t.Parallel()
	r := startDNS(t)
	spec := Spec{Service: "_ssh._tcp.srvjob.test.", Expected: 2}
	plan := mustResolve(t, spec)
	var logs syncBuf
	res, err := Wait(context.Background(), spec, plan, WaitOptions{Resolver: r, Clock: newClock(), Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	if !reflect.DeepEqual(names(res), []string{"ok-0.job.test", "ok-1.job.test"}) || res[0].Port != 2222 {
		t.Fatalf("resolved %+v", res)
	}
	for _, w := range []string{"level=WARN", `SRV target \"bad name!.job.test.\" ignored`, "_ssh._tcp.srvjob.test."} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %s:\n%s", w, logs.String())
		}
	}
}

// syncBuf collects the logger's concurrent writes.
type syncBuf = sshtest.Buffer
