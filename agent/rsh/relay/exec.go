package relay

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// fullClients are the binaries, next to the relay, that carry the full
// client (their `rsh`, and the client names): the launcher's, and on a
// worker image without it, worker-agent's.
var fullClients = []string{"launcher", "worker-agent"}

// Fallback replaces the process with the full client found next to self
// (the relay binary's path): argv[0] is kept when it is one of Names (else
// Name), so that the binary runs its client; EnvSocket is cleared, so that
// it does not try the launcher again, and EnvToken, which it no longer
// needs; EnvUnshared says why (the client's -v
// shows it); and what Procs added to the environment is taken back out. It
// returns only when no full client could be started.
func Fallback(self string, argv, env []string, reason string) error {
	args, env := fallbackCommand(argv, env, reason)
	var errs []string
	for _, p := range fullClientPaths(self) {
		err := syscall.Exec(p, args, env)
		errs = append(errs, fmt.Sprintf("%s: %v", p, err))
	}
	return fmt.Errorf("no full client to fall back to (%s); install podmpi's bin directory whole (launcher next to %s)",
		strings.Join(errs, "; "), filepath.Base(self))
}

// fallbackCommand is the argv and environment Fallback runs the full client
// with.
func fallbackCommand(argv, env []string, reason string) ([]string, []string) {
	args := slices.Clone(argv)
	if len(args) == 0 || !IsName(args[0]) {
		args = append([]string{Name}, args[min(1, len(args)):]...)
	}
	env = slices.DeleteFunc(slices.Clone(withoutProcs(env)), func(kv string) bool {
		return strings.HasPrefix(kv, EnvSocket+"=") || strings.HasPrefix(kv, EnvUnshared+"=") || strings.HasPrefix(kv, EnvToken+"=")
	})
	return args, append(env, EnvSocket+"=", EnvUnshared+"="+oneLine(reason))
}

// fullClientPaths are the full clients Fallback tries, in order.
func fullClientPaths(self string) []string {
	dir := filepath.Dir(self)
	out := make([]string, len(fullClients))
	for i, b := range fullClients {
		out[i] = filepath.Join(dir, b)
	}
	return out
}

func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// maxProcs is the largest GOMAXPROCS the relay runs with as it is: the Go
// runtime sets up every processor slot before main (about 28 KiB each),
// so on a 64-CPU node an idle relay would hold more than a megabyte of them.
const maxProcs = 4

// envProcs marks an environment Procs changed.
const envProcs = "PODMPI_RSH_GOMAXPROCS"

// Procs returns the environment for running the relay again with one
// processor slot, and whether that is worth it: GOMAXPROCS is not set and
// the runtime chose more than maxProcs (procs).
func Procs(env []string, procs int) ([]string, bool) {
	if procs <= maxProcs || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		return env, false
	}
	return append(slices.Clone(env), "GOMAXPROCS=1", envProcs+"=1"), true
}

// withoutProcs takes out what Procs added.
func withoutProcs(env []string) []string {
	if !slices.Contains(env, envProcs+"=1") {
		return env
	}
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return kv == envProcs+"=1" || kv == "GOMAXPROCS=1"
	})
}
