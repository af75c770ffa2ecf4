package sshd

import (
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/podmpi/podmpi/agent/environ"
)

// envPrefixes are the variable-name prefixes a client may set with an "env"
// request: what mpirun/mpiexec, PMIx, UCX and NCCL read. LANG is allowed by
// exact name (see EnvAllowed).
var envPrefixes = []string{"OMPI_", "PRTE_", "PMIX_", "I_MPI_", "HYDRA_", "UCX_", "NCCL_", "LC_"}

const (
	maxEnvNameLen    = 256
	maxEnvValueLen   = 64 << 10
	maxEnvPerSession = 256
)

// What execve(2) accepts on Linux (fs/exec.c): the argv and envp strings,
// each with its NUL, plus one pointer per string, must fit in a quarter of
// the stack rlimit, capped at three quarters of _STK_LIM (8 MiB) and never
// below ARG_MAX (32 pages); each single string is at most MAX_ARG_STRLEN
// (32 pages). With the default 8 MiB stack that is 2 MiB.
const (
	execArgMin    = 32 * 4096
	execArgCap    = 6 << 20
	maxArgStrlen  = 32 * 4096
	envPtrSize    = 8
	envTermSSHTTY = 512 // TERM and SSH_TTY, set when a pty is granted
)

// execArgLimit is the kernel's limit on argv+envp for a stack rlimit.
func execArgLimit(stackRlimit uint64) int {
	limit := uint64(execArgCap)
	limit = min(limit, stackRlimit/4)
	return int(max(limit, execArgMin))
}

// envCost is what one "NAME=value" string takes of the execve limit.
func envCost(kv string) int { return len(kv) + 1 + envPtrSize }

// envBudget is how many bytes (as envCost counts them) client "env"
// requests may add to one session: the execve limit minus the agent's own
// environment and the command's argv (shell, "-c" and a command string of up
// to MAX_ARG_STRLEN, each with its NUL and pointer). Past it the command
// could not start (E2BIG), so the requests are refused instead of held in
// memory: without the bound, 256 values of 64 KiB in each of 10 sessions
// held 160 MiB per connection.
func envBudget(base []string, shell string, stackRlimit uint64) int {
	b := execArgLimit(stackRlimit) - envCost(shell) - envCost("-c") - envCost(strings.Repeat("x", maxArgStrlen-1))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !droppedEnv[k] {
			b -= envCost(kv)
		}
	}
	return max(b, 0)
}

// stackLimit is this process's stack rlimit, which sessions inherit.
func stackLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &rl); err != nil || rl.Cur == 0 {
		return 8 << 20
	}
	return rl.Cur
}

// EnvAllowed reports whether a client may set the environment variable name
// in a session (an SSH "env" request, RFC 4254 §6.4). Allowed are LANG and
// names starting with OMPI_, PRTE_, PMIX_, I_MPI_, HYDRA_, UCX_, NCCL_ or LC_
// followed by at least one more character; the name must be a portable
// identifier ([A-Za-z_][A-Za-z0-9_]*, at most 256 bytes). Everything else,
// notably PATH, LD_PRELOAD, LD_LIBRARY_PATH, HOME and BASH_ENV, is refused:
// the session environment comes from the agent, not from the client.
func EnvAllowed(name string) bool {
	if !validEnvName(name) {
		return false
	}
	if name == "LANG" {
		return true
	}
	for _, p := range envPrefixes {
		if len(name) > len(p) && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func validEnvName(name string) bool {
	return len(name) <= maxEnvNameLen && environ.IsName(name)
}

// validEnvValue rejects values the kernel cannot pass (NUL) and huge ones.
func validEnvValue(v string) bool {
	return len(v) <= maxEnvValueLen && !strings.ContainsRune(v, 0)
}

// envRequest is the payload of an "env" channel request (RFC 4254 §6.4).
type envRequest struct {
	Name  string
	Value string
}

// parseEnvRequest decodes an "env" request payload and applies the
// allow-list. ok is false for malformed payloads and refused names or values;
// name is returned (for logging the refusal) when it could be decoded.
func parseEnvRequest(payload []byte) (name, value string, ok bool) {
	var r envRequest
	if err := ssh.Unmarshal(payload, &r); err != nil {
		return "", "", false
	}
	if !EnvAllowed(r.Name) || !validEnvValue(r.Value) {
		return r.Name, "", false
	}
	return r.Name, r.Value, true
}

// identity is what the session environment says about the agent's user.
type identity struct {
	passwdName string // "" when the uid has no passwd entry (random OpenShift UIDs)
	home       string
}

// lookupIdentity resolves the passwd entry of the current uid, if any, and
// the home directory: the passwd home when the agent can write there, else
// $HOME from base when that is a directory (worker-agent makes it a
// writable one when its own is not: environ.EnsureHome), else /tmp. A
// passwd home under a read-only root would fail every client that writes
// to ~ (horovodrun's ~/.horovod).
func lookupIdentity(base []string) identity {
	return lookupIdentityWith(base, user.LookupId)
}

func lookupIdentityWith(base []string, lookupID func(string) (*user.User, error)) identity {
	var id identity
	if u, err := lookupID(strconv.Itoa(os.Getuid())); err == nil {
		id.passwdName = u.Username
		if environ.Usable(u.HomeDir) {
			id.home = u.HomeDir
		}
	}
	if id.home == "" {
		if h := environ.Get(base, "HOME"); h != "" && isDir(h) {
			id.home = h
		}
	}
	if id.home == "" {
		id.home = "/tmp"
	}
	return id
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// sessionEnv builds a session's environment: base (the agent's), then the
// variables sshd sets, then the client's allowed variables. Later entries
// replace earlier ones with the same name; the order of first appearance is
// kept.
func sessionEnv(base []string, id identity, shell, sshUser string, remote, local net.Addr, extra, client []string) []string {
	userName := id.passwdName
	if userName == "" {
		userName = sshUser
	}
	rip, rport := splitAddr(remote)
	lip, lport := splitAddr(local)
	set := []string{
		"HOME=" + id.home,
		"USER=" + userName,
		"LOGNAME=" + userName,
		"SHELL=" + shell,
		"SSH_CONNECTION=" + rip + " " + rport + " " + lip + " " + lport,
		"SSH_CLIENT=" + rip + " " + rport + " " + lport,
	}
	all := make([]string, 0, len(base)+len(set)+len(extra)+len(client))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !droppedEnv[k] {
			all = append(all, kv)
		}
	}
	all = append(all, set...)
	all = append(all, extra...)
	all = append(all, client...)
	return dedupEnv(all)
}

// droppedEnv are agent variables that would describe a different SSH
// connection than the session's own.
var droppedEnv = map[string]bool{"SSH_AUTH_SOCK": true, "SSH_TTY": true, "SSH_ORIGINAL_COMMAND": true}

func dedupEnv(env []string) []string {
	idx := make(map[string]int, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		if i, seen := idx[k]; seen {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func splitAddr(a net.Addr) (host, port string) {
	if a == nil {
		return "UNKNOWN", "0"
	}
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String(), strconv.Itoa(t.Port)
	}
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return "UNKNOWN", "0"
	}
	return h, p
}
