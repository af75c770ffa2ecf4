package worker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runReady runs w until the test ends and returns its HTTP address once
// /readyz answers 200.
func runReady(t *testing.T, w *Worker) net.Addr {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	return waitFor(t, func() net.Addr {
		if a := w.WebAddr(); a != nil {
			if c, _ := httpGet(t, a, "/readyz"); c == 200 {
				return a
			}
		}
		return nil
	})
}

// 1,000 idle HTTP connections (some sending half a request header) do not
// make the agent hold 1,000 connections and goroutines: it keeps at most
// WebMaxConnections open by closing the oldest idle one, and /readyz still
// answers at once. Not parallel: it counts goroutines.
func TestHTTPIdleFloodBounded(t *testing.T) {
	ssh := readySSH()
	w := newWorker(t, ssh, fakeDetector{inv: twoGPUs()}, func(c *Config) {
		c.WebAddress = "127.0.0.1:0"
		c.SSHAddress = "127.0.0.1:0"
		c.ShutdownGrace = 2 * time.Second
	})
	addr := runReady(t, w)
	ln := w.httpLn.Load()
	before := runtime.NumGoroutine()

	const flood = 1000
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range flood {
		c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if i%10 == 0 { // a slowloris: half a request, never finished
			_, _ = io.WriteString(c, "GET /info HTTP/1.1\r\nHost: x\r\n")
		}
		conns = append(conns, c)
	}
	// Every flood connection has been accepted once the evictions account
	// for all of them beyond the bound.
	deadline := time.Now().Add(20 * time.Second)
	for ln.evicted.Load()+uint64(ln.open()) < flood && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	open, evicted := ln.open(), ln.evicted.Load()
	if open > DefaultWebMaxConnections {
		t.Fatalf("%d HTTP connections open, want at most %d", open, DefaultWebMaxConnections)
	}
	if evicted < flood-DefaultWebMaxConnections {
		t.Fatalf("evicted %d of %d idle connections, want at least %d", evicted, flood, flood-DefaultWebMaxConnections)
	}
	if g := runtime.NumGoroutine() - before; g > 2*DefaultWebMaxConnections+50 {
		t.Fatalf("%d more goroutines with %d idle connections; want them bounded by the connection limit %d", g, flood, DefaultWebMaxConnections)
	}
	// The kubelet's probe, on a new connection, gets its answer.
	if code, body := httpGet(t, addr, "/readyz"); code != 200 {
		t.Fatalf("/readyz during the flood = %d %q", code, body)
	}
	t.Logf("%d idle connections: %d open, %d evicted", flood, open, evicted)
}

// At the bound, a busy connection is never evicted; a new one is refused
// when nothing is idle, and served once a slot frees.
func TestLimitListenerKeepsBusyConnections(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(raw, 2, slog.New(slog.DiscardHandler))
	release := make(chan struct{})
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		fmt.Fprintln(rw, "ok")
	})
	srv := newHTTPServer(h, ln, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := raw.Addr().String()

	busy := make(chan string, 2)
	for range 2 {
		go func() {
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Get("http://" + addr + "/slow")
			if err != nil {
				busy <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			busy <- strings.TrimSpace(string(b))
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln.mu.Lock()
		n := 0
		for c := range ln.conns {
			if c.idleSince.IsZero() {
				n++
			}
		}
		ln.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("two busy requests not seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatal("a third connection was served while two requests were busy at the bound of 2")
	}
	c.Close()
	if ln.refused.Load() == 0 {
		t.Fatal("refusal not counted")
	}
	close(release)
	for range 2 {
		if got := <-busy; got != "ok" {
			t.Fatalf("busy request: %q (it must not be evicted)", got)
		}
	}
}

// TestLimitInFlight: past the bound a request is answered 503 at once,
// with Retry-After, while the ones in flight go on; after they finish a
// request is served again. /events is served through it.
func TestLimitInFlight(t *testing.T) {
	t.Parallel()
	const bound = 2
	entered, release := make(chan struct{}, bound+1), make(chan struct{})
	h := limitInFlight(bound, "/events", http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(rw, "ok")
	}))
	codes := make(chan int, bound)
	for range bound {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/events", nil))
			codes <- rec.Code
		}()
	}
	for range bound {
		<-entered
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/events", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "/events") {
		t.Errorf("request past the bound = %d %q (Retry-After %q); want 503 naming /events, with Retry-After",
			rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	close(release)
	for range bound {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("request in flight = %d, want 200", c)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/events", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("request after the others finished = %d, want 200", rec.Code)
	}
}
