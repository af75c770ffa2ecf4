package rsh

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podmpi/podmpi/agent/environ"
	"github.com/podmpi/podmpi/agent/execpath"
	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/rsh/relay"
)

// Name is the file name under which a podmpi binary acts as this client:
// the launcher gives mpirun the path of a symlink of that name (Setup) and
// Open MPI's agent list names it, so that daemons started on workers find it
// on their PATH too (OnPath). It is the name of the small relay binary
// (cmd/launcher/podmpi-rsh) that make build installs next to the launcher.
const Name = relay.Name

// Names are the program names (argv[0] without its directory) under which
// the launcher and worker-agent binaries run Main instead of their own
// command line: Name, and ssh. make build installs the relay binary as Name
// and links ssh to it in bin/ (the images' /opt/podmpi/bin), so that with
// that directory first on PATH every ssh that mpirun, Hydra, Intel MPI,
// horovodrun or a person starts is podmpi's client; the relay runs the
// launcher's full client when there is no launcher to share with. This is
// the one list of client names (package relay holds it, for the relay
// binary); the launcher owns the list of its mpirun/mpiexec names.
var Names = relay.Names

// binaries are the file names of podmpi's programs (make build's bin/).
var binaries = []string{"launcher", "worker-agent", Name}

// IsName reports whether argv0 is one of Names.
func IsName(argv0 string) bool { return relay.IsName(argv0) }

// Invoked reports whether a process started with args (os.Args) runs the
// client: by one of Names, or as the `rsh` subcommand of either binary. Such
// a process calls relay.CloseInheritedFDs first thing in main.
func Invoked(args []string) bool {
	if len(args) == 0 {
		return false
	}
	return IsName(args[0]) || (len(args) > 1 && args[1] == "rsh")
}

// DefaultPath is the PATH assumed when the environment has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// PrependPath returns dir followed by path (DefaultPath when path is "").
func PrependPath(dir, path string) string {
	if path == "" {
		path = DefaultPath
	}
	return dir + string(os.PathListSeparator) + path
}

// unsafePathChars are characters that break the rsh path inside MPI
// parameters: Open MPI splits the agent on ':' and spaces; shells and the
// quoted command strings break on quotes and '$'.
const unsafePathChars = " \t\r\n:;\"'`$\\"

// Setup creates a private directory <tmpDir>/podmpi-XXXX (mode 0700) holding
// a symlink Name pointing to the client binary next to self (self is the
// running launcher, usually os.Executable(); see ClientBinary). tmpDir ""
// means os.TempDir(). It returns the symlink's absolute path, its
// directory, and a cleanup that removes both.
func Setup(self, tmpDir string) (rshPath, rshDir string, cleanup func(), err error) {
	dir, cleanup, err := setup(ClientBinary(self), tmpDir, []string{Name})
	if err != nil {
		return "", "", nil, err
	}
	return filepath.Join(dir, Name), dir, cleanup, nil
}

// ClientBinary is the program the launcher gives mpirun as its ssh
// program: the relay binary that make build installs next to the launcher
// (bin/podmpi-rsh, a small program of its own), or self when there is none
// (a launcher built or copied alone), whose client names run the full
// client, which shares the launcher's connections too.
func ClientBinary(self string) string {
	p := filepath.Join(filepath.Dir(self), Name)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || execpath.SameFile(p, self) {
		return self
	}
	return p
}

// setup is Setup for every name of names.
func setup(self, tmpDir string, names []string) (string, func(), error) {
	if !filepath.IsAbs(self) {
		return "", nil, fmt.Errorf("setting up %s: binary path %q is not absolute", Name, self)
	}
	if fi, err := os.Stat(self); err != nil {
		return "", nil, fmt.Errorf("setting up %s: binary: %w", Name, err)
	} else if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", nil, fmt.Errorf("setting up %s: binary %s is not an executable file (mode %s)", Name, self, fi.Mode())
	}
	if tmpDir == "" {
		tmpDir = os.TempDir()
	}
	tmpDir, err := filepath.Abs(tmpDir)
	if err != nil {
		return "", nil, fmt.Errorf("setting up %s: temp dir: %w", Name, err)
	}
	if strings.ContainsAny(tmpDir, unsafePathChars) {
		return "", nil, fmt.Errorf("setting up %s: temp dir %q contains a space, ':' or quote, which MPI parameters cannot carry; set TMPDIR to a plain path such as /tmp", Name, tmpDir)
	}
	dir, err := os.MkdirTemp(tmpDir, "podmpi-")
	if err != nil {
		return "", nil, fmt.Errorf("setting up %s: creating a private dir in %s (is it writable? with readOnlyRootFilesystem mount an emptyDir there): %w", Name, tmpDir, err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o700); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("setting up %s: chmod %s: %w", Name, dir, err)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.Symlink(self, p); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("setting up %s: symlink %s -> %s: %w", Name, p, self, err)
		}
	}
	return dir, cleanup, nil
}

