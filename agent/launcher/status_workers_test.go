package launcher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/launcher/share"
	"github.com/podmpi/podmpi/agent/launcher/trainerstatus"
	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/sshd"
)

// workerEndpoint is a real worker-agent (in-process), the launcher's pool
// holding one declared connection to it, and the launcher's side of the
// ranks' endpoint on that worker, answering with handler: the agent's
// loopback listener at port is the ranks' endpoint on the worker.
type workerEndpoint struct {
	port  int
	local *trainerstatus.Local
	logs  *sshtest.Buffer
}

func startWorkerEndpoint(t *testing.T, handler http.Handler) *workerEndpoint {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	logs := &sshtest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := sshd.New(sshd.Config{ListenAddress: "127.0.0.1:0", AuthDir: sshtest.WriteAuthDir(t, k), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-serveDone
	})
	sshPort := addr.(*net.TCPAddr).Port
	cfg := sshclient.Config{Signer: k.Signer, HostKey: k.Public(), HostKeySource: "test", Launcher: launcherid.New("uid-l", "tj-launcher-0-0", time.Now())}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, f := sshclient.Dial(ctx, "127.0.0.1", sshPort, cfg)
	if f != nil {
		t.Fatal(f)
	}
	pool := share.NewPool(log)
	if !pool.Add("127.0.0.1", sshPort, cfg, c) {
		t.Fatal("the pool did not take the connection")
	}
	t.Cleanup(pool.Close)

	local, err := trainerstatus.NewLocal(filepath.Join(t.TempDir(), "launcher", StatusDirName))
	if err != nil {
		t.Fatal(err)
	}
	l := &Launcher{pool: pool, log: log}
	port := sshtest.FreePort(t)
	stop := l.endpointOnWorkers(local.Server(handler), local, port, statusPath)
	t.Cleanup(stop)
	sshtest.Eventually(t, 10*time.Second, "the worker-agent listening for the ranks", func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return &workerEndpoint{port: port, local: local, logs: logs}
}

// post is a rank's status request to the endpoint on the worker, on a
// connection of its own, as the SDK sends it: its code and body.
func (w *workerEndpoint) post(token, body string) (int, string, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.local.CAPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, "https://127.0.0.1:"+strconv.Itoa(w.port)+statusPath, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// startCounted is startWorkerEndpoint with the launcher's handler of these
// tests: it counts the requests that reach it with the run's token (in
// hits) and echoes their bodies.
func startCounted(t *testing.T, hits *atomic.Int64) *workerEndpoint {
	t.Helper()
	var run atomic.Pointer[workerEndpoint]
	w := startWorkerEndpoint(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := run.Load()
		if w == nil || r.Header.Get("Authorization") != "Bearer "+w.local.Token || r.URL.Path != statusPath {
			http.Error(rw, "not the run's token or path", http.StatusForbidden)
			return
		}
		b, _ := io.ReadAll(r.Body)
		hits.Add(1)
		_, _ = rw.Write(b)
	}))
	run.Store(w)
	return w
}

// TestRanksEndpointTakes64RanksAtOnce: 64 ranks of one worker pod post at
// once, each on a connection of its own: every one gets 200 and its own
// body back, and every request reaches the launcher's handler. Before, the
// agent carried 16 connections at once and closed the others unanswered.
func TestRanksEndpointTakes64RanksAtOnce(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	w := startCounted(t, &hits)
	const ranks = 64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan string, ranks)
	for i := range ranks {
		wg.Go(func() {
			<-start
			body := fmt.Sprintf(`{"trainerStatus":{"metrics":[{"name":"rank","value":"%d"}]}}`, i)
			code, got, err := w.post(w.local.Token, body)
			if err != nil || code != http.StatusOK || got != body {
				errs <- fmt.Sprintf("rank %d: %d %q %v", i, code, got, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	var failed []string
	for e := range errs {
		failed = append(failed, e)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d ranks failed, first: %s", len(failed), ranks, failed[0])
	}
	if n := hits.Load(); n != ranks {
		t.Fatalf("%d requests reached the launcher's handler, want %d", n, ranks)
	}
}

// TestRanksEndpointIdleConnectionsTakeNoSlot: 20 connections that never
// send a byte (any process of the pod may open them) do not keep a rank's
// request out: it gets its answer at once. Before, 16 idle connections took
// every slot for 2 minutes and the rank's connection was closed.
func TestRanksEndpointIdleConnectionsTakeNoSlot(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	w := startCounted(t, &hits)
	for range 20 {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(w.port)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	time.Sleep(200 * time.Millisecond) // the agent has taken them
	start := time.Now()
	code, body, err := w.post(w.local.Token, `{}`)
	if err != nil || code != http.StatusOK || body != `{}` || hits.Load() != 1 {
		t.Fatalf("the rank's request beside 20 idle connections: %d %q %v (%d reached the launcher)", code, body, err, hits.Load())
	}
	t.Logf("answered in %v", time.Since(start).Round(time.Millisecond))
}
