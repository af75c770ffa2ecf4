package sshtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Agent is a worker-agent process a test started with StartAgent.
type Agent struct {
	Cmd     *exec.Cmd
	SSHAddr string // where its SSH server listens, as it logged it
	WebAddr string // where its HTTP server listens

	done chan struct{}
	exit int
	log  Buffer
}

// StartAgent starts cmd, a worker-agent whose flags include
// --log.format=json (listen addresses such as 127.0.0.1:0 are fine: the
// agent logs the bound ones), reads its log until both listeners are bound,
// and stops it when the test ends if it is still running (SIGTERM, then
// SIGKILL after 10 s, by PID). Its stdout and stderr go to Log.
func StartAgent(t testing.TB, cmd *exec.Cmd) *Agent {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 5 * time.Second
	a := &Agent{Cmd: cmd, done: make(chan struct{}), exit: -1}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", cmd.Args, err)
	}
	pid := cmd.Process.Pid
	addrs := make(chan [2]string, 1)
	go func() {
		var ssh, web string
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = a.log.Write([]byte(line + "\n"))
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			switch rec.Msg {
			case "ssh listening":
				ssh = rec.Addr
			case "http listening":
				web = rec.Addr
			}
			if ssh != "" && web != "" {
				select {
				case addrs <- [2]string{ssh, web}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		a.exit = ExitStatus(err)
		_ = pw.Close()
		close(a.done)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
			return
		default:
		}
		// SIGTERM first: the agent then ends its sessions' process groups,
		// which a SIGKILL of the agent alone would leave running.
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-a.done
		}
	})
	select {
	case got := <-addrs:
		a.SSHAddr, a.WebAddr = got[0], got[1]
	case <-a.done:
		t.Fatalf("worker-agent exited %d before listening:\n%s", a.exit, a.Log())
	case <-time.After(time.Minute):
		t.Fatalf("worker-agent did not log both listen addresses within a minute:\n%s", a.Log())
	}
	return a
}

// ExitStatus is the exit code in err as exec.Cmd's Run or Wait return it:
// 0 for nil, -1 when the process did not exit normally or never ran.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Log is everything the agent wrote so far.
func (a *Agent) Log() string { return a.log.String() }

// Done is closed when the agent has exited.
func (a *Agent) Done() <-chan struct{} { return a.done }

// ExitCode is the agent's exit code once Done is closed.
func (a *Agent) ExitCode() int {
	<-a.done
	return a.exit
}

// Wait waits up to d for the agent to exit and returns its exit code.
func (a *Agent) Wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-a.done:
		return a.exit
	case <-time.After(d):
		t.Fatalf("worker-agent still running after %s:\n%s", d, a.Log())
		return -1
	}
}

// Get asks the agent's HTTP server for path; the status is 0 when nothing
// answered, with the error as the body.
func (a *Agent) Get(path string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + a.WebAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// WaitReady polls /readyz until it answers 200 (keys loaded, SSH served),
// for at most d.
func (a *Agent) WaitReady(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, body := a.Get("/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-agent not ready within %s (last: %d %s):\n%s", d, code, body, a.Log())
		}
		select {
		case <-a.done:
			t.Fatalf("worker-agent exited %d:\n%s", a.exit, a.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and returns the exit code, failing the test when the
// agent does not exit within d.
func (a *Agent) Stop(t testing.TB, d time.Duration) int {
	t.Helper()
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	return a.Wait(t, d)
}
