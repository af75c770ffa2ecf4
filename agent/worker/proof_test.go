package worker

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/worker/account"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
)

// slowReader opens a connection that asks for path and never reads the
// answer, with a small receive window and segment size, as a slow reader
// on the pod network: the answer fills the socket buffers and the handler
// blocks writing it. served waits until its answer has begun (from then
// on it holds a slot until it is written).
func slowReader(t *testing.T, addr net.Addr, path string) (served func()) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024); serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 536)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		status := make([]byte, len("HTTP/1.1 200"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, status); err != nil || string(status) != "HTTP/1.1 200" {
			t.Fatalf("slow reader: %q %v", status, err)
		}
	}
}

// do sends req on a connection of its own and returns the status and body.
func do(t *testing.T, tr http.RoundTripper, req *http.Request) (int, string) {
	t.Helper()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startEventsWorker runs a worker whose account holds a full ring of
// session exits (a few hundred kilobytes of /events), whose SSH server has
// the request key key, and whose /events answers must be written within
// write.
func startEventsWorker(t *testing.T, key []byte, write time.Duration) net.Addr {
	t.Helper()
	acct := newAccount(t)
	for i := range account.DefaultCapacity {
		acct.SessionExited(account.SessionExit{Session: "c1/s" + strconv.Itoa(i), Command: strings.Repeat("orted", 16), PID: 100 + i, ExitCode: 1})
	}
	ssh := readySSH()
	ssh.requestKey = key
	w := newWorker(t, ssh, gpu.NewNull(""), func(c *Config) {
		c.Account = acct
		c.WebAddress = "127.0.0.1:0"
		c.SSHAddress = "127.0.0.1:0"
		c.ShutdownGrace = 2 * time.Second
	})
	w.eventsWrite = write
	return runReady(t, w)
}

// holdShared has slow readers hold every shared /events slot.
func holdShared(t *testing.T, addr net.Addr) {
	t.Helper()
	var served []func()
	for range maxEventsInFlight {
		served = append(served, slowReader(t, addr, api.EventsPath+"?after=0"))
	}
	for _, f := range served {
		f()
	}
	if code, _ := httpGet(t, addr, api.EventsPath+"?after=0"); code != http.StatusServiceUnavailable {
		t.Fatalf("with every shared slot held, a request = %d, want 503", code)
	}
}

// TestEventsLauncherBudget: four slow readers from anywhere hold every
// shared /events slot; the job's launcher, proving its requests with the
// job's request key, is still answered at once. A copy of its proof, or a
// proof made with another key, gets nothing of its budget.
func TestEventsLauncherBudget(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	// The slow readers hold their slots for the whole test.
	addr := startEventsWorker(t, key, time.Minute)
	url := "http://" + addr.String() + api.EventsPath + "?after=0"
	holdShared(t, addr)

	prover := api.NewProver(key, strings.Repeat("ab", 16))
	var sent http.Header
	tr := api.ProvingTransport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Header.Clone()
		return http.DefaultTransport.RoundTrip(r)
	}), Prover: prover}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	code, body := do(t, tr, req)
	if code != http.StatusOK {
		t.Fatalf("the launcher's request = %d %s", code, body)
	}
	if ev, err := api.DecodeEvents(strings.NewReader(body)); err != nil || len(ev.Events) != account.DefaultCapacity {
		t.Fatalf("the launcher's answer: %d events, %v", len(ev.Events), err)
	}
	replay, _ := http.NewRequest(http.MethodGet, url, nil)
	replay.Header = sent
	if code, _ := do(t, http.DefaultTransport, replay); code != http.StatusServiceUnavailable {
		t.Errorf("a replayed proof = %d, want the shared budget's 503", code)
	}
	forged, _ := http.NewRequest(http.MethodGet, url, nil)
	if code, _ := do(t, api.ProvingTransport{Prover: api.NewProver([]byte(strings.Repeat("x", 32)), strings.Repeat("ab", 16))}, forged); code != http.StatusServiceUnavailable {
		t.Errorf("a proof under another key = %d, want the shared budget's 503", code)
	}
}

// TestEventsSlowReadersLoseTheirSlots: a slow reader's slot comes back
// after the answer's write deadline, not after the server's 30 s.
func TestEventsSlowReadersLoseTheirSlots(t *testing.T) {
	t.Parallel()
	const write = 3 * time.Second
	addr := startEventsWorker(t, nil, write)
	holdShared(t, addr)
	sshtest.Eventually(t, write+5*time.Second, "a shared slot again", func() bool {
		code, _ := httpGet(t, addr, api.EventsPath+"?after=0")
		return code == http.StatusOK
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestProofWindow: each counter is taken once; late ones within the
// window are taken, older ones refused.
func TestProofWindow(t *testing.T) {
	var w api.ProofWindow
	for _, c := range []struct {
		n    uint64
		want bool
	}{{0, false}, {1, true}, {1, false}, {5, true}, {3, true}, {3, false}, {2, true}, {200, true}, {137, true}, {136, false}, {137, false}, {199, true}, {201, true}} {
		if got := w.Take(c.n); got != c.want {
			t.Errorf("Take(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}
