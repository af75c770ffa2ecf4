package hostfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Render writes hosts to w in format f, one line per host, exactly as the
// operators write them: "name slots=N\n" for OpenMPI, "name:N\n" for
// IntelMPI and MPICH. Every host is validated first (ValidateName, Slots in
// 1..MaxSlots, no name twice), so on error nothing is written.
func Render(w io.Writer, f Format, hosts []Host) error {
	b, err := render(f, hosts)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write %s hostfile: %w", f, err)
	}
	return nil
}

func render(f Format, hosts []Host) ([]byte, error) {
	if !f.valid() {
		return nil, fmt.Errorf("render hostfile: %w %d; use OpenMPI, IntelMPI or MPICH", ErrUnknownFormat, int(f))
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("render %s hostfile: %w: the host list is empty; mpirun would run everything on the launcher", f, ErrNoHosts)
	}
	seen := make(map[string]int, len(hosts))
	for i, h := range hosts {
		if err := ValidateName(h.Name); err != nil {
			return nil, fmt.Errorf("render %s hostfile: host %d: %w", f, i, err)
		}
		if h.Slots < 1 || h.Slots > MaxSlots {
			return nil, fmt.Errorf("render %s hostfile: host %d %q: %w: %d; it must be 1..%d (fill in unknown counts with WithDefaultSlots)",
				f, i, h.Name, ErrInvalidSlots, h.Slots, MaxSlots)
		}
		key := nameKey(h.Name)
		if j, ok := seen[key]; ok {
			return nil, fmt.Errorf("render %s hostfile: host %d %q: %w: same host as host %d %q; list each host once with the sum of its slots",
				f, i, h.Name, ErrDuplicateHost, j, hosts[j].Name)
		}
		seen[key] = i
	}
	var b bytes.Buffer
	for _, h := range hosts {
		b.WriteString(h.Name)
		if f.hydra() {
			b.WriteByte(':')
		} else {
			b.WriteString(" slots=")
		}
		b.WriteString(strconv.Itoa(h.Slots))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// WriteFile renders hosts (see Render) into path atomically: it writes a
// temporary file in the same directory and renames it over path, so a
// concurrent reader (mpirun) never sees a half-written hostfile. The file
// gets mode perm (e.g. 0o644).
func WriteFile(path string, f Format, hosts []Host, perm os.FileMode) error {
	b, err := render(f, hosts)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write hostfile %s: create temporary file in %s: %w (is the directory writable by this user?)", path, dir, err)
	}
	tmpName := tmp.Name()
	cleanup := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(tmpName)
		return fmt.Errorf("write hostfile %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		return cleanup(err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return cleanup(err)
	}
	if err := tmp.Close(); err != nil {
		return cleanup(err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("write hostfile %s: rename: %w", path, err)
	}
	return nil
}
