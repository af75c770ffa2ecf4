package sshclient_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/sshd"
)

// A worker-agent over its unauthenticated-connection limit answers with a
// line of text; Dial and Banner name that cause (not a sidecar), say which
// flag to raise, and call it transient.
func TestRefusedForTooManyUnauthenticated(t *testing.T) {
	t.Parallel()
	if sshd.RefusalMarker != sshclient.RefusalMarker {
		t.Fatalf("server refusal phrase %q, client looks for %q", sshd.RefusalMarker, sshclient.RefusalMarker)
	}
	k := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, k)
	srv, err := sshd.New(sshd.Config{ListenAddress: "127.0.0.1:0", AuthDir: dir, MaxStartups: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-serveDone
	})
	port := addr.(*net.TCPAddr).Port
	// One idle pre-auth connection takes the only slot.
	hold, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	_ = hold.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := bufio.NewReader(hold).ReadString('\n'); err != nil || !strings.HasPrefix(l, "SSH-2.0-") {
		t.Fatalf("holder: %q %v", l, err)
	}

	cfg := sshclient.Config{Signer: k.Signer, HostKey: k.Public(), HostKeySource: "test/id_rsa.pub"}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, f := sshclient.Dial(ctx, "127.0.0.1", port, cfg)
	if c != nil {
		c.Close()
		t.Fatal("Dial succeeded past MaxStartups 1")
	}
	_, bf := sshclient.Banner(ctx, "127.0.0.1", port, cfg)
	for name, f := range map[string]*sshclient.Failure{"Dial": f, "Banner": bf} {
		if f == nil {
			t.Fatalf("%s: no failure", name)
		}
		msg := f.Error()
		t.Logf("%s: %s", name, msg)
		if f.Phase != sshclient.PhaseHandshake || !f.Transient() {
			t.Errorf("%s: phase %s transient %v, want handshake and transient", name, f.Phase, f.Transient())
		}
		for _, want := range []string{"too many unauthenticated connections", "--ssh.max-startups 1", "--ssh.per-source-max-startups", "floods port"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q lacks %q", name, msg, want)
			}
		}
		if strings.Contains(msg, "sidecar") || strings.Contains(msg, "another protocol") {
			t.Errorf("%s blames something else: %q", name, msg)
		}
	}
}
