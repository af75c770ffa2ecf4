// Package mpirun prepares and supervises the user's unchanged `mpirun ...`
// command in the launcher pod.
//
// It does three things:
//
//   - Detection: which MPI the command belongs to (Open MPI 4 with ORTE, Open
//     MPI 5 with PRRTE, MPICH's Hydra, Intel MPI's Hydra), from the text of
//     `mpirun --version` and, as a hint, from the command's name
//     (ParseVersionOutput, Detect, Resolve).
//   - Wiring: the environment that makes that mpirun use the launcher's own
//     rsh program ("podmpi-rsh", a symlink to the launcher binary made by
//     Setup), the hostfile the launcher wrote, the default slot count, the pod
//     interface, and the allow-run-as-root switches (Wiring.Env). A variable
//     the user already set is never overridden; it is reported as kept.
//   - Supervision: Run starts mpirun as a child in its own process group,
//     forwards signals to it, enforces an optional deadline (SIGTERM, then
//     SIGKILL of the whole tree after a grace period), reaps orphaned zombies
//     when the launcher is PID 1 or a child subreaper, and passes mpirun's exit
//     status through.
//
// The variable names come from the sources listed in shared/conventions.md §3
// (ORTE plm_rsh, PRRTE plm_ssh, Hydra bootstrap, Intel MPI reference).
package mpirun

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/podmpi/podmpi/hostfile"
)

// Implementation is an MPI launch stack whose environment the launcher knows
// how to wire. Open MPI is split by major version because Open MPI 5 replaced
// ORTE with PRRTE, which renamed most launch parameters.
type Implementation string

// The supported implementations.
const (
	// OpenMPI4 is Open MPI up to 4.x (ORTE runtime; orted daemons;
	// OMPI_MCA_plm_rsh_* / OMPI_MCA_orte_* names).
	OpenMPI4 Implementation = "openmpi4"
	// OpenMPI5 is Open MPI 5.x and later (PRRTE runtime; prted daemons;
	// PRTE_MCA_plm_ssh_* / PRTE_MCA_prte_* names).
	OpenMPI5 Implementation = "openmpi5"
	// MPICH is MPICH (and derivatives such as MVAPICH) with the Hydra process
	// manager (hydra_pmi_proxy on the workers; HYDRA_* names).
	MPICH Implementation = "mpich"
	// IntelMPI is Intel MPI Library 2019 and later (its own Hydra;
	// hydra_bstrap_proxy and hydra_pmi_proxy on the workers; I_MPI_HYDRA_*
	// names).
	IntelMPI Implementation = "intelmpi"
)

// Implementations lists every supported Implementation.
var Implementations = []Implementation{OpenMPI4, OpenMPI5, MPICH, IntelMPI}

// Valid reports whether i is one of the supported implementations.
func (i Implementation) Valid() bool {
	switch i {
	case OpenMPI4, OpenMPI5, MPICH, IntelMPI:
		return true
	}
	return false
}

// OpenMPI reports whether i is one of the Open MPI implementations.
func (i Implementation) OpenMPI() bool { return i == OpenMPI4 || i == OpenMPI5 }

// Hydra reports whether i launches through a Hydra process manager (MPICH or
// Intel MPI).
func (i Implementation) Hydra() bool { return i == MPICH || i == IntelMPI }

// String returns the value accepted by ParseImplementation.
func (i Implementation) String() string { return string(i) }

// HostfileFormat returns the hostfile syntax i reads.
func (i Implementation) HostfileFormat() hostfile.Format {
	switch i {
	case MPICH:
		return hostfile.MPICH
	case IntelMPI:
		return hostfile.IntelMPI
	}
	return hostfile.OpenMPI
}

