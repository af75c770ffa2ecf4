package rsh

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
		rec.Daemon != "orted" || !rec.Launch || rec.PID != os.Getpid() || rec.Time.IsZero() || !strings.Contains(rec.Hint, "nothing listens") {
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
	// Written in this order (w-0 first), by processes whose PIDs sort the
	// other way round.
	for i, host := range []string{"w-0", "w-1", "w-2"} {
		rec := FailureRecord{Time: t0.Add(time.Duration(i) * time.Second), Host: host, Port: 2222, Phase: "tcp-refused", PID: 1000 - 100*i}
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
	recs, read, err := ReadFailureRecords(dir, 10, nil)
	if err == nil || !strings.Contains(err.Error(), "9-1.json") {
		t.Errorf("err = %v; want the malformed record named", err)
	}
	if len(recs) != 3 || recs[0].Host != "w-0" || recs[2].Host != "w-2" {
		t.Fatalf("records = %+v; want the three, oldest first", recs)
	}
	if len(read) != 4 || !slices.Contains(read, "9-1.json") {
		t.Fatalf("read = %q; want the three and the malformed one", read)
	}
	// The limit keeps the first ones written, not the lowest PIDs.
	if recs, _, _ := ReadFailureRecords(dir, 2, nil); len(recs) != 2 || recs[0].Host != "w-0" || recs[1].Host != "w-1" {
		t.Errorf("max 2: %+v; want w-0 and w-1", recs)
	}
	// What was read, the malformed one too, is not read (nor reported) again.
	skip := map[string]bool{}
	for _, n := range read {
		skip[n] = true
	}
	if again, more, err := ReadFailureRecords(dir, 10, skip); err != nil || len(again) != 0 || len(more) != 0 {
		t.Errorf("read again: %+v, %q, %v", again, more, err)
	}
	if _, _, err := ReadFailureRecords(filepath.Join(dir, read[0]), 10, nil); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file as dir: %v", err)
	}
}

// TestHostileRecordFits: a record whose strings JSON escapes to six times
// their size (control characters become \u00XX), over any length, is still
// written within the reader's limit and read back, clipped.
func TestHostileRecordFits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hostile := strings.Repeat("\x01\x1f<>&\u2028\"\\", 3000)
	for i, r := range []FailureRecord{
		{Host: hostile, Phase: "tcp-refused", Cause: hostile, Hint: hostile, Daemon: hostile, Line: hostile},
		{Host: "w", Cause: strings.Repeat("\x02", 1<<20), Line: strings.Repeat("y", 1<<20)},
		{Host: "w", Line: strings.Repeat("\xff\xfe", 5000)}, // not UTF-8: each byte becomes \ufffd
		{Host: "w", Cause: strings.Repeat("é", 4000)},
	} {
		r.Time, r.PID = time.Unix(int64(i), 0), 1
		if err := WriteFailureRecord(dir, r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	recs, read, err := ReadFailureRecords(dir, 10, nil)
	if err != nil || len(recs) != 4 || len(read) != 4 {
		t.Fatalf("read %d of %d records: %v", len(recs), len(read), err)
	}
	for _, n := range read {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Size() > maxRecordBytes {
			t.Errorf("%s: %v, %d bytes (limit %d)", n, err, fi.Size(), maxRecordBytes)
		}
	}
	if !strings.HasPrefix(recs[0].Cause, "\x01\x1f<>&") || !strings.HasSuffix(recs[0].Cause, "...") || !utf8.ValidString(recs[3].Cause) {
		t.Errorf("clipped strings: %q ... %q", recs[0].Cause[:12], recs[3].Cause[len(recs[3].Cause)-8:])
	}
}

// TestNewFailureRecordLaunch: a record is a launch only when its command
// starts an MPI daemon (what mpirun runs through its rsh program), not
// when a job script's ssh merely names one.
func TestNewFailureRecordLaunch(t *testing.T) {
	t.Parallel()
	f := &sshclient.Failure{Host: "h", Port: 2222, Phase: sshclient.PhaseTCPRefused, Cause: errors.New("refused")}
	for cmd, want := range map[string]struct {
		daemon string
		launch bool
	}{
		`/usr/bin/hydra_pmi_proxy --control-port l:3000 --rmk user --launcher ssh --demux poll --pgid 0 --retries 10 --usize -2 --proxy-id 1`: {"hydra_pmi_proxy", true},
		`PATH=/opt/ompi/bin:$PATH ; export PATH ; "/opt/ompi/bin/prted" --prtemca ess "env"`:                                                  {"prted", true},
		"git-upload-pack '/srv/repo.git'": {"git-upload-pack", false},
		"cat /var/log/orted.log":          {"cat", false},
		"FOO=1 /opt/job/check.sh orted":   {"check.sh", false},
		"hostname":                        {"hostname", false},
		"":                                {"", false},
	} {
		r := newFailureRecord(f, cmd, os.Getpid(), time.Now())
		if r.Daemon != want.daemon || r.Launch != want.launch {
			t.Errorf("record of %q: daemon %q launch %t, want %q %t", cmd, r.Daemon, r.Launch, want.daemon, want.launch)
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
