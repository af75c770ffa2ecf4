// Package hostfile reads and writes MPI hostfiles in the forms that
// Kubeflow Trainer v2 and mpi-operator write into /etc/mpi/hostfile:
//
//	tj-node-0-0.tj slots=2               Open MPI (Trainer v2, mpi-operator OpenMPI)
//	pi-worker-0.pi.default.svc slots=1   Open MPI (mpi-operator)
//	pi-worker-0.pi.default.svc:1         Intel MPI and MPICH (Hydra), mpi-operator
//
// # Syntax accepted by Parse
//
//   - '#' starts a comment, on its own line or after an entry. Blank lines,
//     leading and trailing spaces, tabs and CR (CRLF files) are ignored.
//   - Open MPI: "name", "name slots=N". As in Open MPI's own hostfile lexer,
//     spaces around '=' are allowed ("slots = N"), count= and cpu= are synonyms
//     of slots=, and max_slots=N (also max-slots, slots_max, slots-max and the
//     cpu/count variants) is accepted: it must be >= slots, and when slots is
//     absent it supplies the slot count, as Open MPI does. Keys are lower case.
//     Other Open MPI keys (username=, boards=, sockets=, cores=, cpu_set=,
//     rank=), user@host, ^host exclusions and +n relative nodes are rejected
//     with an error that says so: podmpi cannot honour them.
//   - Intel MPI / MPICH (Hydra): "name" or "name:N". Hydra per-host options
//     ("name:N ifhn=eth0") and extra ':' fields are rejected.
//   - One file uses one form. A bare "name" line fits both and does not decide
//     the form; a file mixing "slots=" lines with "name:N" lines is an error
//     that names both lines.
//   - Slot counts are decimal integers in 1..MaxSlots.
//   - Host names must pass ValidateName.
//   - A host listed more than once is merged into its first position and the
//     slots add up, matching Open MPI (which counts each bare repetition as one
//     slot). A repetition without a count contributes 1 slot, so "a\na\n"
//     parses as a with 2 slots. Names are compared case-insensitively and
//     without a trailing dot; the first spelling is kept.
//   - A file without any host is an error (ErrNoHosts).
//
// Host.Slots is 0 when a host's only lines carry no count ("not given"): Open
// MPI then uses orte_set_default_slots (Trainer and mpi-operator set it to the
// same number) and Hydra uses 1. WithDefaultSlots fills such entries in.
//
// Intel MPI and MPICH share one syntax, so Parse reports MPICH for a "name:N"
// file; a file with no counted line is reported as OpenMPI, the default of
// both operators.
//
// Render writes exactly what the operators write: one "name slots=N" or
// "name:N" line per host, each ending in '\n', with no comments, so its output
// is byte-for-byte the ConfigMap content for the same host list.
package hostfile

import (
	"errors"
	"fmt"
	"strings"
)

// MaxSlots is the largest slot count accepted for one host, after duplicate
// entries are merged. It is far above any real node (Open MPI itself stores
// slots in an int) and keeps TotalSlots far from overflowing.
const MaxSlots = 1 << 20

// Host is one entry of a hostfile.
type Host struct {
	// Name is the host name (RFC 1123) or IPv4 literal, as written.
	Name string
	// Slots is the number of MPI processes the host takes. In parsed input 0
	// means the line gave no count; Render requires 1..MaxSlots.
	Slots int
}

// String returns the host in Open MPI form, "name slots=N", or just "name"
// when Slots is 0.
func (h Host) String() string {
	if h.Slots == 0 {
		return h.Name
	}
	return fmt.Sprintf("%s slots=%d", h.Name, h.Slots)
}

// Format is a hostfile syntax. The zero value is OpenMPI, the default MPI
// implementation of both Trainer v2 and mpi-operator.
type Format int

// The hostfile syntaxes.
const (
	// OpenMPI is "name slots=N" (Open MPI 4 ORTE and Open MPI 5 PRRTE).
	OpenMPI Format = iota
	// IntelMPI is "name:N" (Intel MPI's Hydra).
	IntelMPI
	// MPICH is "name:N" (MPICH's Hydra). Same syntax as IntelMPI.
	MPICH
)

// formatNames maps every accepted spelling (lower case) to its Format.
var formatNames = map[string]Format{
	"openmpi":   OpenMPI,
	"open-mpi":  OpenMPI,
	"ompi":      OpenMPI,
	"intelmpi":  IntelMPI,
	"intel-mpi": IntelMPI,
	"intel":     IntelMPI,
	"impi":      IntelMPI,
	"mpich":     MPICH,
	"hydra":     MPICH,
}