// Daemons returns the programs mpirun starts on each worker through the rsh
// program; a worker is ready for this MPI when ANY of them is found there.
//
//   - openmpi4: orted (ORTE's `orted ...` command string).
//   - openmpi5: prted.
//   - mpich: hydra_pmi_proxy (Hydra passes its absolute path).
//   - intelmpi: hydra_bstrap_proxy, the program Intel MPI 2019+ starts over
//     ssh; hydra_pmi_proxy is listed as well because the bootstrap proxy
//     starts it next to itself from the same directory, so finding either
//     means the Intel MPI runtime is installed on the worker.
func (i Implementation) Daemons() []string {
	switch i {
	case OpenMPI4:
		return []string{"orted"}
	case OpenMPI5:
		return []string{"prted"}
	case MPICH:
		return []string{"hydra_pmi_proxy"}
	case IntelMPI:
		return []string{"hydra_bstrap_proxy", "hydra_pmi_proxy"}
	}
	return nil
}

// ErrUnknownImplementation is returned by ParseImplementation for a name it
// does not know.
var ErrUnknownImplementation = errors.New("unknown MPI implementation")

// ParseImplementation parses the value of --mpi.implementation,
// case-insensitively. It returns auto=true when detection (Detect) should
// decide or refine the result:
//
//   - "auto" or "": ("", true): detect everything.
//   - "openmpi" (also "ompi", "open-mpi", and mpi-operator's "OpenMPI"):
//     (OpenMPI4, true): Open MPI for sure; detection only picks the major
//     version, and OpenMPI4 stands when it cannot.
//   - "openmpi4", "openmpi5", "mpich" (also "hydra"), "intelmpi" (also
//     "intel", "impi", "intel-mpi", mpi-operator's "Intel"): that value,
//     false.
func ParseImplementation(s string) (Implementation, bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return "", true, nil
	case "openmpi", "open-mpi", "ompi":
		return OpenMPI4, true, nil
	case "openmpi4", "ompi4", "open-mpi4", "openmpi-4":
		return OpenMPI4, false, nil
	case "openmpi5", "ompi5", "open-mpi5", "openmpi-5":
		return OpenMPI5, false, nil
	case "mpich", "hydra":
		return MPICH, false, nil
	case "intelmpi", "intel", "impi", "intel-mpi":
		return IntelMPI, false, nil
	}
	return "", false, fmt.Errorf("%w %q for --mpi.implementation: want auto, openmpi, openmpi4, openmpi5, mpich or intelmpi",
		ErrUnknownImplementation, s)
}

// ErrUnrecognizedVersion is returned when `mpirun --version` output names no
// known MPI.
var ErrUnrecognizedVersion = errors.New("unrecognized mpirun --version output")

// maxVersionLen bounds the version string ParseVersionOutput returns.
const maxVersionLen = 64

// ParseVersionOutput identifies the MPI from the output of `mpirun
// --version` (or `mpiexec --version`, `mpiexec.hydra --version`) and returns
// its version string ("" when the output names the MPI but no readable
// version). It recognises, in this order:
//
//   - Intel: "Intel(R) MPI Library for Linux* OS, Version 2021.13 Build ..."
//     (version "2021.13"; "2019 Update 9" is kept whole).
//   - Open MPI: "mpirun (Open MPI) 4.1.4", "mpirun.openmpi (OpenRTE) 4.1.4",
//     "prterun (PRRTE) 3.0.6". Major 5 or later, or PRRTE, is OpenMPI5;
//     earlier, or OpenRTE without a version, is OpenMPI4.
//   - Hydra (MPICH, MVAPICH): "HYDRA build details:" with a "Version:" line.
//
// Intel is checked first because Intel's Hydra may also print Hydra text.
func ParseVersionOutput(out string) (Implementation, string, error) {
	if i := indexFold(out, "Intel(R) MPI Library"); i >= 0 {
		return IntelMPI, intelVersion(out[i:]), nil
	}
	if i := indexFold(out, "Intel MPI Library"); i >= 0 {
		return IntelMPI, intelVersion(out[i:]), nil
	}
	for _, m := range []struct {
		marker string
		impl   Implementation
	}{
		{"(Open MPI)", ""},
		{"(OpenRTE)", OpenMPI4},
		{"(PRRTE)", OpenMPI5},
		{"(PMIx Reference RunTime Environment)", OpenMPI5},
	} {
		i := strings.Index(out, m.marker)
		if i < 0 {
			continue
		}
		v := firstWord(out[i+len(m.marker):])
		if m.impl == OpenMPI5 {
			return OpenMPI5, v, nil
		}
		if major, ok := leadingInt(v); ok && major >= 5 {
			return OpenMPI5, v, nil
		}
		return OpenMPI4, v, nil
	}
	if i := strings.Index(out, "HYDRA build details"); i >= 0 {
		sc := bufio.NewScanner(strings.NewReader(out[i:]))
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for n := 0; sc.Scan() && n < 50; n++ {
			line := strings.TrimSpace(sc.Text())
			if rest, ok := strings.CutPrefix(line, "Version:"); ok {
				return MPICH, firstWord(rest), nil
			}
		}
		return MPICH, "", nil
	}
	return "", "", fmt.Errorf("%w: first line %q names none of Open MPI, OpenRTE, PRRTE, HYDRA, Intel(R) MPI Library",
		ErrUnrecognizedVersion, firstLine(out))
}

