package relay

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestClassify(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	defer w2.Close()
	for _, tc := range []struct {
		name  string
		stdio [3]int
		modes [3]Stream
		fds   []int
	}{
		{"null stdin, one pipe for stdout and stderr", [3]int{int(null.Fd()), int(w.Fd()), int(w.Fd())},
			[3]Stream{StreamNull, StreamFD, StreamStdout}, []int{int(w.Fd())}},
		{"three pipes", [3]int{int(r.Fd()), int(w.Fd()), int(w2.Fd())},
			[3]Stream{StreamFD, StreamFD, StreamFD}, []int{int(r.Fd()), int(w.Fd()), int(w2.Fd())}},
		{"closed descriptors", [3]int{-1, int(w.Fd()), -1}, [3]Stream{StreamNull, StreamFD, StreamNull}, []int{int(w.Fd())}},
		{"output to /dev/null", [3]int{int(r.Fd()), int(null.Fd()), int(null.Fd())},
			[3]Stream{StreamFD, StreamNull, StreamNull}, []int{int(r.Fd())}},
	} {
		modes, fds, err := Classify(tc.stdio)
		if err != nil || modes != tc.modes || !reflect.DeepEqual(fds, tc.fds) {
			t.Errorf("%s: %v %v %v, want %v %v", tc.name, modes, fds, err, tc.modes, tc.fds)
		}
	}
}

// TestClassifyRefusesATerminal: the launcher could not read a terminal it
// does not control, so a relay on one falls back.
func TestClassifyRefusesATerminal(t *testing.T) {
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptm.Close()
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	_, _, err = Classify([3]int{int(pts.Fd()), 1, 2})
	var u *Unserved
	if !errors.As(err, &u) {
		t.Fatalf("a terminal on stdin: %v, want *Unserved", err)
	}
}

func TestProcs(t *testing.T) {
	env := []string{"PATH=/bin"}
	if _, again := Procs(env, maxProcs); again {
		t.Fatal("ran again with few processors")
	}
	if _, again := Procs(append(env, "GOMAXPROCS=8"), 64); again {
		t.Fatal("ran again although GOMAXPROCS was set")
	}
	got, again := Procs(env, 64)
	if !again || !reflect.DeepEqual(got, []string{"PATH=/bin", "GOMAXPROCS=1", envProcs + "=1"}) {
		t.Fatalf("Procs = %q %t", got, again)
	}
	if back := withoutProcs(got); !reflect.DeepEqual(back, env) {
		t.Fatalf("withoutProcs = %q, want %q", back, env)
	}
	if back := withoutProcs(append(env, "GOMAXPROCS=1")); len(back) != 2 {
		t.Fatalf("a GOMAXPROCS of the user's own was taken out: %q", back)
	}
}

func TestFallbackCommand(t *testing.T) {
	env := []string{"PATH=/bin", EnvSocket + "=/tmp/x/rsh.sock", EnvToken + "=0123abcd", "GOMAXPROCS=1", envProcs + "=1"}
	args, got := fallbackCommand([]string{"/opt/podmpi/bin/ssh", "-p", "2222", "h", "true"}, env, "no\nsocket")
	if !reflect.DeepEqual(args, []string{"/opt/podmpi/bin/ssh", "-p", "2222", "h", "true"}) {
		t.Fatalf("args %q", args)
	}
	want := []string{"PATH=/bin", EnvSocket + "=", EnvUnshared + "=no socket"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("env %q, want %q", got, want)
	}
	if env[1] != EnvSocket+"=/tmp/x/rsh.sock" {
		t.Fatalf("the caller's environment changed: %q", env)
	}
	args, _ = fallbackCommand([]string{"/tmp/other-name", "h", "true"}, nil, "")
	if !reflect.DeepEqual(args, []string{Name, "h", "true"}) {
		t.Fatalf("argv[0] of another name: %q", args)
	}
	if p := fullClientPaths("/opt/podmpi/bin/podmpi-rsh"); !reflect.DeepEqual(p, []string{"/opt/podmpi/bin/launcher", "/opt/podmpi/bin/worker-agent"}) {
		t.Fatalf("full clients %q", p)
	}
}

// fakeLauncher listens on a socket and handles each connection with h.
func fakeLauncher(t *testing.T, h func(*net.UnixConn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rsh.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			h(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return path
}

// TestRelayAnswers: a launcher that closes the socket before it answers ran
// nothing (the relay falls back); one that takes the request and does not
// answer in time may run it still, so the relay fails (255) rather than
// run it a second time on its own connection.
func TestRelayAnswers(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	stdio := [3]int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	closing := fakeLauncher(t, func(c *net.UnixConn) {
		_, _, _ = ReadFrame(c)
		c.Close()
	})
	c := Client{Socket: closing, Args: []string{"h", "true"}, Stdio: stdio}
	var u *Unserved
	if _, err := c.Run(); !errors.As(err, &u) {
		t.Fatalf("a launcher that closed before answering: %v, want *Unserved", err)
	}
	release := make(chan struct{})
	silent := fakeLauncher(t, func(c *net.UnixConn) {
		_, _, _ = ReadFrame(c)
		<-release
		c.Close()
	})
	defer close(release)
	c = Client{Socket: silent, Args: []string{"h", "true"}, Stdio: stdio, Timeout: 200 * time.Millisecond}
	if code, err := c.Run(); code != 255 || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a launcher that did not answer: %d, %v; want 255, ErrOutcomeUnknown", code, err)
	}
}
