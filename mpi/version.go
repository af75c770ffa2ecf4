package mpi

import (
	"bufio"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

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
		ErrUnrecognizedVersion, FirstLine(out))
}

// intelVersion extracts "2021.13" from "Intel(R) MPI Library for Linux* OS,
// Version 2021.13 Build 20240701 (id: 8f9b6da)", and "2019 Update 9" from
// "..., Version 2019 Update 9 Build 20200923 ...".
func intelVersion(s string) string {
	s = FirstLine(s)
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
	f := strings.Fields(FirstLine(s))
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

// FirstLine returns the first non-blank line of s, cut at 120 bytes, for
// messages that quote a program's output.
func FirstLine(s string) string {
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

// launchers are the command names of MPI launchers (after any directory,
// and before an optional ".suffix" such as mpirun.openmpi or mpiexec.hydra):
// Open MPI 4 (mpirun, mpiexec, orterun), Open MPI 5 / PRRTE (prterun), and
// Hydra (MPICH and Intel MPI mpiexec / mpirun).
var launchers = []string{"mpirun", "mpiexec", "orterun", "prterun"}

// IsLauncher reports whether argv0 names an MPI launcher: mpirun, mpiexec,
// orterun or prterun, possibly with a directory and a ".suffix"
// (/usr/bin/mpirun.openmpi, mpiexec.hydra). Detection runs `--version` only
// on such programs, since any other command (bash, python, horovodrun) might
// do real work when given an unknown flag; and a command run through a
// shell ("bash -c 'mpirun ...'") or a wrapper (env, time) is not one.
func IsLauncher(argv0 string) bool {
	base := filepath.Base(argv0)
	for _, n := range launchers {
		if base == n || (strings.HasPrefix(base, n+".") && len(base) > len(n)+1) {
			return true
		}
	}
	return false
}
