//go:build linux

package sshd

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

var (
	fuzzOnce   sync.Once
	fuzzServer *Server
	fuzzErr    error
)

// FuzzServerPreAuth feeds arbitrary bytes to a server connection (over
// net.Pipe, through the same path as accepted TCP connections) and checks
// that it neither panics, hangs past LoginGraceTime nor authenticates.
func FuzzServerPreAuth(f *testing.F) {
	fuzzOnce.Do(func() {
		keys := writeTrainerLayout(f)
		fuzzServer, fuzzErr = New(Config{
			AuthDir:        keys.dir,
			StateDir:       filepath.Join(f.TempDir(), "state"),
			LoginGraceTime: 2 * time.Second,
			Logger:         slog.New(slog.DiscardHandler),
		})
	})
	if fuzzErr != nil {
		f.Fatal(fuzzErr)
	}
	s := fuzzServer
	kexinit := ssh.Marshal(struct {
		Type   byte
		Cookie [16]byte
		Kex    []string `ssh:"namelist"`
	}{Type: 20, Kex: []string{"curve25519-sha256"}})
	pkt := func(payload []byte) []byte {
		pad := 8 - (5+len(payload))%8
		if pad < 4 {
			pad += 8
		}
		n := 1 + len(payload) + pad
		out := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), byte(pad)}
		out = append(out, payload...)
		return append(out, make([]byte, pad)...)
	}
	for _, seed := range [][]byte{
		nil,
		[]byte("SSH-2.0-OpenSSH_9.2p1\r\n"),
		[]byte("SSH-2.0-Go\r\n"),
		[]byte("SSH-1.5-old\r\n"),
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		append([]byte("SSH-2.0-x\r\n"), pkt(kexinit)...),
		append([]byte("SSH-2.0-x\r\n"), pkt([]byte{50, 0, 0, 0, 4, 'r', 'o', 'o', 't'})...), // userauth before kex
		append([]byte("SSH-2.0-x\r\n"), 0xff, 0xff, 0xff, 0xff, 0),
		[]byte(strings.Repeat("x", 300) + "\r\n"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		srvSide, cliSide := net.Pipe()
		done := make(chan struct{})
		before := s.authOK.Load()
		go func() {
			defer close(done)
			s.serveConn(srvSide, nil)
		}()
		go func() { _, _ = io.Copy(io.Discard, cliSide) }()
		_ = cliSide.SetWriteDeadline(time.Now().Add(3 * time.Second))
		_, _ = cliSide.Write(data)
		cliSide.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("server connection still running 5s after the client closed (input %d bytes)", len(data))
		}
		if s.authOK.Load() != before {
			t.Fatalf("arbitrary input authenticated")
		}
	})
}

// FuzzEnvRequest checks the env request decoder and allow-list: no panics,
// and an accepted variable always has an allowed, well-formed name and a
// passable value.
func FuzzEnvRequest(f *testing.F) {
	for name := range envCases {
		f.Add(ssh.Marshal(envRequest{Name: name, Value: "v"}))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 4, 'L', 'A', 'N', 'G'})
	f.Add(ssh.Marshal(envRequest{Name: "OMPI_X", Value: "a\x00b"}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		name, value, ok := parseEnvRequest(payload)
		if !ok {
			if value != "" {
				t.Fatalf("refused request returned a value")
			}
			return
		}
		if !EnvAllowed(name) || strings.ContainsAny(name, "=\x00 ") || strings.ContainsRune(value, 0) || len(value) > maxEnvValueLen {
			t.Fatalf("accepted bad variable %q", name)
		}
		allowed := name == "LANG"
		for _, p := range envPrefixes {
			allowed = allowed || strings.HasPrefix(name, p) && len(name) > len(p)
		}
		if !allowed {
			t.Fatalf("accepted %q outside the allow-list", name)
		}
		// Whatever was accepted survives the environment builder intact.
		env := dedupEnv([]string{"PATH=/bin", name + "=" + value})
		if env[len(env)-1] != name+"="+value {
			t.Fatalf("env builder changed %q", name)
		}
	})
}

// BenchmarkSessionExecTrue measures one full SSH round trip with the x/crypto
// client: connect, key exchange, ECDSA P-521 auth, exec `true`, close.
func BenchmarkSessionExecTrue(b *testing.B) {
	ts := startServer(b, func(c *Config) { c.Logger = slog.New(slog.DiscardHandler) })
	cfg := clientConfig(ts.keys.signer, ts.keys.pub)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := ssh.Dial("tcp", ts.addr, cfg)
		if err != nil {
			b.Fatal(err)
		}
		sess, err := c.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		if err := sess.Run("true"); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
