package sshclient_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/sshclient"
)

// weakServer accepts one connection and offers only the given key
// exchanges and MACs (x/crypto's weak defaults).
func weakServer(t *testing.T, j job, kex, ciphers, macs []string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.KeyExchanges, cfg.Ciphers, cfg.MACs = kex, ciphers, macs
	cfg.AddHostKey(j.key.Signer)
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if sc, chans, reqs, err := ssh.NewServerConn(c, cfg); err == nil {
			go ssh.DiscardRequests(reqs)
			go func() {
				for ch := range chans {
					_ = ch.Reject(ssh.Prohibited, "test")
				}
			}()
			sc.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// The client offers podmpi's explicit lists, not x/crypto's defaults: a
// server with only diffie-hellman-group14-sha1, or only SHA-1 MACs, finds
// no common algorithm.
func TestClientAlgorithmsExplicit(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	cc := j.cfg.ClientConfig()
	for _, weak := range []string{ssh.InsecureKeyExchangeDH14SHA1, ssh.InsecureKeyExchangeDH1SHA1, ssh.InsecureHMACSHA196, ssh.HMACSHA1, ssh.InsecureCipherAES128CBC} {
		if slices.Contains(cc.KeyExchanges, weak) || slices.Contains(cc.MACs, weak) || slices.Contains(cc.Ciphers, weak) {
			t.Errorf("client offers %s", weak)
		}
	}
	if len(cc.KeyExchanges) == 0 || cc.KeyExchanges[0] != ssh.KeyExchangeMLKEM768X25519 {
		t.Errorf("key exchanges %v, want the ML-KEM hybrid first", cc.KeyExchanges)
	}
	for _, tc := range []struct {
		name              string
		kex, ciphers, mac []string
		want              string
	}{
		{"dh-group14-sha1 only", []string{ssh.InsecureKeyExchangeDH14SHA1}, nil, nil, "no common algorithm for key exchange"},
		{"hmac-sha1-96 only", nil, []string{ssh.CipherAES128CTR}, []string{ssh.InsecureHMACSHA196}, "no common algorithm"},
		{"hmac-sha1 only", nil, []string{ssh.CipherAES128CTR}, []string{ssh.HMACSHA1}, "no common algorithm"},
	} {
		port := weakServer(t, j, tc.kex, tc.ciphers, tc.mac)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, f := sshclient.Dial(ctx, "127.0.0.1", port, j.cfg)
		cancel()
		if c != nil {
			c.Close()
			t.Errorf("%s: handshake succeeded", tc.name)
			continue
		}
		if f.Phase != sshclient.PhaseHandshake || !strings.Contains(f.Error(), tc.want) {
			t.Errorf("%s: %v, want a handshake failure with %q", tc.name, f, tc.want)
		}
	}
}
