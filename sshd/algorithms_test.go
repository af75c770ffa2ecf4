//go:build linux

package sshd

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// The server offers exactly podmpi's lists: a client that insists on
// x/crypto's SHA-1 or truncated defaults finds no common algorithm, and a
// current client gets the ML-KEM hybrid.
func TestAlgorithmsExplicit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	algs := c.Conn.(ssh.AlgorithmsConnMetadata).Algorithms()
	if algs.KeyExchange != ssh.KeyExchangeMLKEM768X25519 {
		t.Errorf("key exchange %q, want %s", algs.KeyExchange, ssh.KeyExchangeMLKEM768X25519)
	}
	for _, tc := range []struct {
		name string
		set  func(*ssh.ClientConfig)
		ok   bool
	}{
		{"dh-group14-sha1", func(c *ssh.ClientConfig) { c.KeyExchanges = []string{ssh.InsecureKeyExchangeDH14SHA1} }, false},
		{"dh-group14-sha256", func(c *ssh.ClientConfig) { c.KeyExchanges = []string{ssh.KeyExchangeDH14SHA256} }, false},
		{"hmac-sha1-96", func(c *ssh.ClientConfig) {
			c.Ciphers, c.MACs = []string{ssh.CipherAES128CTR}, []string{ssh.InsecureHMACSHA196}
		}, false},
		{"hmac-sha1", func(c *ssh.ClientConfig) { c.Ciphers, c.MACs = []string{ssh.CipherAES128CTR}, []string{ssh.HMACSHA1} }, false},
		{"aes128-cbc", func(c *ssh.ClientConfig) { c.Ciphers = []string{ssh.InsecureCipherAES128CBC} }, false},
		{"curve25519 aes256-ctr hmac-sha2-512-etm", func(c *ssh.ClientConfig) {
			c.KeyExchanges, c.Ciphers, c.MACs = []string{ssh.KeyExchangeCurve25519}, []string{ssh.CipherAES256CTR}, []string{ssh.HMACSHA512ETM}
		}, true},
		{"nistp256 aes128-gcm", func(c *ssh.ClientConfig) {
			c.KeyExchanges, c.Ciphers = []string{ssh.KeyExchangeECDHP256}, []string{ssh.CipherAES128GCM}
		}, true},
	} {
		cfg := clientConfig(ts.keys.signer, ts.keys.pub)
		tc.set(cfg)
		c, err := ssh.Dial("tcp", ts.addr, cfg)
		if c != nil {
			c.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// An RSA job key signs the host key exchange and is accepted for user auth
// with SHA-2 only: ssh-rsa (SHA-1) is neither offered nor accepted.
func TestRSAJobKeyNoSHA1(t *testing.T) {
	t.Parallel()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	signer, err := ssh.ParsePrivateKey(pemBytes)
	must(t, err)
	dir := t.TempDir()
	line := ssh.MarshalAuthorizedKey(signer.PublicKey())
	must(t, os.WriteFile(filepath.Join(dir, jobkey.PrivateKey), pemBytes, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, jobkey.PublicKey), line, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, jobkey.AuthorizedKeys), line, 0o644))
	ts := startServerCfg(t, keyPair{dir: dir, signer: signer, pub: signer.PublicKey()},
		Config{ListenAddress: "127.0.0.1:0", AuthDir: dir, Logger: slogText(&syncBuffer{})}, &syncBuffer{})
	as := signer.(ssh.AlgorithmSigner)
	for _, tc := range []struct {
		name     string
		hostAlgs []string
		userAlgs []string
		ok       bool
	}{
		{"rsa-sha2-512 both ways", []string{ssh.KeyAlgoRSASHA512}, []string{ssh.KeyAlgoRSASHA512}, true},
		{"rsa-sha2-256 both ways", []string{ssh.KeyAlgoRSASHA256}, []string{ssh.KeyAlgoRSASHA256}, true},
		{"ssh-rsa host key", []string{ssh.KeyAlgoRSA}, []string{ssh.KeyAlgoRSASHA512}, false},
		{"ssh-rsa user auth", []string{ssh.KeyAlgoRSASHA512}, []string{ssh.KeyAlgoRSA}, false},
	} {
		us, err := ssh.NewSignerWithAlgorithms(as, tc.userAlgs)
		must(t, err)
		cfg := clientConfig(us, signer.PublicKey())
		cfg.HostKeyAlgorithms = tc.hostAlgs
		c, err := ssh.Dial("tcp", ts.addr, cfg)
		if c != nil {
			c.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// auditFails runs Debian's ssh-audit against 127.0.0.1:port and returns
// the algorithms it rates "fail", as "kex name", "key name", "enc name" or
// "mac name". ssh-audit prints one line per algorithm, "(kex) name -- [fail]
// why", with further notes on lines starting with "`- [fail]"; -n turns
// colours off. Its exit status says whether anything failed, so it is not
// an error here; a connection problem is (no algorithm lines at all).
func auditFails(t *testing.T, port int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh-audit", "-n", "-t", "10", "-p", strconv.Itoa(port), "127.0.0.1").CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("ssh-audit timed out: %s", out)
	}
	algRe := regexp.MustCompile(`^\((kex|key|enc|mac)\)\s+(\S+)`)
	var fails []string
	seen := 0
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		l := sc.Text()
		if m := algRe.FindStringSubmatch(l); m != nil {
			seen++
			cur = m[1] + " " + m[2]
		} else if !strings.HasPrefix(strings.TrimSpace(l), "`-") {
			cur = ""
		}
		if cur != "" && strings.Contains(l, "[fail]") && !slices.Contains(fails, cur) {
			fails = append(fails, cur)
		}
	}
	if seen == 0 {
		t.Fatalf("ssh-audit found no algorithms on port %d (%v):\n%s", port, err, out)
	}
	slices.Sort(fails)
	return fails
}

// startOpenSSHD runs the system's sshd on 127.0.0.1 with its default
// algorithms and the given host keys, as an unprivileged user (no
// privilege separation directory is needed then). It is stopped by PID at
// cleanup.
func startOpenSSHD(t *testing.T, hostKeys map[string][]byte) int {
	t.Helper()
	dir, err := os.MkdirTemp("", "podmpi-openssh-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	conf := fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nPidFile none\nUsePAM no\nStrictModes no\nAuthorizedKeysFile none\nLogLevel ERROR\n", port)
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534 // nobody: sshd as root would want /run/sshd
	}
	for name, data := range hostKeys {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, data, 0o600))
		must(t, os.Lchown(p, uid, gid))
		conf += "HostKey " + p + "\n"
	}
	cfgPath := filepath.Join(dir, "sshd_config")
	must(t, os.WriteFile(cfgPath, []byte(conf), 0o644))
	must(t, os.Chmod(dir, 0o755))
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfgPath)
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	var errb syncBuffer
	cmd.Stderr = &errb
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Let the per-connection processes finish (sshd reaps them) before
		// the listener goes, then reap what was re-parented to us.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(childrenOf(cmd.Process.Pid)) > 0; {
			time.Sleep(20 * time.Millisecond)
		}
		_ = cmd.Process.Kill()
		<-exited
		reapSSHD(t)
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return port
		}
		select {
		case <-exited:
			t.Fatalf("sshd exited: %s", errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd not listening on %d after 10s: %s", port, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ssh-audit rates nothing of worker-agent "fail" that it does not rate
// "fail" on OpenSSH's own defaults with the same host keys (the job's
// ECDSA P-521 key and an ed25519 key). Before the lists were explicit it
// failed diffie-hellman-group14-sha1 and hmac-sha1-96, which OpenSSH 9.2
// does not offer.
func TestSSHAudit(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"ssh-audit", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (Debian packages ssh-audit and openssh-server): %v", bin, err)
		}
	}
	ts := startServer(t, nil)
	if ts.DerivedKeyFingerprint() == "" {
		t.Fatal("no derived ed25519 host key to compare with")
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	edBlock, err := ssh.MarshalPrivateKey(ed, "")
	must(t, err)
	opensshPort := startOpenSSHD(t, map[string][]byte{
		"ssh_host_ecdsa_key":   ts.keys.keyPEM,
		"ssh_host_ed25519_key": pem.EncodeToMemory(edBlock),
	})
	ours := auditFails(t, ts.port)
	theirs := auditFails(t, opensshPort)
	t.Logf("ssh-audit fail on worker-agent: %v", ours)
	t.Logf("ssh-audit fail on OpenSSH:      %v", theirs)
	for _, f := range ours {
		if !slices.Contains(theirs, f) {
			t.Errorf("ssh-audit rates %q fail on worker-agent but not on OpenSSH's defaults", f)
		}
	}
}

// reapSSHD reaps the sshd processes re-parented to this test binary (a
// child subreaper, see TestMain): sshd's per-connection processes fork
// helpers of their own, which come back to the nearest subreaper when their
// parent exits. Each is found by PID among this process's children, killed
// if still alive, and waited for.
func reapSSHD(t *testing.T) {
	t.Helper()
	me := os.Getpid()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var left []int
		for _, p := range childrenOf(me) {
			if _, _, comm, ok := procStat(p); ok && comm == "sshd" {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
		}
	}
	t.Errorf("sshd processes left after 5s: %v", childrenOf(me))
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, _, ok := procStat(p); ok && ppid == pid {
			out = append(out, p)
		}
	}
	return out
}
