package glibctest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/imagecheck"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"

	"golang.org/x/crypto/ssh"
)

// arbitraryUID is an OpenShift-style UID with no passwd entry in the root.
const arbitraryUID = "1000680000"

// modRoot is the repository root, relative to this package.
const modRoot = "../.."

// bullseyeRoot is the cached root scripts/bullseye-rootfs.sh builds.
func bullseyeRoot() string {
	if v := os.Getenv("PODMPI_BULLSEYE_ROOTFS"); v != "" {
		return v
	}
	return "/var/cache/podmpi/bullseye-rootfs"
}

var objdumpVersionRe = regexp.MustCompile(`GLIBC_([0-9.]+)`)

// TestBinariesStartOnOldGlibc is the acceptance test of the old-glibc build:
// see the package documentation.
func TestBinariesStartOnOldGlibc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	root := bullseyeRoot()
	if _, err := os.Stat(filepath.Join(root, "etc", "debian_version")); err != nil {
		if os.Getenv("PODMPI_GLIBC_TEST") == "1" {
			t.Fatalf("no Debian bullseye root in %s and PODMPI_GLIBC_TEST=1: build it with sudo scripts/bullseye-rootfs.sh", root)
		}
		t.Skipf("no Debian bullseye root in %s (sudo scripts/bullseye-rootfs.sh builds it; PODMPI_GLIBC_TEST=1 makes this a failure)", root)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the binaries in the bullseye root with chroot")
	}

	// Build exactly as make build does, against this root.
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mod, err := filepath.Abs(modRoot)
	if err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, filepath.Join(mod, "scripts", "build.sh"), filepath.Join(out, "bin"))
	build.Dir = mod
	build.Env = append(os.Environ(), "PODMPI_SYSROOT="+root, "VERSION=glibctest", "GOARCH="+runtime.GOARCH)
	bout, err := build.CombinedOutput()
	t.Logf("scripts/build.sh:\n%s", bout)
	if err != nil {
		t.Fatalf("scripts/build.sh: %v", err)
	}
	// bin/worker-agent is a link to the launcher, which checks the image
	// and runs the real one, libexec/worker-agent.
	agentBin, launcherBin := filepath.Join(out, "libexec", "worker-agent"), filepath.Join(out, "bin", "launcher")
	if target, err := os.Readlink(filepath.Join(out, "bin", "worker-agent")); err != nil || target != "launcher" {
		t.Errorf("bin/worker-agent -> %q (%v), want a link to launcher", target, err)
	}

	// worker-agent: no symbol version newer than 2.28.
	agent, err := ReadBinary(agentBin)
	if err != nil {
		t.Fatalf("%s: %v", agentBin, err)
	}
	versions := agent.GLIBC
	if !agent.Dynamic || len(versions) == 0 {
		t.Fatalf("worker-agent is not dynamically linked against glibc (cgo and NVML need it): versions %v", versions)
	}
	got := agent.Newest()
	if imagecheck.VersionLess(MaxGLIBC, got) {
		t.Errorf("worker-agent asks for GLIBC_%s (all: %v); want GLIBC_%s at most", got, versions, MaxGLIBC)
	}
	t.Logf("worker-agent: newest glibc symbol version GLIBC_%s (of %v)", got, versions)
	if objdump, err := exec.LookPath("objdump"); err == nil {
		od, err := exec.CommandContext(ctx, objdump, "-T", agentBin).Output()
		if err != nil {
			t.Fatalf("objdump -T: %v", err)
		}
		var vs []string
		for _, m := range objdumpVersionRe.FindAllStringSubmatch(string(od), -1) {
			vs = append(vs, m[1])
		}
		if n := imagecheck.Newest(vs); n != got {
			t.Errorf("objdump -T says the newest is GLIBC_%s, the ELF reader GLIBC_%s", n, got)
		} else {
			t.Logf("objdump -T %s | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1: GLIBC_%s", agentBin, n)
		}
	}
	// launcher: static, so any libc will do.
	if l, err := ReadBinary(launcherBin); err != nil {
		t.Fatalf("%s: %v", launcherBin, err)
	} else if l.Dynamic {
		t.Errorf("launcher has a program interpreter: it must be static (CGO_ENABLED=0)")
	}

	// Into the root, under a directory of our own that we remove.
	work, err := os.MkdirTemp(filepath.Join(root, "tmp"), "podmpi-glibctest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	inRoot := func(p string) string { return "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/") }
	// The tree as the images hold it: the link runs the check, in the
	// root, and then the real worker-agent.
	for _, d := range []string{"bin", "libexec"} {
		if err := os.Mkdir(filepath.Join(work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, agentBin, filepath.Join(work, "libexec", "worker-agent"), 0o755)
	copyFile(t, launcherBin, filepath.Join(work, "bin", "launcher"), 0o755)
	if err := os.Symlink("launcher", filepath.Join(work, "bin", "worker-agent")); err != nil {
		t.Fatal(err)
	}
	rootAgent, rootLauncher := inRoot(filepath.Join(work, "bin", "worker-agent")), inRoot(filepath.Join(work, "bin", "launcher"))
	// HOME and TMPDIR of the processes: writable by any UID, as a pod's
	// emptyDir on /tmp is.
	scratch := filepath.Join(work, "tmp")
	if err := os.Mkdir(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(scratch, 0o1777); err != nil {
		t.Fatal(err)
	}

	// Each process gets the root's /proc in a mount namespace of its own (as
	// a container has one), gone when the process ends; unshare and chroot
	// exec, so the command keeps their PID.
	unshareBin, chrootBin := lookPath(t, "unshare"), lookPath(t, "chroot")
	chroot := func(user string, argv ...string) *exec.Cmd {
		args := []string{"--mount-proc=" + filepath.Join(root, "proc"), chrootBin, "--userspec=" + user, root}
		cmd := exec.CommandContext(ctx, unshareBin, append(args, argv...)...)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + inRoot(scratch), "TMPDIR=" + inRoot(scratch), "PODMPI_LOG_FORMAT=text"}
		return cmd
	}
	// What the root is: Debian 11 with glibc 2.31.
	id, err := chroot("0:0", "/bin/sh", "-c", "cat /etc/debian_version; ldd --version | sed -n 1p").CombinedOutput()
	if err != nil {
		t.Fatalf("inspecting the root: %v\n%s", err, id)
	}
	t.Logf("bullseye root %s: %s", root, strings.ReplaceAll(strings.TrimSpace(string(id)), "\n", ", "))
	if !strings.HasPrefix(string(id), "11.") || !strings.Contains(string(id), "2.31") {
		t.Fatalf("%s is not Debian 11 with glibc 2.31:\n%s", root, id)
	}

	// --help of both, inside the root.
	for _, tc := range []struct{ bin, want string }{
		{rootAgent, "worker-agent runs in every worker pod"},
		{rootLauncher, "launcher runs in the launcher pod"},
	} {
		o, err := chroot(arbitraryUID+":0", tc.bin, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(o), tc.want) {
			t.Fatalf("%s --help in the bullseye root: %v\n%s", tc.bin, err, o)
		}
	}

	// A real SSH session: worker-agent serving in the root as an arbitrary
	// UID in group 0, the job key mounted as Trainer mounts it.
	keyDir := filepath.Join(work, "ssh")
	signer, pubLine := writeJobKey(t, keyDir)
	a := sshtest.StartAgent(t, chroot(arbitraryUID+":0", rootAgent,
		"--ssh.listen-address=127.0.0.1:0", "--web.listen-address=127.0.0.1:0",
		"--ssh.auth-dir="+inRoot(keyDir), "--gpu.detect=auto", "--log.format=json"))
	a.WaitReady(t, time.Minute)

	// Client 1: from the host (x/crypto), the host key pinned to the job key.
	pub, _, _, _, err := ssh.ParseAuthorizedKey(pubLine)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ClientConfig{
		User:            "mpiuser",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(pub),
		Timeout:         30 * time.Second,
	}
	c, err := ssh.Dial("tcp", a.SSHAddr, cfg)
	if err != nil {
		t.Fatalf("ssh to worker-agent in the bullseye root: %v\nagent log:\n%s", err, a.Log())
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	sess.Stdout, sess.Stderr = &so, &se
	err = sess.Run(`echo "uid=$(id -u) gid=$(id -g)"; cat /etc/debian_version; ldd --version | sed -n 1p; exit 3`)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Fatalf("session: %v (want exit 3)\nstdout: %s\nstderr: %s\nagent log:\n%s", err, so.String(), se.String(), a.Log())
	}
	t.Logf("session from the host, run by worker-agent in the root:\n%s", so.String())
	for _, want := range []string{"uid=" + arbitraryUID + " gid=0", "\n11.", "2.31"} {
		if !strings.Contains("\n"+so.String(), want) {
			t.Errorf("session output lacks %q:\n%s", want, so.String())
		}
	}

	// Client 2: the launcher's own ssh client (what mpirun runs as its rsh
	// agent), inside the root too.
	_, port, _ := net.SplitHostPort(a.SSHAddr)
	rsh := chroot(arbitraryUID+":0", rootLauncher, "rsh", "-p", port, "127.0.0.1", "echo rsh-ok; cat /etc/debian_version")
	rsh.Env = append(rsh.Env, "PODMPI_SSH_AUTH_DIR="+inRoot(keyDir))
	ro, err := rsh.CombinedOutput()
	if err != nil || !strings.Contains(string(ro), "rsh-ok") || !strings.Contains(string(ro), "11.") {
		t.Fatalf("launcher rsh in the bullseye root: %v\n%s\nagent log:\n%s", err, ro, a.Log())
	}
	t.Logf("launcher rsh in the root: %s", strings.ReplaceAll(strings.TrimSpace(string(ro)), "\n", ", "))
	if code := a.Stop(t, time.Minute); code != 0 {
		t.Errorf("worker-agent exited %d after SIGTERM, want 0:\n%s", code, a.Log())
	}
}

// lookPath finds a host tool in PATH or the sbin directories.
func lookPath(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	t.Skipf("%s is not installed (util-linux, coreutils)", name)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}

// writeJobKey writes a job key into dir as Trainer v2 mounts its Secret
// (sshtest.WriteSecret: id_rsa root:root 0640, readable through GID 0; the
// public files 0644).
func writeJobKey(t *testing.T, dir string) (ssh.Signer, []byte) {
	t.Helper()
	k := sshtest.NewTrainerKey(t)
	if err := sshtest.WriteSecret(dir, k, k.Public()); err != nil {
		t.Fatal(err)
	}
	return k.Signer, ssh.MarshalAuthorizedKey(k.Public())
}
