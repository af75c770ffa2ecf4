package worker

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/worker/account"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/gpu"
)

// newAccount is an account over an empty /proc and a v1 cgroup fixture
// with a 64 MiB limit.
func newAccount(t *testing.T) *account.Account {
	t.Helper()
	dir := t.TempDir()
	cg := filepath.Join(dir, "sys", "memory", "job")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"memory.usage_in_bytes": "1048576", "memory.max_usage_in_bytes": "2097152", "memory.limit_in_bytes": "67108864",
		"memory.failcnt": "0", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0",
	} {
		if err := os.WriteFile(filepath.Join(cg, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "sys", "memory", "memory.usage_in_bytes"), []byte("9999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("4:memory:/job\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := account.New(account.Config{CgroupRoot: filepath.Join(dir, "sys"), ProcSelfCgroup: filepath.Join(dir, "cgroup"),
		Proc: filepath.Join(dir, "proc"), RootPID: 1, Hostname: "tj-node-0-1"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestEventsEndpoint(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	w := newWorker(t, readySSH(), gpu.NewNull(""), func(c *Config) { c.Account = acct })
	acct.SessionExited(account.SessionExit{Session: "c1/s1", Command: "orted", PID: 5, ExitCode: -1, Signal: syscall.SIGKILL})
	since := acct.Events(api.EventsQuery{}).Events[0].Time.Add(time.Nanosecond)
	acct.SessionExited(account.SessionExit{Session: "c1/s2", Command: "orted", PID: 6, ExitCode: 2})
	if second := acct.Events(api.EventsQuery{}).Events[1].Time; second.Before(since) {
		t.Skipf("the clock did not move between two events (%v)", second)
	}

	code, body := get(t, w.Handler(), api.EventsPath+"?since="+url.QueryEscape(since.Format(time.RFC3339Nano)))
	if code != http.StatusOK {
		t.Fatalf("/events = %d %s", code, body)
	}
	ev, err := api.DecodeEvents(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Hostname != "tj-node-0-1" || ev.Memory.LimitBytes != 64<<20 || ev.Memory.Version != 1 || ev.Since.IsZero() {
		t.Errorf("document = %+v", ev)
	}
	if len(ev.Events) != 1 || ev.Events[0].Session != "c1/s2" || ev.Events[0].ExitCode != 2 {
		t.Fatalf("events since %v = %+v, want only the second session", since, ev.Events)
	}
	if ev.LastSeq != 2 || ev.Since.IsZero() {
		t.Errorf("lastSeq %d since %v; want 2 and the query's time", ev.LastSeq, ev.Since)
	}
	code, body = get(t, w.Handler(), api.EventsPath+"?after=1")
	if ev, err := api.DecodeEvents(strings.NewReader(body)); code != 200 || err != nil || len(ev.Events) != 1 || ev.Events[0].Seq != 2 || ev.After != 1 {
		t.Errorf("/events?after=1 = %d %s (%v), want only the second event", code, body, err)
	}
	if code, body := get(t, w.Handler(), api.EventsPath+"?after=-1"); code != http.StatusBadRequest || !strings.Contains(body, "lastSeq") {
		t.Errorf("/events?after=-1 = %d %q, want 400 naming what after is", code, body)
	}
	if code, body := get(t, w.Handler(), api.EventsPath); code != 200 || !strings.Contains(body, `"c1/s1"`) {
		t.Errorf("/events without since = %d %s, want every event", code, body)
	}
	if code, body := get(t, w.Handler(), api.EventsPath+"?since=yesterday"); code != http.StatusBadRequest || !strings.Contains(body, "RFC 3339") {
		t.Errorf("/events?since=yesterday = %d %q, want 400 naming the format", code, body)
	}
}

// TestEventsTellTheLaunchers: /events carries the launcher instances that
// started sessions on the SSH server, as they are now, whatever the query
// asks of the events.
func TestEventsTellTheLaunchers(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := []api.LauncherSessions{{Launcher: api.Launcher{Instance: strings.Repeat("ab", 16), Hostname: "tj-launcher-0-0", Started: started},
		Sessions: 3, Daemons: 1, Open: 1}}
	w := newWorker(t, readySSH(), gpu.NewNull(""), func(c *Config) {
		c.Account = newAccount(t)
		c.Launchers = func() []api.LauncherSessions { return want }
	})
	code, body := get(t, w.Handler(), api.EventsPath+"?after=99")
	ev, err := api.DecodeEvents(strings.NewReader(body))
	if code != http.StatusOK || err != nil || !reflect.DeepEqual(ev.Launchers, want) {
		t.Fatalf("/events = %d %s (%v), want launchers %+v", code, body, err, want)
	}
	if !strings.Contains(body, `"daemons": 1`) || !strings.Contains(body, `"instance": "abab`) {
		t.Errorf("/events does not name the fields: %s", body)
	}
}

func TestEventsWithoutAccount(t *testing.T) {
	t.Parallel()
	w := newWorker(t, readySSH(), gpu.NewNull(""), nil)
	if code, body := get(t, w.Handler(), api.EventsPath); code != http.StatusNotFound || !strings.Contains(body, "no account") {
		t.Fatalf("/events = %d %q, want 404", code, body)
	}
}

// fakeWatcher delivers one Xid per device and then waits for ctx.
type fakeWatcher struct{ devices chan []gpu.Device }

func (f fakeWatcher) Watch(ctx context.Context, devices []gpu.Device, fn func(gpu.Event)) error {
	f.devices <- devices
	for _, d := range devices {
		fn(gpu.Event{Kind: gpu.EventXid, Index: d.Index, UUID: d.UUID, Xid: 79, GPUInstance: -1, ComputeInstance: -1})
	}
	<-ctx.Done()
	return nil
}

// TestRunWatchesGPUsIntoTheAccount: once detection found GPUs, Run hands
// them to the watcher, whose events reach /events; the watcher stops with Run.
func TestRunWatchesGPUsIntoTheAccount(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	fw := fakeWatcher{devices: make(chan []gpu.Device, 1)}
	w := newWorker(t, readySSH(), fakeDetector{inv: twoGPUs()}, func(c *Config) {
		c.Account, c.GPUEvents = acct, fw
		c.WebAddress, c.SSHAddress = "127.0.0.1:0", "127.0.0.1:0"
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case devs := <-fw.devices:
		if len(devs) != 2 {
			t.Fatalf("watcher got %d devices, want 2", len(devs))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher was not started")
	}
	addr := waitFor(t, func() net.Addr { return w.WebAddr() })
	code, body := httpGet(t, addr, api.EventsPath)
	if code != 200 || strings.Count(body, `"kind": "gpu-xid"`) != 2 {
		t.Fatalf("/events = %d %s, want two Xid events", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return (the watcher or the account kept it)")
	}
}
