package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/agent/launcher/share"
	"github.com/podmpi/podmpi/agent/rsh"
	"github.com/podmpi/podmpi/agent/rsh/relay"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// relayScript runs under `launcher --`, as mpirun would, with make build's
// bin/ laid out: podmpi-rsh is the relay binary. It runs a command through
// it, then one it kills while it runs, counting the relay's descriptors once
// the launcher holds its streams.
const relayScript = `set -u
echo "socket=${PODMPI_RSH_SOCKET:-unset}"
podmpi-rsh 127.0.0.1 'echo out; exit 3'; echo "code=$?"
podmpi-rsh 127.0.0.1 'trap "echo got-term; exit 7" TERM; echo ready; sleep 30 & wait' > "$OUT" & pid=$!
i=0; until grep -q ready "$OUT"; do i=$((i+1)); [ $i -lt 400 ] || exit 99; sleep 0.05; done
echo "fds=$(ls /proc/$pid/fd | wc -l)"
kill -TERM $pid; wait $pid; echo "killed=$? $(cat "$OUT" | tr '\n' ' ')"
`

// TestRelayUnderTheLauncher: the relay binary mpirun starts hands its
// session to the launcher, which runs it on the probe's connection (the
// worker sees one connection in all): exit codes and output pass, a
// signal to the relay reaches the remote command, and the relay keeps no
// descriptor but its socket. With --ssh.share-connections=false the relay
// runs the full client on a connection of its own.
func TestRelayUnderTheLauncher(t *testing.T) {
	auth := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	bin := binDir(t)
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("share=%t", shared), func(t *testing.T) {
			agent, port := startAgentWithLog(t, auth)
			tmp := t.TempDir()
			cmd := exec.Command(filepath.Join(bin, "launcher"), "--workers", "127.0.0.1", "--ssh.port", fmt.Sprint(port), "--ssh.auth-dir", auth,
				"--slots", "1", "--mpi.implementation", "mpich", "--web.listen-address", "", "--termination-log", "", "--kube.api", "off",
				"--hostfile.output", filepath.Join(tmp, "hostfile"), "--mpirun.timeout", "45s",
				fmt.Sprintf("--ssh.share-connections=%t", shared), "--", "sh", "-c", relayScript)
			cmd.Env = append(os.Environ(), "OUT="+filepath.Join(tmp, "out"), "TMPDIR="+tmp)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("launcher: %v\n%s", err, out)
			}
			o := string(out)
			for _, want := range []string{"out\ncode=3\n", "killed=7 ready got-term \n"} {
				if !strings.Contains(o, want) {
					t.Fatalf("output lacks %q:\n%s", want, o)
				}
			}
			conns := strings.Count(agent.Log(), `"msg":"ssh connection"`)
			if shared {
				if !regexp.MustCompile(`socket=\S+/`+share.SocketName+`\n`).MatchString(o) || !strings.Contains(o, "fds=1\n") {
					t.Fatalf("shared: want the socket and a relay holding one descriptor:\n%s", o)
				}
				if conns != 1 {
					t.Fatalf("the worker saw %d connections, want the probe's only:\n%s", conns, agent.Log())
				}
				return
			}
			if !strings.Contains(o, "socket=unset\n") || conns != 3 {
				t.Fatalf("not shared: want no socket and 3 connections (probe, 2 clients), got %d:\n%s", conns, o)
			}
		})
	}
}

// TestRelayFallsBackWithoutALauncher: the relay binary started where no
// launcher shares (a person's ssh, a worker's tree spawn) runs the full
// client next to it, under its own name, and -v says why.
func TestRelayFallsBackWithoutALauncher(t *testing.T) {
	auth := sshtest.WriteAuthDir(t, sshtest.NewTrainerKey(t))
	port := startAgent(t, auth)
	bin := binDir(t)
	for _, name := range rsh.Names {
		cmd := exec.Command(filepath.Join(bin, name), "-v", "-p", fmt.Sprint(port), "127.0.0.1", "echo own; exit 4")
		cmd.Args[0] = name
		cmd.Env = []string{"PATH=/usr/bin:/bin", "PODMPI_SSH_AUTH_DIR=" + auth, relay.EnvSocket + "="}
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 4 || !strings.Contains(string(out), "own\n") {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		want := "podmpi-rsh: debug: not using the launcher's shared connection (" + relay.EnvSocket + " is not set"
		if !strings.Contains(string(out), want) {
			t.Fatalf("%s: output lacks %q:\n%s", name, want, out)
		}
	}
}
