// The Go runtime reads no cgroup files at start and keeps none open (a
// relay keeps no descriptor but its socket); GOMAXPROCS is then the CPUs
// the process may run on, and relay.Procs brings a large one down to 1.
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

// Command podmpi-rsh is podmpi's ssh program as make build installs it
// (bin/podmpi-rsh, bin/ssh linked to it; /opt/podmpi/bin in the images): a
// small relay of the launcher's connection sharing. Started under the
// launcher's mpirun (PODMPI_RSH_SOCKET set), it hands its command line and
// its stdin, stdout and stderr to the launcher, which runs the command on
// the SSH connection it already holds to the worker, and then only passes
// on SIGINT, SIGTERM and SIGHUP and exits with the command's status. Where
// no launcher shares (a worker's tree spawn, a person's ssh, sharing turned
// off) or it cannot serve (a terminal on stdin), it runs the full client
// instead: the launcher binary next to it as `podmpi-rsh` (worker-agent on
// an image without the launcher), whose -v says why.
//
// It imports only package relay and the standard library, so that each of
// the one-per-worker copies mpirun starts costs about a millisecond and
// well under a megabyte of its own memory (BENCHMARKS.md, figure 3c).
package main

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/podmpi/podmpi/agent/rsh/relay"
)

func main() {
	// First, as ssh(1) does: what mpirun's other children left open is not
	// ours to keep. Hydra's mpiexec leaves every sibling's pipes open in
	// each ssh program it starts, so a relay that kept them until the
	// launcher answered held about 4 per earlier worker: with 64 relays
	// started at once, 1,000-3,400 descriptors in the launcher pod at the
	// peak, depending on how fast the launcher answered (make bench,
	// figure 3c). It costs about 15 microseconds.
	_, _ = relay.CloseInheritedFDs()
	// One processor from here on: the relay mostly waits, and with more
	// every goroutine that wakes starts another thread (half the context
	// switches of a session with one).
	procs := runtime.GOMAXPROCS(1)
	if env, again := relay.Procs(os.Environ(), procs); again {
		if self, err := os.Executable(); err == nil {
			_ = syscall.Exec(self, os.Args, env) // on failure, go on as we are
		}
	}
	sigs := make(chan os.Signal, 4)
	c := relay.Client{
		Socket: os.Getenv(relay.EnvSocket), Args: os.Args[1:], Env: os.Environ(),
		Stdio: [3]int{0, 1, 2}, Signals: sigs, Release: relay.CloseStdio,
		Started: func() {
			// Signals are taken from here on: before, one ends the relay
			// as it would end any program, and the launcher, seeing it go,
			// runs nothing or closes the session. os/signal starts threads
			// of its own, which a relay that falls back never needs.
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		},
	}
	code, err := c.Run()
	var u *relay.Unserved
	if !errors.As(err, &u) {
		if errors.Is(err, relay.ErrOutcomeUnknown) {
			_, _ = os.Stderr.WriteString("podmpi-rsh: " + err.Error() + "\n")
		}
		os.Exit(code)
	}
	// The full client closes what it inherited first thing.
	self, err := os.Executable()
	if err == nil {
		err = relay.Fallback(self, os.Args, os.Environ(), u.Reason)
	}
	_, _ = os.Stderr.WriteString("podmpi-rsh: cannot run the ssh client: " + err.Error() + "\n")
	os.Exit(255)
}