// intelVersion extracts "2021.13" from "Intel(R) MPI Library for Linux* OS,
// Version 2021.13 Build 20240701 (id: 8f9b6da)", and "2019 Update 9" from
// "..., Version 2019 Update 9 Build 20200923 ...".
func intelVersion(s string) string {
	s = firstLine(s)
	i := strings.Index(s, "Version ")
	if i < 0 {
		return ""
	}
	rest := s[i+len("Version "):]
	if j := strings.Index(rest, " Build"); j >= 0 {
		rest = rest[:j]
	}
	fields := strings.Fields(rest)
	if len(fields) > 3 {
		fields = fields[:3]
	}
	for k, f := range fields {
		fields[k] = cleanVersion(f)
	}
	return cleanVersionSpaces(strings.Join(fields, " "))
}

// firstWord returns the first whitespace-separated word of s on its first
// line, reduced to version characters.
func firstWord(s string) string {
	f := strings.Fields(firstLine(s))
	if len(f) == 0 {
		return ""
	}
	return cleanVersion(f[0])
}

// cleanVersion keeps the leading run of characters that occur in version
// strings (letters, digits, . + - _ ~) and caps the length.
func cleanVersion(s string) string {
	end := 0
	for end < len(s) && end < maxVersionLen {
		c := s[end]
		if c < 0x80 && (unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)) || strings.IndexByte(".+-_~", c) >= 0) {
			end++
			continue
		}
		break
	}
	return s[:end]
}

func cleanVersionSpaces(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxVersionLen {
		s = strings.TrimSpace(s[:maxVersionLen])
	}
	return s
}

func leadingInt(v string) (int, bool) {
	end := 0
	for end < len(v) && end < 9 && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(v[:end])
	return n, err == nil
}

func firstLine(s string) string {
	s = strings.TrimLeft(s, " \t\r\n")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// indexFold returns the byte index in s of the first match of sub, ASCII
// letters compared case-insensitively, or -1. The index is s's own: folding
// only ASCII bytes keeps every length unchanged, whereas searching a
// strings.ToLower copy gives indexes into the copy, which invalid UTF-8 in
// the output (each bad byte becomes a 3-byte U+FFFD) shifts past s's end.
func indexFold(s, sub string) int {
	n := len(sub)
	for i := 0; i+n <= len(s); i++ {
		if asciiEqualFold(s[i:i+n], sub) {
			return i
		}
	}
	return -1
}

func asciiEqualFold(a, b string) bool {
	for i := range len(a) {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// NameHint returns the implementation family a launcher program's name
// implies, following symlinks first (Debian's /usr/bin/mpirun points through
// /etc/alternatives to mpirun.openmpi or mpirun.mpich). ok is false when the
// name says nothing. mpiexec.hydra is MPICH's name but Intel MPI ships one
// too, so it only yields MPICH when nothing better is known.
func NameHint(path string) (impl Implementation, ok bool) {
	names := []string{filepath.Base(path)}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		names = append([]string{filepath.Base(r)}, names...)
	}
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".openmpi"), n == "orterun", n == "ompi-run":
			return OpenMPI4, true
		case n == "prterun", n == "prun":
			return OpenMPI5, true
		case strings.HasSuffix(n, ".mpich"), strings.HasSuffix(n, ".hydra"):
			return MPICH, true
		}
	}
	return "", false
}

