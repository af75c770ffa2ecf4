package rsh

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
)

// TestFailureLeavesARecord: a client that cannot run its command leaves
// one record naming host, port, phase and daemon in EnvFailureDir, next to
// its stderr line; one that ran its command leaves none, even when the
// command failed.
func TestFailureLeavesARecord(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := t.TempDir()
	free := strconv.Itoa(sshtest.FreePort(t))
	env := f.env(EnvFailureDir, dir)
	ompi := `PATH=/usr/bin:$PATH ; export PATH ; /usr/bin/orted -mca ess "env" -mca ess_base_jobid "123"`
	r := runMain(t, env, nil, "-p", free, "127.0.0.1", ompi)
	if r.code != 255 {
		t.Fatalf("exit %d, want 255: %+v", r.code, r)
	}
	if r := runMain(t, env, nil, "-p", f.port(), "127.0.0.1", "exit 3"); r.code != 3 {
		t.Fatalf("exit 3 through the client: %+v", r)
	}
	recs, names, err := ReadFailureRecords(dir, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || len(names) != 1 {
		t.Fatalf("records = %+v; want one (the refused connection only)", recs)
	}
	rec := recs[0]
	if rec.Host != "127.0.0.1" || strconv.Itoa(rec.Port) != free || rec.Phase != string(sshclient.PhaseTCPRefused) ||
		rec.Daemon != "orted" || rec.PID != os.Getpid() || rec.Time.IsZero() || !strings.Contains(rec.Hint, "nothing listens") {
		t.Errorf("record = %+v", rec)
	}
	if want := strings.TrimPrefix(strings.TrimSpace(r.stderr), "podmpi-rsh: "); rec.Line != want {
		t.Errorf("record line %q, want the stderr line %q", rec.Line, want)
	}
	fi, err := os.Stat(filepath.Join(dir, names[0]))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record file %v mode %v, want 0600", err, fi.Mode())
	}
	// Read once, skipped after.
	if again, _, err := ReadFailureRecords(dir, 10, map[string]bool{names[0]: true}); err != nil || len(again) != 0 {
		t.Errorf("skipped record read again: %+v, %v", again, err)
	}
}

func TestFailureRecordDirMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	missing := filepath.Join(t.TempDir(), "absent")
	r := runMain(t, f.env(EnvFailureDir, missing), nil, "-p", strconv.Itoa(sshtest.FreePort(t)), "127.0.0.1", "true")
	if r.code != 255 || !strings.Contains(r.stderr, "tcp-refused") || !strings.Contains(r.stderr, "could not leave the failure record in "+missing) {
		t.Fatalf("got %+v; want the diagnosis and a line about the record", r)
	}
	if recs, _, err := ReadFailureRecords(missing, 10, nil); err != nil || recs != nil {
		t.Errorf("missing dir: %v, %v; want no record and no error", recs, err)
	}
}

func TestReadFailureRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, host := range []string{"w-2", "w-0", "w-1"} {
		rec := FailureRecord{Time: t0.Add(time.Duration(2-i) * time.Second), Host: host, Port: 2222, Phase: "tcp-refused", PID: 100 + i}
		if err := WriteFailureRecord(dir, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "9-1.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-partial.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, names, err := ReadFailureRecords(dir, 10, nil)
	if err == nil || !strings.Contains(err.Error(), "9-1.json") {
		t.Errorf("err = %v; want the malformed record named", err)
	}
	if len(recs) != 3 || len(names) != 3 || recs[0].Host != "w-1" || recs[2].Host != "w-2" {
		t.Fatalf("records = %+v; want the three, oldest first", recs)
	}
	if recs, _, _ := ReadFailureRecords(dir, 2, nil); len(recs) != 2 {
		t.Errorf("max 2: %d records", len(recs))
	}
	big := FailureRecord{Time: t0, Host: "w", Cause: strings.Repeat("x", 20000), Line: strings.Repeat("y", 20000)}
	if err := WriteFailureRecord(dir, big); err != nil {
		t.Fatal(err)
	}
	recs, _, _ = ReadFailureRecords(dir, 10, map[string]bool{names[0]: true, names[1]: true, names[2]: true})
	if len(recs) != 1 || len(recs[0].Cause) > 1100 {
		t.Errorf("an oversized record is clipped, not lost: %d records", len(recs))
	}
	if _, _, err := ReadFailureRecords(filepath.Join(dir, names[0]), 10, nil); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file as dir: %v", err)
	}
}

func TestNewFailureRecordDaemon(t *testing.T) {
	t.Parallel()
	f := &sshclient.Failure{Host: "h", Port: 2222, Phase: sshclient.PhaseTCPRefused, Cause: errors.New("refused")}
	for cmd, want := range map[string]string{
		`/usr/bin/hydra_pmi_proxy --control-port l:3000 --rmk user --launcher ssh --demux poll --pgid 0 --retries 10 --usize -2 --proxy-id 1`: "hydra_pmi_proxy",
		`PATH=/opt/ompi/bin:$PATH ; export PATH ; "/opt/ompi/bin/prted" --prtemca ess "env"`:                                                  "prted",
		"hostname": "hostname",
		"":         "",
	} {
		if got := newFailureRecord(f, cmd, time.Now()).Daemon; got != want {
			t.Errorf("daemon of %q = %q, want %q", cmd, got, want)
		}
	}
}

func TestSettingsCarryTheFailureDir(t *testing.T) {
	t.Parallel()
	env := Settings{FailureDir: "/tmp/x"}.Env()
	if len(env) != 1 || env[0] != [2]string{EnvFailureDir, "/tmp/x"} {
		t.Fatalf("Env = %v", env)
	}
}

func FuzzReadFailureRecord(f *testing.F) {
	f.Add([]byte(`{"time":"2025-01-02T03:04:05Z","host":"w","port":2222,"phase":"tcp-refused","cause":"x","pid":1}`))
	f.Add([]byte(`{"port":"x"}`))
	f.Add([]byte(strings.Repeat("[", 9000)))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "1-1.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		recs, _, err := ReadFailureRecords(dir, 4, nil)
		if err == nil && len(recs) != 1 || err != nil && len(recs) != 0 {
			t.Fatalf("%d records, err %v", len(recs), err)
		}
	})
}
