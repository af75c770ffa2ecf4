package rsh

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/mpi"
)

// EnvFailureDir names a directory where the client leaves one record per
// remote command it could not run (its exit 255): the launcher sets it for
// mpirun, so that a failed daemon launch is seen even when mpirun itself
// never reports it (Hydra's mpiexec waits for a proxy that will never call
// back). Unset, nothing is written.
const EnvFailureDir = "PODMPI_RSH_FAILURE_DIR"

// FailureDirName is the directory the launcher creates for the records in
// its private directory (Setup).
const FailureDirName = "rsh-failures"

// maxRecordBytes bounds one record, written and read.
const maxRecordBytes = 8 << 10

// FailureRecord is what the client could not do: the same facts as its one
// stderr line, as JSON.
type FailureRecord struct {
	// Time is when the record was written, on this pod's clock (the
	// launcher's own: podmpi-rsh runs beside it, as mpirun's child).
	Time  time.Time `json:"time"`
	Host  string    `json:"host"`
	Port  int       `json:"port"`
	Phase string    `json:"phase"`
	Cause string    `json:"cause"`
	Hint  string    `json:"hint,omitempty"`
	// Daemon is the program the remote command runs (mpi.CommandName:
	// orted, prted, hydra_pmi_proxy, ..., else the first program it names);
	// "" when none was given.
	Daemon string `json:"daemon,omitempty"`
	// Launch is true when the remote command starts an MPI daemon
	// (mpi.CommandDaemon): mpirun's own launch, which it may wait for for
	// ever. Any other command (a job script's ssh, git over ssh) runs with
	// the same environment, and so leaves a record too, but its failure is
	// the script's to report.
	Launch bool `json:"launch,omitempty"`
	// Line is the stderr line, without the "podmpi-rsh: " prefix.
	Line string `json:"line"`
	PID  int    `json:"pid"`
}

// newFailureRecord describes f for the remote command cmd of the client
// process pid.
func newFailureRecord(f *sshclient.Failure, cmd string, pid int, now time.Time) FailureRecord {
	r := FailureRecord{Time: now, Host: f.Host, Port: f.Port, Phase: string(f.Phase), Cause: f.CauseText(), Hint: f.Hint,
		Line: f.Error(), PID: pid}
	r.Daemon = filepath.Base(mpi.CommandName(cmd))
	if r.Daemon == "." {
		r.Daemon = ""
	}
	r.Launch = mpi.CommandDaemon(cmd) != ""
	return r
}

// WriteFailureRecord writes r into dir as <nanoseconds>-<pid>.json (the
// time zero-padded, so that the names sort in the order the records were
// written), whole or not at all (a temporary file renamed into place),
// readable only by this user. Its strings are clipped so that the file
// always fits ReadFailureRecords' limit, however much JSON escaping adds.
func WriteFailureRecord(dir string, r FailureRecord) error {
	data, err := marshalBounded(r, maxRecordBytes-1) // and the newline
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+recordName(r))
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(data, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, recordName(r))); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// recordName is r's file name: its time first, so that names sort by time.
func recordName(r FailureRecord) string {
	return fmt.Sprintf("%020d-%d.json", max(r.Time.UnixNano(), 0), r.PID)
}

// marshalBounded encodes r in at most limit bytes: while it is longer, the
// longest of its strings is halved (on a rune boundary, marked "..."). Each
// round shortens one string, and the record without strings is far below
// any sensible limit, so it ends.
func marshalBounded(r FailureRecord, limit int) ([]byte, error) {
	fields := []*string{&r.Host, &r.Phase, &r.Cause, &r.Hint, &r.Daemon, &r.Line}
	for {
		data, err := json.Marshal(r)
		if err != nil || len(data) <= limit {
			return data, err
		}
		longest := fields[0]
		for _, f := range fields[1:] {
			if len(*f) > len(*longest) {
				longest = f
			}
		}
		if *longest == "" {
			return nil, fmt.Errorf("podmpi-rsh failure record: %d bytes without any text, over the limit of %d", len(data), limit)
		}
		*longest = clipString(*longest, len(*longest)/2)
	}
}

// clipString cuts s to at most n bytes on a rune boundary and marks the
// cut with "..." (which a string already cut down to nothing goes without).
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if n <= len("...") {
		return s[:n]
	}
	return s[:n-len("...")] + "..."
}

// ReadFailureRecords reads the records in dir that skip does not name,
// oldest first (by the time they were written, which their names sort
// by), at most max of them. read lists every file it read, including one
// that could not be parsed: such a file is named in err, once, and the
// caller that skips what was read never reads it again. A missing dir has
// no record.
func ReadFailureRecords(dir string, max int, skip map[string]bool) (records []FailureRecord, read []string, err error) {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	all, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(all)
	var errs []error
	for _, name := range all {
		if len(records) >= max {
			break
		}
		if skip[name] || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		read = append(read, name)
		r, err := readRecord(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		records = append(records, r)
	}
	slices.SortStableFunc(records, func(a, b FailureRecord) int { return a.Time.Compare(b.Time) })
	return records, read, errors.Join(errs...)
}

func readRecord(path string) (FailureRecord, error) {
	var r FailureRecord
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return r, err
	}
	if len(data) > maxRecordBytes {
		return r, fmt.Errorf("podmpi-rsh failure record %s: larger than %d bytes", path, maxRecordBytes)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("podmpi-rsh failure record %s: %w", path, err)
	}
	return r, nil
}
