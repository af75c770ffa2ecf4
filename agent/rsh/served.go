package rsh

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/sshclient"
)

// Served is one command the launcher runs for a relay (its connection
// sharing, package agent/launcher/share): the client's whole logic, as Main
// runs it, on the relay's variables and streams, with the session opened on
// a connection the launcher holds (Sessions) instead of one of its own.
type Served struct {
	// Env are the relay's variables (relay.SentEnv), KEY=VALUE, the last
	// one winning as in a process's environment.
	Env []string
	// Stdin is the relay's stdin (nil: nothing to read); Stdout and Stderr
	// its outputs.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals are the signals the relay received, forwarded to the remote
	// command.
	Signals <-chan os.Signal
	// PID is the relay's process, named in its failure records.
	PID int
	// Sessions opens the session.
	Sessions Sessions
	// Load reads the job configuration (sshclient.LoadJobConfig when nil).
	Load func(authDir, home, identity string) (sshclient.Config, error)
	// Gone reports that the relay went away: nothing is said to it then and
	// no record is left, as for a killed client.
	Gone func() bool
	// Abort loosens the relay's streams once the session is cut short, so
	// that no copier stays blocked on them.
	Abort func()
}

// Run runs the client with args (without argv[0]) and returns the status
// the relay exits with.
func (sv Served) Run(ctx context.Context, args []string) int {
	r := runner{env: lookupIn(sv.Env), stdin: sv.Stdin, stdout: sv.Stdout, stderr: sv.Stderr, sigs: sv.Signals,
		grace: SignalGrace, retryDelay: retryDelay, progressEvery: progressEvery,
		sessions: sv.Sessions, pid: sv.PID, load: sv.Load, gone: sv.Gone, abort: sv.Abort}
	return r.run(ctx, args)
}

// Sessions opens sessions on connections someone else holds: the
// launcher's pool (share.Pool).
type Sessions interface {
	// Session opens a session for req; end must be called once it is over.
	// A failure is classified as sshclient.Dial's are.
	Session(ctx context.Context, req SessionRequest) (s *ssh.Session, end func(), f *sshclient.Failure)
}

// SessionRequest is one session asked of Sessions.
type SessionRequest struct {
	// Host and Port are the worker's, as the command line names them.
	Host string
	Port int
	// Config is the client configuration; a session runs only on a
	// connection made with the same Identity.
	Config sshclient.Config
	// Dial makes a new connection as the client would on its own, waiting
	// for a late worker as the client does.
	Dial func(context.Context) (*ssh.Client, *sshclient.Failure)
	// Wait is how long the client waits for the worker to answer: as long
	// as it waits for a late worker (PODMPI_SSH_WAIT, as the command line
	// bounds it), DefaultWait when that is off.
	Wait time.Duration
	// Stalled, when set, is told once that the worker has not answered
	// the request on a held connection for waited, while others sessions
	// run on that connection: the client's progress line.
	Stalled func(waited time.Duration, others int)
}

// lookupIn looks variables up in env (KEY=VALUE entries, the last one
// winning, as in a process's environment).
func lookupIn(env []string) func(string) (string, bool) {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
