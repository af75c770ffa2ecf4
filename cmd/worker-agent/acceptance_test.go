package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// Arbitrary UID as OpenShift's restricted-v2 SCC assigns it: no passwd
// entry, primary group 0.
const (
	anyUID = "1000680000"
	anyGID = "0"
)

// TestAcceptanceArbitraryUID is the acceptance test: the built binary runs
// as uid 1000680000 gid 0 with no passwd entry and no capabilities, with the
// keys in Kubeflow Trainer v2's layout (root-owned, id_rsa 0640 group 0),
// and the real OpenSSH client, pinning the host key to id_rsa.pub, runs a
// command that prints the agent's PATH and exits 7.
func TestAcceptanceArbitraryUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acceptance test needs root (to switch to uid " + anyUID + " with setpriv); skipping")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed; skipping the arbitrary-UID acceptance test")
	}
	sshBin := "/usr/bin/ssh"
	if _, err := os.Stat(sshBin); err != nil {
		t.Skip("OpenSSH client /usr/bin/ssh not installed; skipping the acceptance test")
	}
	t.Parallel()

	// t.TempDir's parents are 0700 root: build a 0755 chain under /tmp.
	root, err := os.MkdirTemp("/tmp", "podmpi-accept-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	authDir := filepath.Join(root, "home", "mpiuser", ".ssh")
	work := filepath.Join(root, "work")
	for _, d := range []string{root, filepath.Join(root, "home"), filepath.Join(root, "home", "mpiuser"), authDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The agent's work dir (and state dir) is writable by gid 0, as images
	// prepare paths for arbitrary UIDs (chgrp 0, chmod g=u).
	if err := os.Mkdir(work, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(work, 0o775); err != nil {
		t.Fatal(err)
	}
	keys := writeKeys(t, authDir)
	for _, f := range []string{"id_rsa", "id_rsa.pub", "authorized_keys"} {
		if err := os.Chown(filepath.Join(authDir, f), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The test binary's build dir is 0700 root: copy the agent where the
	// arbitrary UID can execute it.
	// cp writes the copy, not this process: a descriptor this process
	// held open for writing would be inherited by whatever a parallel test
	// forks meanwhile, and exec of the copy would fail "Text file busy".
	bin := filepath.Join(root, "worker-agent")
	if out, err := exec.Command("cp", agentBin, bin).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v: %s", agentBin, bin, err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}

	const agentPATH = "/opt/mpi/bin:/usr/bin:/bin"
	argv := []string{setpriv, "--reuid=" + anyUID, "--regid=" + anyGID, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
		bin, "--ssh.listen-address=127.0.0.1:0", "--web.listen-address=127.0.0.1:0",
		"--ssh.auth-dir=" + authDir, "--ssh.state-dir=" + filepath.Join(work, "state"), "--gpu.detect=auto"}
	a := startAgent(t, argv, []string{"PATH=" + agentPATH, "TMPDIR=" + work}, work)
	a.WaitReady(t, 20*time.Second)

	// /info reports the arbitrary identity and the pinned job key.
	_, body := a.Get("/info")
	var info struct {
		UID     *int    `json:"uid"`
		GID     *int    `json:"gid"`
		User    *string `json:"user"`
		AuthDir string  `json:"authDir"`
		HostKey struct {
			Fingerprint string `json:"fingerprint"`
			Pinned      bool   `json:"pinned"`
		} `json:"hostKey"`
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatalf("/info: %v\n%s", err, body)
	}
	if info.UID == nil || *info.UID != 1000680000 || info.GID == nil || *info.GID != 0 {
		t.Fatalf("/info uid/gid = %v/%v, want 1000680000/0:\n%s", info.UID, info.GID, body)
	}
	if info.User == nil || *info.User != "" || info.AuthDir != authDir || !info.HostKey.Pinned {
		t.Errorf("/info user %v authDir %q pinned %v, want \"\", %q, true", info.User, info.AuthDir, info.HostKey.Pinned, authDir)
	}

	// The real OpenSSH client, as root, with the key copied to 0600 (OpenSSH
	// refuses a group-readable key of its own uid) and the host key pinned.
	_, port, _ := net.SplitHostPort(a.SSHAddr)
	client := t.TempDir()
	idFile := filepath.Join(client, "id_rsa")
	if err := os.WriteFile(idFile, keys.privPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	knownHosts := filepath.Join(client, "known_hosts")
	kh := "[127.0.0.1]:" + port + " " + string(keys.pubLine)
	if err := os.WriteFile(knownHosts, []byte(kh), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sshBin, "-F", "none", "-p", port, "-i", idFile,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
		"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile="+knownHosts, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "127.0.0.1", "echo $PATH; exit 7")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + client}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if c := sshtest.ExitStatus(err); c != 7 {
		t.Fatalf("ssh exit %d, want 7\nssh stderr: %s\nagent log:\n%s", c, errOut.String(), a.Log())
	}
	// The session's PATH is the agent's, behind the private dir where the
	// agent links podmpi-rsh to itself (Open MPI passes its rsh agent on to
	// every orted, which must find it).
	got := strings.TrimSpace(out.String())
	linkDir, rest, ok := strings.Cut(got, ":")
	if !ok || rest != agentPATH {
		t.Fatalf("remote $PATH = %q, want <podmpi-rsh dir>:%s", got, agentPATH)
	}
	if target, err := os.Readlink(filepath.Join(linkDir, "podmpi-rsh")); err != nil || filepath.Base(target) != "worker-agent" {
		t.Fatalf("%s/podmpi-rsh -> %q (%v), want a link to worker-agent", linkDir, target, err)
	}
}
