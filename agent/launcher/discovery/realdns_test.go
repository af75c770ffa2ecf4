package discovery

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
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
	r, _ := serveDNS(t, dnsAnswer)
	return r
}

// serveDNS serves UDP on 127.0.0.1 with answer (nil: no reply) and returns
// Go's resolver asking it, and its address.
func serveDNS(t *testing.T, answer func(q []byte) []byte) (*net.Resolver, string) {
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
			if resp := answer(buf[:n]); resp != nil {
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
	}, addr
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
	if !strings.Contains(err.Error(), "missing-1.job.test. (NXDOMAIN), fail-2.job.test. (DNS error from ") {
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

// A DNS server that reads every query and answers none (what a NetworkPolicy
// dropping egress to the cluster's DNS looks like from the launcher) is
// named from the wait's first progress line, with the likely cause, and
// warned about once (the launcher's Warning Event); the deadline is the
// same and its hint says it too. A server that answers NXDOMAIN is a name
// not there yet, and is said so.
func TestRealResolverSilentServerVersusNXDOMAIN(t *testing.T) {
	t.Parallel()
	spec := Spec{Workers: []string{"ok-0.job.test.", "missing-1.job.test."}}
	plan := mustResolve(t, spec)
	wait := func(t *testing.T, r *net.Resolver, server string) (first string, warnings []string, err error) {
		var mu sync.Mutex
		var prog progressLog
		_, err = Wait(context.Background(), spec, plan, WaitOptions{
			Resolver: r, DNSServer: server, Clock: newClock(), Timeout: 3 * time.Second,
			LookupTimeout: 300 * time.Millisecond, Progress: prog.add,
			Warn: func(msg string) {
				mu.Lock()
				defer mu.Unlock()
				warnings = append(warnings, msg)
			},
		})
		msgs := prog.strings()
		if len(msgs) == 0 {
			t.Fatalf("no progress; error %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return msgs[0], warnings, err
	}

	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		r, addr := serveDNS(t, func([]byte) []byte { return nil })
		first, warnings, err := wait(t, r, addr)
		silent := "no answer from the DNS server " + addr
		want := "0/2 workers resolved; waiting for ok-0.job.test., missing-1.job.test. (" + silent + "); the DNS server " + addr +
			" does not answer: egress to it may be blocked (a NetworkPolicy's DNS rule), 0s"
		if first != want {
			t.Errorf("first progress line\n%s\nwant\n%s", first, want)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], "DNS lookups get "+silent) ||
			!strings.Contains(warnings[0], "kubectl describe networkpolicy") || !strings.Contains(warnings[0], "/etc/resolv.conf") {
			t.Errorf("warnings %q, want one naming %s, the NetworkPolicy and resolv.conf", warnings, addr)
		}
		var te *TimeoutError
		if !errors.As(err, &te) || te.Timeout != 3*time.Second {
			t.Fatalf("error %v, want the same deadline's TimeoutError", err)
		}
		if hint := te.Hint(); !strings.HasPrefix(hint, "  - "+silent+" for missing-1.job.test., ok-0.job.test. (nothing answered") ||
			!strings.Contains(hint, "egress to it may be blocked") {
			t.Errorf("hint does not start with the silent server:\n%s", hint)
		}
	})
	t.Run("nxdomain", func(t *testing.T) {
		t.Parallel()
		r, addr := serveDNS(t, dnsAnswer)
		first, warnings, err := wait(t, r, addr)
		if want := "1/2 workers resolved; waiting for missing-1.job.test. (NXDOMAIN), 0s"; first != want {
			t.Errorf("first progress line\n%s\nwant\n%s", first, want)
		}
		if len(warnings) != 0 {
			t.Errorf("warnings %q for a server that answers", warnings)
		}
		var te *TimeoutError
		if !errors.As(err, &te) || strings.Contains(te.Hint(), "egress") {
			t.Errorf("error %v", err)
		}
	})
}