// OnPath makes sure the PATH in env finds this client first under every
// one of Names: worker-agent's sessions then run it for Open MPI's tree
// spawn and for anything else that calls ssh, never an OpenSSH the image
// happens to have. When a name is missing from PATH or finds another
// program first (an image without podmpi's bin directory first on PATH), it
// links every name to self in a private directory (Setup) and puts that
// first on PATH. It returns the new environment, the directory added (""
// when none was needed) and a cleanup.
func OnPath(env []string, self string) ([]string, string, func(), error) {
	path := environ.Get(env, "PATH")
	if onPath(path, self) {
		return env, "", func() {}, nil
	}
	dir, cleanup, err := setup(self, "", Names)
	if err != nil {
		return nil, "", nil, err
	}
	return environ.Set(env, "PATH", PrependPath(dir, path)), dir, cleanup, nil
}

// onPath reports whether every one of Names is found first on path as a
// podmpi binary.
func onPath(path, self string) bool {
	for _, n := range Names {
		p := execpath.Look(n, path)
		if p == "" || !IsClient(p, self) {
			return false
		}
	}
	return true
}

// IsClient reports whether the program at p, run under one of Names, is
// podmpi's client: self, or one of podmpi's binaries in the directory self
// lives in (make build's bin/, the images' /opt/podmpi/bin, where ssh links
// to podmpi-rsh), symlinks followed. Each of them runs the client under
// those names.
func IsClient(p, self string) bool {
	if execpath.SameFile(p, self) {
		return true
	}
	rp, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	rs, err := filepath.EvalSymlinks(self)
	if err != nil {
		return false
	}
	return filepath.Dir(rp) == filepath.Dir(rs) && slices.Contains(binaries, filepath.Base(rp))
}

// Settings are what the client reads from the environment (see the package
// documentation): the launcher and worker-agent pass their own flag values
// to the rsh programs their MPI starts through these variables.
type Settings struct {
	AuthDir  string
	Port     int
	User     string
	Insecure bool
	// Wait is PODMPI_SSH_WAIT; nil leaves it unset.
	Wait *time.Duration
	// FailureDir is where the client leaves a record of each remote
	// command it cannot run (EnvFailureDir); "" leaves it unset.
	FailureDir string
	// Socket is the launcher's socket for connection sharing
	// (relay.EnvSocket); "" leaves it unset.
	Socket string
	// Launcher is the launcher instance every client started on its pod
	// declares (launcherid.EnvName); zero leaves it unset.
	Launcher launcherid.Instance
}

// Env returns the variables that carry s, in a fixed order, leaving out
// what is unset.
func (s Settings) Env() [][2]string {
	var out [][2]string
	if s.Port > 0 {
		out = append(out, [2]string{EnvPort, strconv.Itoa(s.Port)})
	}
	if s.AuthDir != "" {
		out = append(out, [2]string{EnvAuthDir, s.AuthDir})
	}
	if s.User != "" {
		out = append(out, [2]string{EnvUser, s.User})
	}
	if s.Insecure {
		out = append(out, [2]string{EnvInsecure, "true"})
	}
	if s.Wait != nil {
		out = append(out, [2]string{EnvWait, s.Wait.String()})
	}
	if s.FailureDir != "" {
		out = append(out, [2]string{EnvFailureDir, s.FailureDir})
	}
	if s.Socket != "" {
		out = append(out, [2]string{relay.EnvSocket, s.Socket})
	}
	if !s.Launcher.IsZero() {
		out = append(out, [2]string{launcherid.EnvName, s.Launcher.Value()})
	}
	return out
}

// NewCommand is the `rsh` subcommand both binaries carry: every argument
// goes to Main unparsed, as mpirun passes ssh(1) arguments; done receives
// Main's exit status.
func NewCommand(env func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer, done func(code int)) *cobra.Command {
	return &cobra.Command{
		Use:                "rsh [ssh options] [user@]host command...",
		Short:              "ssh-compatible client for mpirun's remote daemons (job key, host key pinned to id_rsa.pub)",
		Long:               Usage,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			done(Main(ctx, args, env, stdin, stdout, stderr))
			return nil
		},
	}
}
