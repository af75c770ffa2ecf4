package share

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// socketPair returns the two ends of a unix stream socket pair, blocking
// as a process inherits them.
func socketPair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := os.NewFile(uintptr(fds[0]), "socket"), os.NewFile(uintptr(fds[1]), "socket peer")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// threads is how many threads this process runs.
func threads(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// settledGoroutines is how many goroutines run once the count holds still
// for a moment (those of a session that just ended are done), at most 2 s.
func settledGoroutines() int {
	last := runtime.NumGoroutine()
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

// TestSocketStdinEndsWithTheSession: a relay whose stdin is a socket (not
// a pipe: the launcher cannot reopen it, and must not make it non-blocking
// under the relay's parent, which shares it) leaves nothing behind when its
// session ends: no goroutine or thread stays blocked reading it, and what
// arrives on it afterwards is left to whoever reads it next. Before, every
// session left a goroutine and a thread in read(2) on it until the socket's
// peer wrote or closed, and the first of them took what the peer wrote.
func TestSocketStdinEndsWithTheSession(t *testing.T) {
	// Not parallel: it counts the process's goroutines and threads.
	f := newFixture(t)
	sh := startShare(t)
	stdin, peer := socketPair(t)
	run := func() {
		t.Helper()
		r := runRelay(t, sh, relayOpts{env: f.shareEnv(), stdinFile: stdin}, "-p", f.port(), "127.0.0.1", "echo hi")
		if r.err != nil || r.code != 0 || r.stdout != "hi\n" {
			t.Fatalf("session: %+v", r)
		}
	}
	run() // the connection and its goroutines exist from here on
	goroutines, threadsBefore := settledGoroutines(), threads(t)
	const sessions = 16
	for range sessions {
		run()
	}
	var now int
	sshtest.Eventually(t, 10*time.Second, "the sessions' goroutines gone", func() bool {
		now = runtime.NumGoroutine()
		return now <= goroutines+sessions/4
	})
	if n := threads(t) - threadsBefore; n >= sessions/2 {
		t.Fatalf("%d more threads after %d sessions: some stayed blocked on the socket", n, sessions)
	}
	t.Logf("goroutines %d before the sessions, %d after; threads %d, %d", goroutines, now, threadsBefore, threads(t))

	if _, err := peer.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := stdin.Read(b) // returns at the latest when the cleanup closes peer
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if s != "after\n" {
			t.Fatalf("the stdin's next reader got %q, want what was written after the sessions", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("what was written to the stdin after the sessions ended was taken by a reader they left behind")
	}
}

// nowaitPair is a nowait on one end of a socket pair or a pipe (the end
// that reads when read is set, else the end that writes), and the other
// end, as the relay's parent would hold them.
func nowaitPair(t *testing.T, socket, read bool) (*nowait, *os.File, *os.File) {
	t.Helper()
	var mine, other *os.File
	switch {
	case socket:
		mine, other = socketPair(t)
	case read:
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		mine, other = r, w
	default:
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		mine, other = w, r
	}
	t.Cleanup(func() { mine.Close(); other.Close() })
	fd, err := unix.FcntlInt(mine.Fd(), unix.F_DUPFD_CLOEXEC, 0) // what SCM_RIGHTS gives the launcher
	if err != nil {
		t.Fatal(err)
	}
	n, ok := newNowait(fd, socket, "test").(*nowait)
	if !ok {
		t.Fatal("no eventfd")
	}
	return n, mine, other
}

// endsWith waits, at most 5 s, for what ch reports, which must be want.
func endsWith(t *testing.T, ch <-chan error, want error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != want {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: it did not end", what)
	}
}

// TestNowait: a nowait moves data both ways without making the shared
// description non-blocking, and Close ends a read that waits, at once,
// leaving later bytes to the description's other readers; a write that
// waits ends at its deadline, or at Close.
func TestNowait(t *testing.T) {
	t.Parallel()
	for _, socket := range []bool{true, false} {
		name := map[bool]string{true: "socket", false: "pipe"}[socket]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n, mine, peer := nowaitPair(t, socket, true)
			if _, err := peer.Write([]byte("abc")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 8)
			if k, err := n.Read(b); err != nil || string(b[:k]) != "abc" {
				t.Fatalf("read %q, %v", b[:k], err)
			}
			read := make(chan error, 1)
			go func() {
				_, err := n.Read(b)
				read <- err
			}()
			time.Sleep(50 * time.Millisecond) // let it wait: Close must end it either way
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			endsWith(t, read, os.ErrClosed, "the read that waited, at Close")
			if fl, err := unix.FcntlInt(mine.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
				t.Fatalf("the shared description's flags %#x, %v: made non-blocking", fl, err)
			}
			if _, err := peer.Write([]byte("later")); err != nil {
				t.Fatal(err)
			}
			if k, err := mine.Read(b); err != nil || string(b[:k]) != "later" {
				t.Fatalf("the description's own reader got %q, %v", b[:k], err)
			}

			w, _, wpeer := nowaitPair(t, socket, false)
			if k, err := w.Write([]byte("xyz")); err != nil || k != 3 {
				t.Fatalf("write: %d, %v", k, err)
			}
			if k, err := wpeer.Read(b); err != nil || string(b[:k]) != "xyz" {
				t.Fatalf("the peer read %q, %v", b[:k], err)
			}
			wrote := make(chan error, 1)
			go func() {
				_, err := w.Write(make([]byte, 16<<20)) // nobody reads: it waits
				wrote <- err
			}()
			if err := w.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			endsWith(t, wrote, os.ErrDeadlineExceeded, "the write that waited, at its deadline")
			if err := w.SetWriteDeadline(time.Time{}); err != nil {
				t.Fatal(err)
			}
			go func() {
				_, err := w.Write(make([]byte, 16<<20))
				wrote <- err
			}()
			time.Sleep(50 * time.Millisecond)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			endsWith(t, wrote, os.ErrClosed, "the write that waited, at Close")
		})
	}
}
