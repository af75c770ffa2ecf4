package hostfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"syscall"
)

// maxLineLen bounds one line (comments included). Real lines are under 300
// bytes; longer input is rejected rather than buffered without limit.
const maxLineLen = 64 << 10

// Open MPI hostfile keys (orte/util/hostfile/hostfile_lex.l). Keys are
// case-sensitive there, and so here.
var (
	slotsKeys = map[string]bool{"slots": true, "count": true, "cpu": true}
	maxKeys   = map[string]bool{
		"max_slots": true, "max-slots": true, "slots_max": true, "slots-max": true,
		"max_cpu": true, "max-cpu": true, "cpu_max": true, "cpu-max": true,
		"max_count": true, "max-count": true, "count_max": true, "count-max": true,
	}
	unsupportedKeys = map[string]bool{
		"username": true, "user-name": true, "user_name": true, "user": true,
		"boards": true, "sockets": true, "sockets_per_board": true, "sockets-per-board": true,
		"cores": true, "cores_per_socket": true, "cores-per-socket": true,
		"cpu_set": true, "cpu-set": true, "rank": true, "slot": true, "port": true,
	}
)

// lineKind is the syntax family a line commits to.
type lineKind int

const (
	kindBare    lineKind = iota // "name": valid in every format
	kindOpenMPI                 // "name slots=N"
	kindHydra                   // "name:N"
)

func (k lineKind) describe() string {
	switch k {
	case kindOpenMPI:
		return "the Open MPI form 'name slots=N'"
	case kindHydra:
		return "the Intel MPI/MPICH form 'name:N'"
	}
	return "a bare host name"
}

// Parse reads a hostfile in any of the three formats and returns its hosts
// in file order (duplicates merged, see the package documentation) and the
// format the file is written in. Errors are *ParseError values naming the
// line.
func Parse(r io.Reader) ([]Host, Format, error) {
	return parse(r, "")
}

// ParseFile is Parse for the named file; errors name the file and line.
// Only a regular file (or a symlink to one, as a ConfigMap volume mounts
// it) is read: anything else is an ErrNotRegular error, found before the
// open and checked again on the open descriptor, which is opened
// non-blocking so that a FIFO swapped in between cannot block it.
func ParseFile(path string) ([]Host, Format, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, OpenMPI, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		cause := fmt.Errorf("open: %w", err)
		if errors.Is(err, fs.ErrNotExist) {
			cause = fmt.Errorf("open: %w (Trainer and mpi-operator mount the hostfile ConfigMap only into the launcher, at /etc/mpi/hostfile)", err)
		}
		return nil, OpenMPI, &ParseError{Path: path, Err: cause}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, OpenMPI, &ParseError{Path: path, Err: fmt.Errorf("stat: %w", err)}
	}
	if !fi.Mode().IsRegular() {
		return nil, OpenMPI, notRegular(path, fi.Mode())
	}
	return parse(f, path)
}

func notRegular(path string, m fs.FileMode) error {
	kind := "special file"
	switch {
	case m.IsDir():
		kind = "directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeCharDevice != 0:
		kind = "character device"
	case m&fs.ModeDevice != 0:
		kind = "block device"
	}
	return &ParseError{Path: path, Err: fmt.Errorf("%w: it is a %s; give the path of a hostfile (a regular file, as the operator's ConfigMap mounts it)", ErrNotRegular, kind)}
}

