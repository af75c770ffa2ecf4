package rsh

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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
	Time  time.Time `json:"time"`
	Host  string    `json:"host"`
	Port  int       `json:"port"`
	Phase string    `json:"phase"`
	Cause string    `json:"cause"`
	Hint  string    `json:"hint,omitempty"`
	// Daemon is the first word of the remote command (orted, prted,
	// hydra_pmi_proxy, ...); "" when none was given.
	Daemon string `json:"daemon,omitempty"`
	// Line is the stderr line, without the "podmpi-rsh: " prefix.
	Line string `json:"line"`
	PID  int    `json:"pid"`
}

// newFailureRecord describes f for the remote command cmd.
func newFailureRecord(f *sshclient.Failure, cmd string, now time.Time) FailureRecord {
	r := FailureRecord{Time: now, Host: f.Host, Port: f.Port, Phase: string(f.Phase), Cause: f.CauseText(), Hint: f.Hint,
		Line: f.Error(), PID: os.Getpid()}
	if w := strings.Fields(cmd); len(w) > 0 {
		r.Daemon = filepath.Base(w[0])
		for _, word := range w {
			// Open MPI sends "PATH=...; export PATH; ... orted ...": name the
			// daemon rather than the shell preamble.
			if base := filepath.Base(strings.Trim(word, `"'`)); isDaemonName(base) {
				r.Daemon = base
				break
			}
		}
	}
	return r
}

// isDaemonName reports whether s is an MPI daemon of package mpi's table.
func isDaemonName(s string) bool { return slices.Contains(mpi.AllDaemons(), s) }

// WriteFailureRecord writes r into dir as <pid>-<nanoseconds>.json, whole
// or not at all (a temporary file renamed into place), readable only by
// this user.
func WriteFailureRecord(dir string, r FailureRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(data) > maxRecordBytes {
		r.Cause, r.Hint, r.Line = clipString(r.Cause, 1024), clipString(r.Hint, 1024), clipString(r.Line, 2048)
		if data, err = json.Marshal(r); err != nil {
			return err
		}
	}
	name := strconv.Itoa(r.PID) + "-" + strconv.FormatInt(r.Time.UnixNano(), 10) + ".json"
	tmp, err := os.CreateTemp(dir, ".tmp-"+name)
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(data, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ReadFailureRecords reads the records in dir, oldest first, at most max;
// skip names files already read (they are left out). A missing dir has no
// record. A record that cannot be parsed is returned as an error next to
// the others.
func ReadFailureRecords(dir string, max int, skip map[string]bool) (records []FailureRecord, names []string, err error) {
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
		r, err := readRecord(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		records = append(records, r)
		names = append(names, name)
	}
	slices.SortStableFunc(records, func(a, b FailureRecord) int { return a.Time.Compare(b.Time) })
	return records, names, errors.Join(errs...)
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
