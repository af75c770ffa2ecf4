package sshclient_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/jobkey"
)

// job is one job's SSH material: worker-agent serves the job key as its host
// key and trusts it as the client key.
type job struct {
	key sshtest.Key
	cfg sshclient.Config
}

func newJob(t testing.TB) job {
	k := sshtest.NewKey(t)
	return job{key: k, cfg: sshclient.Config{Signer: k.Signer, HostKey: k.Public(), HostKeySource: "test/id_rsa.pub"}}
}

func (j job) server(t testing.TB) *sshtest.Server {
	return sshtest.Start(t, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
}

// TestDialAndExec: a connection runs a command. A launcher's connection
// declares its instance first; a server that does not know the request
// (OpenSSH, this minimal server) refuses it and the connection works as
// any other.
func TestDialAndExec(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	srv := j.server(t)
	launcher := j.cfg
	launcher.Launcher = launcherid.New("uid-1", "tj-launcher-0-0", time.Now())
	for _, cfg := range []sshclient.Config{j.cfg, launcher} {
		c, f := sshclient.Dial(context.Background(), "127.0.0.1", srv.Port, cfg)
		if f != nil {
			t.Fatal(f)
		}
		defer c.Close()
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Output("echo hello")
		if err != nil || string(out) != "hello\n" {
			t.Fatalf("output %q, %v", out, err)
		}
		if string(c.ServerVersion()) == "" || !strings.HasPrefix(string(c.ClientVersion()), "SSH-2.0-podmpi") {
			t.Fatalf("versions %q %q", c.ServerVersion(), c.ClientVersion())
		}
	}
}

func TestDialByName(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	srv := j.server(t)
	c, f := sshclient.Dial(context.Background(), "localhost", srv.Port, j.cfg)
	if f != nil {
		// localhost may resolve to ::1 first; the dialer must fall through to 127.0.0.1.
		t.Fatal(f)
	}
	c.Close()
}

// TestPhasesOnLoopback provokes every phase for real and checks the
// classification and its hint.
func TestPhasesOnLoopback(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	other := sshtest.NewKey(t)
	p521 := sshtest.NewTrainerKey(t)

	wrongHostKey := sshtest.Start(t, sshtest.Options{HostKey: other.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
	wrongKeyType := sshtest.Start(t, sshtest.Options{HostKey: p521.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
	wrongClientKey := sshtest.Start(t, sshtest.Options{HostKey: j.key.Signer, Authorized: []ssh.PublicKey{other.Public()}})
	httpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(httpSrv.Close)
	httpPort := httpSrv.Listener.Addr().(*net.TCPAddr).Port

	short := j.cfg
	short.ConnectTimeout = 400 * time.Millisecond
	short.HandshakeTimeout = 400 * time.Millisecond
	nx := j.cfg
	nx.Resolver = sshtest.NXDomainResolver(t)
	noKey := j.cfg
	noKey.Signer = nil
	noPin := j.cfg
	noPin.HostKey = nil

	cases := []struct {
		name      string
		host      string
		port      int
		cfg       sshclient.Config
		phase     sshclient.Phase
		transient bool
		want      []string // substrings of Error()
	}{
		{"nothing listening", "127.0.0.1", sshtest.FreePort(t), j.cfg, sshclient.PhaseTCPRefused, true,
			[]string{"connection refused", "nothing listens on port"}},
		{"connect never answered", "127.0.0.1", sshtest.FullBacklogPort(t), short, sshclient.PhaseTCPTimeout, true,
			[]string{"NetworkPolicy may drop port"}},
		{"accepts but never speaks", "127.0.0.1", sshtest.SilentListener(t), short, sshclient.PhaseHandshake, false,
			[]string{"server sent nothing", "never spoke SSH"}},
		{"accepts and closes", "127.0.0.1", sshtest.ClosingListener(t), j.cfg, sshclient.PhaseHandshake, true,
			[]string{"closed it without speaking SSH"}},
		{"http server", "127.0.0.1", httpPort, j.cfg, sshclient.PhaseHandshake, false,
			[]string{`HTTP/1.1 400`, `set sidecar.istio.io/inject: "false"`}},
		{"tls server", "127.0.0.1", sshtest.TLSAlertListener(t), j.cfg, sshclient.PhaseHandshake, false,
			[]string{"TLS endpoint answered", "sidecar.istio.io/inject"}},
		{"wrong host key", "127.0.0.1", wrongHostKey.Port, j.cfg, sshclient.PhaseHostKey, false,
			[]string{ssh.FingerprintSHA256(other.Public()), ssh.FingerprintSHA256(j.key.Public()), "test/id_rsa.pub", "different job's Secret"}},
		{"wrong host key type", "127.0.0.1", wrongKeyType.Port, j.cfg, sshclient.PhaseHostKey, false,
			[]string{"no common algorithm for host key", "different job's Secret"}},
		{"wrong client key", "127.0.0.1", wrongClientKey.Port, j.cfg, sshclient.PhaseAuth, false,
			[]string{"authorized_keys does not hold this job's key (fingerprint " + ssh.FingerprintSHA256(j.key.Public()) + ")", `user "mpiuser"`}},
		{"name does not resolve", "tj-node-0-9.invalid", 2222, nx, sshclient.PhaseDNS, true,
			[]string{"no such host", "does not resolve"}},
		{"no client key", "127.0.0.1", 2222, noKey, sshclient.PhaseConfig, false, []string{"no client key"}},
		{"nothing pinned", "127.0.0.1", 2222, noPin, sshclient.PhaseConfig, false, []string{"PODMPI_SSH_INSECURE_IGNORE_HOST_KEY"}},
		{"bad port", "127.0.0.1", 0, j.cfg, sshclient.PhaseConfig, false, []string{"port 0 out of range"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			start := time.Now()
			c, f := sshclient.Dial(ctx, tc.host, tc.port, tc.cfg)
			if c != nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			if f.Phase != tc.phase {
				t.Fatalf("phase %s, want %s: %v", f.Phase, tc.phase, f)
			}
			if f.Transient() != tc.transient {
				t.Errorf("Transient() = %v, want %v: %v", f.Transient(), tc.transient, f)
			}
			msg := f.Error()
			t.Log(msg)
			if strings.Contains(msg, "\n") {
				t.Errorf("Error() spans lines: %q", msg)
			}
			wantPrefix := net.JoinHostPort(tc.host, strconv.Itoa(tc.port)) + ": " + string(tc.phase) + ": "
			if !strings.HasPrefix(msg, wantPrefix) || !strings.Contains(msg, "; hint: ") {
				t.Errorf("Error() = %q, want prefix %q and a hint", msg, wantPrefix)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Error() = %q, missing %q", msg, w)
				}
			}
			if f.Cause == nil || !errors.Is(f, f.Cause) {
				t.Errorf("Unwrap broken: %#v", f)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

func TestInsecureIgnoreHostKey(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	other := sshtest.NewKey(t)
	srv := sshtest.Start(t, sshtest.Options{HostKey: other.Signer, Authorized: []ssh.PublicKey{j.key.Public()}})
	cfg := j.cfg
	cfg.HostKey = nil
	cfg.InsecureIgnoreHostKey = true
	c, f := sshclient.Dial(context.Background(), "127.0.0.1", srv.Port, cfg)
	if f != nil {
		t.Fatal(f)
	}
	c.Close()
}

func TestDialHonoursContext(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	port := sshtest.SilentListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, f := sshclient.Dial(ctx, "127.0.0.1", port, j.cfg) // handshake timeout 10 s, ctx 300 ms
	if f == nil || f.Phase != sshclient.PhaseHandshake {
		t.Fatalf("got %v", f)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Dial ignored the context: %v", d)
	}
}

func TestHostKeyAlgorithms(t *testing.T) {
	t.Parallel()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	got := sshclient.HostKeyAlgorithms(pub)
	if strings.Join(got, ",") != "rsa-sha2-512,rsa-sha2-256" {
		t.Fatalf("RSA: %v", got)
	}
	p521 := sshtest.NewTrainerKey(t).Public()
	if got := sshclient.HostKeyAlgorithms(p521); len(got) != 1 || got[0] != "ecdsa-sha2-nistp521" {
		t.Fatalf("P-521: %v", got)
	}
	if sshclient.HostKeyAlgorithms(nil) != nil {
		t.Fatal("nil key")
	}
}

// TestRSAHostKeyPinned checks that an RSA job key works end to end with the
// SHA-2 host key algorithms only.
func TestRSAHostKeyPinned(t *testing.T) {
	t.Parallel()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	srv := sshtest.Start(t, sshtest.Options{HostKey: s, Authorized: []ssh.PublicKey{s.PublicKey()}})
	c, f := sshclient.Dial(context.Background(), "127.0.0.1", srv.Port, sshclient.Config{Signer: s, HostKey: s.PublicKey()})
	if f != nil {
		t.Fatal(f)
	}
	c.Close()
}

func TestLoadJobConfig(t *testing.T) {
	t.Parallel()
	k := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, k)

	cfg, err := sshclient.LoadJobConfig(dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Signer.PublicKey().Type() != "ecdsa-sha2-nistp521" || string(cfg.HostKey.Marshal()) != string(k.Public().Marshal()) {
		t.Fatalf("loaded %v / %v", cfg.Signer.PublicKey().Type(), cfg.HostKey)
	}
	if cfg.HostKeySource != filepath.Join(dir, "id_rsa.pub") {
		t.Fatalf("source %q", cfg.HostKeySource)
	}

	// Found through $HOME/.ssh.
	home := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(home, ".ssh")); err != nil {
		t.Fatal(err)
	}
	if _, err := sshclient.LoadJobConfig("", home, ""); err != nil {
		t.Fatalf("via home: %v", err)
	}

	// -i overrides the signer; the pin still comes from the auth dir.
	other := sshtest.NewKey(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = sshclient.LoadJobConfig(dir, "", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.Signer.PublicKey().Marshal()) != string(other.Public().Marshal()) || cfg.HostKey == nil {
		t.Fatal("explicit key not used, or pin lost")
	}

	// -i with no auth dir anywhere: a signer, nothing pinned.
	cfg, err = sshclient.LoadJobConfig(filepath.Join(t.TempDir(), "absent"), "", keyFile)
	if err != nil || cfg.Signer == nil || cfg.HostKey != nil {
		t.Fatalf("explicit key without auth dir: %v %v", cfg, err)
	}

	// No auth dir and no -i: an *jobkey.Error naming the path.
	var ae *jobkey.Error
	if _, err := sshclient.LoadJobConfig(filepath.Join(t.TempDir(), "absent"), "", ""); !errors.As(err, &ae) {
		t.Fatalf("want *jobkey.Error, got %v", err)
	}

	// id_rsa.pub from another key: refused up front.
	bad := sshtest.WriteAuthDir(t, k)
	if err := os.WriteFile(filepath.Join(bad, "id_rsa.pub"), ssh.MarshalAuthorizedKey(other.Public()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sshclient.LoadJobConfig(bad, "", ""); err == nil || !strings.Contains(err.Error(), "same Secret") {
		t.Fatalf("mismatched pair: %v", err)
	}

	// No id_rsa.pub: signer only.
	nopub := sshtest.WriteAuthDir(t, k)
	if err := os.Remove(filepath.Join(nopub, "id_rsa.pub")); err != nil {
		t.Fatal(err)
	}
	cfg, err = sshclient.LoadJobConfig(nopub, "", "")
	if err != nil || cfg.HostKey != nil {
		t.Fatalf("no id_rsa.pub: %v %v", cfg.HostKey, err)
	}
	if f := cfg.Validate("h", 2222); f == nil || f.Phase != sshclient.PhaseConfig {
		t.Fatalf("Validate: %v", f)
	}
}

// BenchmarkDialExecTrue measures one full connection: dial, handshake, auth,
// exec `true`, exit status, close.
func BenchmarkDialExecTrue(b *testing.B) {
	j := newJob(b)
	srv := j.server(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		c, f := sshclient.Dial(ctx, "127.0.0.1", srv.Port, j.cfg)
		if f != nil {
			b.Fatal(f)
		}
		s, err := c.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Run("true"); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// TestIdentityNamesTheLauncher: the launcher instance is part of a
// connection's Identity, so that connection sharing never serves a
// launcher's session on another instance's connection, or an undeclared
// client's on a launcher's.
func TestIdentityNamesTheLauncher(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	cfg, other := j.cfg, j.cfg
	cfg.Launcher = launcherid.New("uid-1", "tj-launcher-0-0", time.Now())
	other.Launcher = launcherid.New("uid-1", "tj-launcher-0-0", time.Now())
	if cfg.Identity() == j.cfg.Identity() || cfg.Identity() == other.Identity() || !strings.Contains(cfg.Identity(), cfg.Launcher.ID) {
		t.Fatalf("identities do not tell the instances apart: %q, %q, %q", j.cfg.Identity(), cfg.Identity(), other.Identity())
	}
}
