package rsh

import (
	"fmt"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/rsh/relay"
)

// Usage is what -h and --help print (and `launcher help rsh`).
var Usage = fmt.Sprintf(`usage: podmpi-rsh [options] [user@]host [options] command ...
       (the same client as ssh, launcher rsh and worker-agent rsh)

podmpi's ssh-compatible client, mpirun's ssh program: it runs one command on a
worker with the job's key from the mounted Secret, the worker's host key
pinned to the job's id_rsa.pub, and OpenSSH's command line. Under a running
launcher (%[1]s set) the launcher runs the command on the
connection it already holds to the worker.

Options (OpenSSH's letters; the others OpenSSH knows are accepted without
effect or refused, naming why):
  -p port        the worker's SSH port (default $%[2]s, else %[3]d)
  -l user        the user name (also user@host and -o User=)
  -i file        the identity (default: the job key in $%[4]s)
  -o Key=Value   OpenSSH options: Port, User, IdentityFile, ConnectionAttempts,
                 ConnectTimeout, StrictHostKeyChecking, StdinNull
  -n             stdin from /dev/null
  -q             no warnings
  -v             verbose: debug lines on stderr (options without effect, why
                 the launcher's connection was not used)
  -V             print the version
  -h, --help     print this help

Environment (docs/configuration.md explains each):
  %[4]s, %[2]s, %[5]s,
  %[6]s (how long a worker that is not up yet is waited for, %[7]s),
  %[8]s, %[9]s

Exit status: the remote command's own; 128+N when it was killed by signal N;
%[10]d (%[11]s) when the command could not be run: one stderr line
names the host, the port, the phase (dns, tcp, handshake, host key, auth) and
a fix.
`, relay.EnvSocket, EnvPort, DefaultPort, EnvAuthDir, EnvUser, EnvWait, DefaultWait, EnvConnectTimeout, EnvInsecure,
	exitcode.RemoteShell, remoteShellName())

// remoteShellName is the table's name of exit code 255.
func remoteShellName() string {
	for _, e := range exitcode.Table {
		if e.Code == exitcode.RemoteShell {
			return e.Name
		}
	}
	return "remote-shell"
}