// LauncherName reports whether argv0 names an MPI launcher (mpirun, mpiexec,
// orterun, prterun, and their suffixed forms such as mpirun.openmpi). Detect
// runs `--version` only on such programs: any other command (bash, python,
// horovodrun) might do real work when given an unknown flag.
func LauncherName(argv0 string) bool {
	n := filepath.Base(argv0)
	if i := strings.IndexByte(n, '.'); i >= 0 {
		n = n[:i]
	}
	switch n {
	case "mpirun", "mpiexec", "orterun", "prterun":
		return true
	}
	return false
}

// DetectTimeout bounds each `--version` run of Detect.
const DetectTimeout = 10 * time.Second

// maxDetectOutput bounds the output Detect reads.
const maxDetectOutput = 64 << 10

// Detect runs `<mpirun> --version` (at most DetectTimeout, output capped at
// 64 KiB) and identifies the MPI from its output. When that output is not
// recognised it tries `<mpirun> -V` (Intel's and ORTE's short form), and
// then falls back to the program's name (NameHint) with an empty version. The
// program is looked up on PATH when mpirun has no slash.
func Detect(ctx context.Context, mpirun string) (Implementation, string, error) {
	path := mpirun
	if !strings.Contains(mpirun, "/") {
		p, err := exec.LookPath(mpirun)
		if err != nil {
			return "", "", fmt.Errorf("detecting the MPI: %q is not on PATH: %w", mpirun, err)
		}
		path = p
	}
	var firstErr error
	for _, flag := range []string{"--version", "-V"} {
		out, err := runVersion(ctx, path, flag)
		impl, v, perr := ParseVersionOutput(out)
		if perr == nil {
			return impl, v, nil
		}
		if firstErr == nil {
			if err != nil {
				firstErr = fmt.Errorf("running %s %s: %w (output: %q)", path, flag, err, firstLine(out))
			} else {
				firstErr = fmt.Errorf("%s %s: %w", path, flag, perr)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if impl, ok := NameHint(path); ok {
		return impl, "", nil
	}
	return "", "", fmt.Errorf("detecting the MPI: %w; set --mpi.implementation to openmpi, openmpi5, mpich or intelmpi", firstErr)
}

func runVersion(ctx context.Context, path, flag string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, DetectTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, flag)
	var buf limitedBuffer
	buf.max = maxDetectOutput
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The whole group: Intel's mpirun is a script around mpiexec.hydra.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return buf.String(), err
}

// limitedBuffer keeps the first max bytes written and discards the rest
// while reporting success, so the child never blocks on a full pipe.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// Resolve turns the --mpi.implementation value spec and the user's command
// argv0 into one Implementation and its version ("" when unknown):
//
//   - an explicit implementation is returned as is, without running anything;
//   - "openmpi" runs Detect and takes its major version when Detect says Open
//     MPI; otherwise OpenMPI4;
//   - "auto" runs Detect on argv0 when it names an MPI launcher, else on
//     "mpirun" from PATH (the user's command may be `bash -c "mpirun ..."`),
//     and fails with a hint to set --mpi.implementation when that fails.
func Resolve(ctx context.Context, spec, argv0 string) (Implementation, string, error) {
	impl, auto, err := ParseImplementation(spec)
	if err != nil {
		return "", "", err
	}
	if !auto {
		return impl, "", nil
	}
	prog := argv0
	if !LauncherName(prog) {
		prog = "mpirun"
	}
	got, v, derr := Detect(ctx, prog)
	if impl == OpenMPI4 { // "openmpi": refine the major only
		if derr == nil && got.OpenMPI() {
			return got, v, nil
		}
		return OpenMPI4, "", nil
	}
	if derr != nil {
		return "", "", derr
	}
	return got, v, nil
}
