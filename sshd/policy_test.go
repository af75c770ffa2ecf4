//go:build linux

package sshd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/jobkey"
)

// --ssh.allow-pty grants a terminal only to keys whose authorized_keys line
// does not take it away: "no-pty" and "restrict" are honoured, and "pty"
// after "restrict" gives it back. The derived key follows the job key's
// line.
func TestNoPTYOptionHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts  string
		grant bool
	}{
		{"", true},
		{"no-pty", false},
		{"restrict", false},
		{"restrict,pty", true},
		{"no-port-forwarding,no-agent-forwarding", true},
	} {
		t.Run(fmt.Sprintf("%q", tc.opts), func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, func(c *Config) { c.AllowPTY = true })
			ak := filepath.Join(ts.keys.dir, jobkey.AuthorizedKeys)
			line := string(ssh.MarshalAuthorizedKey(ts.keys.pub))
			if tc.opts != "" {
				line = tc.opts + " " + line
			}
			must(t, os.WriteFile(ak, []byte(line), 0o644))
			_, derived, err := jobkey.LoadJobKey(filepath.Join(ts.keys.dir, jobkey.PrivateKey))
			must(t, err)
			for _, k := range []ssh.Signer{ts.keys.signer, derived} {
				cfg := clientConfig(k, ts.keys.pub)
				cfg.HostKeyCallback = ssh.InsecureIgnoreHostKey()
				c, err := ssh.Dial("tcp", ts.addr, cfg)
				if err != nil {
					t.Fatalf("dial with %s: %v", k.PublicKey().Type(), err)
				}
				sess, err := c.NewSession()
				must(t, err)
				err = sess.RequestPty("xterm", 40, 100, nil)
				if got := err == nil; got != tc.grant {
					t.Errorf("%s key, options %q: pty granted %v, want %v", k.PublicKey().Type(), tc.opts, got, tc.grant)
				}
				out, err := sess.Output("test -t 0 && echo tty || echo notty")
				want := "notty\n"
				if tc.grant {
					want = "tty\r\n"
				}
				if err != nil || string(out) != want {
					t.Errorf("%s key, options %q: %q %v, want %q", k.PublicKey().Type(), tc.opts, out, err, want)
				}
				c.Close()
			}
			if !tc.grant && !strings.Contains(ts.logs.String(), "restrict or no-pty") {
				t.Errorf("refusal reason not logged:\n%s", ts.logs)
			}
		})
	}
}

// Client env requests are bounded per session by what execve accepts: past
// the budget they are refused (and logged once), what the server holds for
// MaxSessions sessions stays below MaxSessions times the execve limit, and
// the command still starts with every accepted variable. Without the bound
// 256 values of 64 KiB per session were accepted (16 MiB, 160 MiB for ten
// sessions) and the command then failed with E2BIG.
func TestEnvBudgetPerSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.dial(t)
	limit := execArgLimit(stackLimit())
	value := strings.Repeat("v", maxEnvValueLen)
	var sessions []*ssh.Session
	accepted := make([]int, DefaultMaxSessions)
	for i := range DefaultMaxSessions {
		sess, err := c.NewSession()
		must(t, err)
		defer sess.Close()
		sessions = append(sessions, sess)
		refused := 0
		for j := 0; j < maxEnvPerSession && refused < 3; j++ {
			if err := sess.Setenv(fmt.Sprintf("OMPI_BUDGET_%d", j), value); err != nil {
				refused++
				continue
			}
			if refused > 0 {
				t.Fatalf("session %d: env request %d accepted after a refusal", i, j)
			}
			accepted[i]++
		}
		if refused == 0 {
			t.Fatalf("session %d: %d env requests of 64 KiB all accepted (%d bytes); want a refusal past the execve limit %d",
				i, accepted[i], accepted[i]*(len(value)+20), limit)
		}
	}
	held := 0
	ts.mu.Lock()
	for sess := range ts.sessions {
		for _, kv := range sess.env {
			held += envCost(kv)
		}
	}
	ts.mu.Unlock()
	if held > DefaultMaxSessions*limit || held < DefaultMaxSessions*limit/4 {
		t.Fatalf("server holds %d bytes of client env for %d sessions; want at most %d (and not nothing)", held, DefaultMaxSessions, DefaultMaxSessions*limit)
	}
	if strings.Count(ts.logs.String(), "ssh env requests refused") != DefaultMaxSessions {
		t.Errorf("want one refusal log line per session:\n%s", ts.logs)
	}
	for i, sess := range sessions {
		last := fmt.Sprintf("OMPI_BUDGET_%d", accepted[i]-1)
		out, err := sess.Output(`printf %s "$` + last + `" | wc -c`)
		if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(len(value)) {
			t.Fatalf("session %d with %d accepted variables: %q %v (want the command to start and see %s)", i, accepted[i], out, err, last)
		}
	}
}

func TestEnvBudget(t *testing.T) {
	t.Parallel()
	if got := execArgLimit(8 << 20); got != 2<<20 {
		t.Errorf("8 MiB stack: %d, want 2 MiB", got)
	}
	if got := execArgLimit(1 << 40); got != 6<<20 {
		t.Errorf("huge stack: %d, want the 6 MiB cap", got)
	}
	if got := execArgLimit(64 << 10); got != 128<<10 {
		t.Errorf("tiny stack: %d, want the 128 KiB floor", got)
	}
	base := []string{"PATH=/usr/bin", "HOME=/root", "SSH_AUTH_SOCK=/dropped/for/sessions"}
	b := envBudget(base, "/bin/sh", 8<<20)
	// Each string with its NUL and a pointer: the command of up to
	// MAX_ARG_STRLEN (NUL included), "/bin/sh", "-c", PATH and HOME.
	want := 2<<20 - (maxArgStrlen + 8) - (7 + 1 + 8) - (2 + 1 + 8) - (13 + 1 + 8) - (10 + 1 + 8)
	if b != want {
		t.Errorf("envBudget = %d, want %d", b, want)
	}
	if envBudget([]string{"X=" + strings.Repeat("x", 3<<20)}, "/bin/sh", 8<<20) != 0 {
		t.Error("a base environment beyond the limit must leave no budget")
	}
}