func parse(r io.Reader, path string) ([]Host, Format, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineLen)

	var (
		hosts    []Host
		index    = make(map[string]int) // nameKey -> position in hosts
		lineOf   = make(map[string]int) // nameKey -> first line
		form     = kindBare
		formLine int
		lineNo   int
	)
	for sc.Scan() {
		lineNo++
		raw := sc.Text()
		content := raw
		if i := strings.IndexByte(content, '#'); i >= 0 {
			content = content[:i]
		}
		content = strings.TrimSpace(content)
		if content == "" {
			continue
		}
		fail := func(err error) ([]Host, Format, error) {
			return nil, OpenMPI, &ParseError{Path: path, Line: lineNo, Text: shorten(strings.TrimSpace(raw)), Err: err}
		}

		h, kind, err := parseLine(content)
		if err != nil {
			return fail(err)
		}
		if kind != kindBare {
			switch form {
			case kindBare:
				form, formLine = kind, lineNo
			case kind:
			default:
				return fail(fmt.Errorf("%w: this line uses %s but line %d uses %s; a hostfile must use one form (Open MPI reads 'name slots=N', Intel MPI and MPICH read 'name:N')",
					ErrMixedFormat, kind.describe(), formLine, form.describe()))
			}
		}

		key := nameKey(h.Name)
		if i, ok := index[key]; ok {
			sum := effectiveSlots(hosts[i].Slots) + effectiveSlots(h.Slots)
			if sum > MaxSlots {
				return fail(fmt.Errorf("%w: %q is also listed on line %d and the slots add up to %d, more than the maximum %d",
					ErrInvalidSlots, h.Name, lineOf[key], sum, MaxSlots))
			}
			hosts[i].Slots = sum
			continue
		}
		index[key] = len(hosts)
		lineOf[key] = lineNo
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, OpenMPI, &ParseError{Path: path, Line: lineNo + 1,
				Err: fmt.Errorf("%w: line longer than %d bytes; is this really a hostfile?", ErrSyntax, maxLineLen)}
		}
		return nil, OpenMPI, &ParseError{Path: path, Err: fmt.Errorf("read after line %d: %w", lineNo, err)}
	}
	if len(hosts) == 0 {
		return nil, OpenMPI, &ParseError{Path: path,
			Err: fmt.Errorf("%w: %d lines, none naming a host (only comments and blank lines); the operators write one line per pod, so an empty hostfile means the ConfigMap was not filled in", ErrNoHosts, lineNo)}
	}
	f := OpenMPI
	if form == kindHydra {
		f = MPICH
	}
	return hosts, f, nil
}

// parseLine parses one non-empty, comment-free, trimmed line.
func parseLine(s string) (Host, lineKind, error) {
	fields := strings.Fields(joinEquals(s))
	first := fields[0]

	if strings.Contains(first, "=") {
		return Host{}, kindBare, fmt.Errorf("%w: the line starts with %q, a key=value, but the host name must come first ('name slots=N')",
			ErrSyntax, shorten(first))
	}
	switch first[0] {
	case '^':
		return Host{}, kindBare, fmt.Errorf("%w: %q excludes a host in Open MPI; podmpi does not support exclusions: delete the host's lines instead",
			ErrUnsupported, shorten(first))
	case '+':
		return Host{}, kindBare, fmt.Errorf("%w: %q is an Open MPI relative node (+nN/+e); podmpi needs host names",
			ErrUnsupported, shorten(first))
	}
	if strings.Contains(first, "@") {
		return Host{}, kindBare, fmt.Errorf("%w: %q has the user@host form; the SSH user comes from the pod, not the hostfile: write just the host",
			ErrUnsupported, shorten(first))
	}

	if strings.Contains(first, ":") {
		return parseHydra(first, fields[1:])
	}

	if err := ValidateName(first); err != nil {
		return Host{}, kindBare, err
	}
	h := Host{Name: first}
	var (
		slots, maxSlots       int
		haveSlots, haveMax    bool
		slotsKey, maxSlotsKey string
	)
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return Host{}, kindBare, fmt.Errorf("%w: unexpected %q after the host name; an Open MPI line is 'name' or 'name slots=N' (several names need several lines)",
				ErrSyntax, shorten(f))
		}
		switch {
		case slotsKeys[key]:
			if haveSlots {
				return Host{}, kindBare, fmt.Errorf("%w: the slot count is given twice (%s= and %s=); keep one", ErrSyntax, slotsKey, key)
			}
			n, err := parseCount(key, val)
			if err != nil {
				return Host{}, kindBare, err
			}
			slots, haveSlots, slotsKey = n, true, key
		case maxKeys[key]:
			if haveMax {
				return Host{}, kindBare, fmt.Errorf("%w: the maximum slot count is given twice (%s= and %s=); keep one", ErrSyntax, maxSlotsKey, key)
			}
			n, err := parseCount(key, val)
			if err != nil {
				return Host{}, kindBare, err
			}
			maxSlots, haveMax, maxSlotsKey = n, true, key
		case unsupportedKeys[key]:
			return Host{}, kindBare, fmt.Errorf("%w: Open MPI key %q; podmpi reads only slots= and max_slots=: remove it", ErrUnsupported, key)
		default:
			return Host{}, kindBare, fmt.Errorf("%w: unknown key %q; Open MPI hostfile keys are lower case: slots=N, max_slots=N", ErrSyntax, shorten(key))
		}
	}
	switch {
	case haveSlots && haveMax && maxSlots < slots:
		return Host{}, kindBare, fmt.Errorf("%w: %s=%d is less than %s=%d; Open MPI rejects that too: raise %s or drop it",
			ErrInvalidSlots, maxSlotsKey, maxSlots, slotsKey, slots, maxSlotsKey)
	case haveSlots:
		h.Slots = slots
	case haveMax:
		h.Slots = maxSlots // Open MPI: max_slots alone also sets slots
	default:
		return h, kindBare, nil
	}
	return h, kindOpenMPI, nil
}