// ParseFormat returns the Format named by s, case-insensitively:
// "openmpi" (also "open-mpi", "ompi"), "intelmpi" (also "intel-mpi",
// "intel", "impi": mpi-operator's value is "Intel") or "mpich" (also
// "hydra"). The operators' spellings "OpenMPI", "Intel" and "MPICH" are all
// accepted. An empty string is an error, not a silent default.
func ParseFormat(s string) (Format, error) {
	if f, ok := formatNames[strings.ToLower(strings.TrimSpace(s))]; ok {
		return f, nil
	}
	return 0, fmt.Errorf("%w %q: want one of openmpi, intelmpi, mpich (mpi-operator's mpiImplementation values OpenMPI, Intel and MPICH also work)",
		ErrUnknownFormat, s)
}

// String returns "OpenMPI", "IntelMPI" or "MPICH"; ParseFormat accepts each.
func (f Format) String() string {
	switch f {
	case OpenMPI:
		return "OpenMPI"
	case IntelMPI:
		return "IntelMPI"
	case MPICH:
		return "MPICH"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// valid reports whether f is one of the defined formats.
func (f Format) valid() bool { return f == OpenMPI || f == IntelMPI || f == MPICH }

// hydra reports whether f uses the "name:N" syntax.
func (f Format) hydra() bool { return f == IntelMPI || f == MPICH }

// Set parses s with ParseFormat; with Type it makes *Format a flag.Value and
// a pflag.Value, so it can back a --mpi-implementation flag directly.
func (f *Format) Set(s string) error {
	v, err := ParseFormat(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// Type names the flag value type in --help output.
func (f *Format) Type() string { return "format" }

// MarshalText implements encoding.TextMarshaler.
func (f Format) MarshalText() ([]byte, error) {
	if !f.valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownFormat, int(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using ParseFormat.
func (f *Format) UnmarshalText(b []byte) error { return f.Set(string(b)) }

// TotalSlots returns the sum of the hosts' slots (hosts with Slots 0 add
// nothing; negative values are ignored). That is the largest -np mpirun
// accepts without --oversubscribe.
func TotalSlots(hosts []Host) int {
	n := 0
	for _, h := range hosts {
		if h.Slots > 0 {
			n += h.Slots
		}
	}
	return n
}

// WithDefaultSlots returns a copy of hosts in which every Slots 0 ("not
// given") is replaced by n, the value of OMPI_MCA_orte_set_default_slots
// (Open MPI) or 1 (Hydra). hosts is not modified.
func WithDefaultSlots(hosts []Host, n int) []Host {
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		if h.Slots == 0 {
			h.Slots = n
		}
		out[i] = h
	}
	return out
}

// Sentinel errors. Every error about the content of a hostfile or host list
// wraps one of them, so callers can test with errors.Is; I/O errors wrap the
// underlying error instead (e.g. fs.ErrNotExist).
var (
	// ErrInvalidName: a host name is not an RFC 1123 host name or IPv4 literal.
	ErrInvalidName = errors.New("invalid host name")
	// ErrInvalidSlots: a slot count is missing, not a number, <= 0 or > MaxSlots.
	ErrInvalidSlots = errors.New("invalid slot count")
	// ErrSyntax: a line has a form that is neither Open MPI nor Hydra.
	ErrSyntax = errors.New("syntax error")
	// ErrUnsupported: valid MPI hostfile syntax that podmpi cannot honour.
	ErrUnsupported = errors.New("unsupported hostfile feature")
	// ErrMixedFormat: one file uses both "name slots=N" and "name:N" lines.
	ErrMixedFormat = errors.New("mixed hostfile formats")
	// ErrNoHosts: the input lists no host (Parse) or the list is empty (Render).
	ErrNoHosts = errors.New("no hosts")
	// ErrDuplicateHost: Render was given the same host twice.
	ErrDuplicateHost = errors.New("duplicate host")
	// ErrUnknownFormat: a Format value or name is not one of the three formats.
	ErrUnknownFormat = errors.New("unknown hostfile format")
	// ErrNotRegular: ParseFile was given a FIFO, device, socket or
	// directory, which it refuses before reading (a FIFO without a writer
	// would block the open forever).
	ErrNotRegular = errors.New("not a regular file")
)

// ParseError is an error in a hostfile, located by file and line.
type ParseError struct {
	// Path is the file name; empty when parsing a reader without a name.
	Path string
	// Line is the 1-based line number; 0 for errors about the whole file.
	Line int
	// Text is the offending line as written (trimmed, truncated for display).
	Text string
	// Err is the cause: it wraps one of the package's sentinel errors, or
	// the I/O error for a file that cannot be opened or read.
	Err error
}

// Error formats the error as
// `hostfile /etc/mpi/hostfile:3: "a_b slots=1": invalid host name "a_b": ...`.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString("hostfile ")
	switch {
	case e.Path != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d", e.Path, e.Line)
	case e.Path != "":
		b.WriteString(e.Path)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d", e.Line)
	default:
		b.WriteString("input")
	}
	b.WriteString(": ")
	if e.Text != "" {
		fmt.Fprintf(&b, "%q: ", e.Text)
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("unknown error")
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *ParseError) Unwrap() error { return e.Err }

// shorten truncates s for display in error messages.
func shorten(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