// parseHydra parses "name:N" (first) with no further fields (rest).
func parseHydra(first string, rest []string) (Host, lineKind, error) {
	if strings.Count(first, ":") > 1 {
		if a, err := netip.ParseAddr(strings.Trim(first, "[]")); err == nil && a.Is6() {
			return Host{}, kindBare, ValidateName(first)
		}
		if i := strings.LastIndexByte(first, ':'); i > 0 {
			if a, err := netip.ParseAddr(strings.Trim(first[:i], "[]")); err == nil && a.Is6() {
				return Host{}, kindBare, ValidateName(first[:i])
			}
		}
		return Host{}, kindBare, fmt.Errorf("%w: %q has more than one ':'; the Intel MPI/MPICH form is 'name:N'", ErrSyntax, shorten(first))
	}
	name, count, _ := strings.Cut(first, ":")
	if name == "" {
		return Host{}, kindBare, fmt.Errorf("%w: %q has no host name before ':'", ErrSyntax, shorten(first))
	}
	if err := ValidateName(name); err != nil {
		return Host{}, kindBare, err
	}
	if len(rest) > 0 {
		return Host{}, kindBare, fmt.Errorf("%w: %q after %q: Hydra per-host options (ifhn=, user=) and Open MPI keys after name:N are not supported; write only 'name:N'",
			ErrUnsupported, shorten(strings.Join(rest, " ")), shorten(first))
	}
	n, err := parseCount("count", count)
	if err != nil {
		return Host{}, kindBare, err
	}
	return Host{Name: name, Slots: n}, kindHydra, nil
}

// parseCount parses a slot count in 1..MaxSlots. what names the key.
func parseCount(what, s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: %s has no value; write a number of at least 1", ErrInvalidSlots, what)
	}
	digits := s
	if s[0] == '-' {
		digits = s[1:]
	}
	if !allDigits(digits) {
		return 0, fmt.Errorf("%w: %s %q is not a decimal number", ErrInvalidSlots, what, shorten(s))
	}
	if digits != s {
		return 0, fmt.Errorf("%w: %s %s is negative; it must be at least 1", ErrInvalidSlots, what, shorten(s))
	}
	trimmed := strings.TrimLeft(s, "0")
	if len(trimmed) > 7 { // > 9,999,999 > MaxSlots; also avoids overflow
		return 0, fmt.Errorf("%w: %s %s is more than the maximum %d", ErrInvalidSlots, what, shorten(s), MaxSlots)
	}
	n := 0
	for i := 0; i < len(trimmed); i++ {
		n = n*10 + int(trimmed[i]-'0')
	}
	switch {
	case n == 0:
		return 0, fmt.Errorf("%w: %s is 0; it must be at least 1 (Trainer's numProcPerNode / mpi-operator's slotsPerWorker): a host with no slots would get no process, so delete its line instead", ErrInvalidSlots, what)
	case n > MaxSlots:
		return 0, fmt.Errorf("%w: %s %d is more than the maximum %d", ErrInvalidSlots, what, n, MaxSlots)
	}
	return n, nil
}

// joinEquals removes the whitespace around '=' that Open MPI's lexer
// allows ("slots = 2" -> "slots=2"), then joins the fields with one space.
func joinEquals(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	fields := strings.Fields(s)
	var b strings.Builder
	b.Grow(len(s))
	for i, f := range fields {
		if i > 0 && !strings.HasPrefix(f, "=") && !strings.HasSuffix(fields[i-1], "=") {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}

// nameKey is the identity of a host for duplicate detection: DNS names are
// case-insensitive and "a.b." is the absolute spelling of "a.b".
func nameKey(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// effectiveSlots is the slot count a line contributes when a host is listed
// more than once: a line without a count counts as one slot (Open MPI).
func effectiveSlots(n int) int {
	if n <= 0 {
		return 1
	}
	return n
}
