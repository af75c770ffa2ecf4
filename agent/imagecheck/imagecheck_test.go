package imagecheck

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func noEnv(string) string { return "" }

// dynamicBinary is a dynamically linked program of this machine, the
// stand-in for worker-agent (which needs libc.so.6 and a loader the same
// way).
func dynamicBinary(t *testing.T) (string, Facts) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	p, err := exec.LookPath("true")
	if err != nil {
		t.Skip(err)
	}
	p, _ = filepath.EvalSymlinks(p)
	facts, err := Worker("/", p, noEnv)
	if err != nil {
		t.Fatalf("this machine runs %s, yet: %v", p, err)
	}
	if facts.Loader == "" || len(facts.Libs) == 0 {
		t.Skipf("%s is not dynamically linked", p)
	}
	return p, facts
}

// TestWorkerOnThisMachine: the machine that runs the program passes, and
// the glibc version found is the one getconf reports.
func TestWorkerOnThisMachine(t *testing.T) {
	_, facts := dynamicBinary(t)
	if !facts.LoaderFound || facts.Libs[0].Path == "" {
		t.Fatalf("facts %s", facts)
	}
	out, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	if err != nil {
		t.Skip(err)
	}
	if want := strings.TrimPrefix(strings.TrimSpace(string(out)), "glibc "); facts.Glibc != want {
		t.Errorf("glibc %q, getconf says %q (facts: %s)", facts.Glibc, want, facts)
	}
}

// TestWorkerNamesWhatIsMissing: roots without glibc's loader (empty, or
// musl's, as Alpine), and a root whose libc.so.6 defines too old symbol
// versions, each give a Problem naming it, the facts and the fix.
func TestWorkerNamesWhatIsMissing(t *testing.T) {
	bin, host := dynamicBinary(t)
	empty := t.TempDir()
	musl := t.TempDir()
	loader := "ld-musl-" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH] + ".so.1"
	writeFile(t, filepath.Join(musl, "lib", loader), "")
	for _, tc := range []struct {
		name, root string
		want       []string
	}{
		{"no libc at all", empty, []string{"needs glibc's dynamic loader " + host.Loader + ", which this image lacks", "no libc.so.6"}},
		{"musl", musl, []string{"this image has musl libc instead (/lib/" + loader + ")", "(a musl image such as Alpine)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Worker(tc.root, bin, noEnv)
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("err %v, want a Problem", err)
			}
			for _, w := range append(tc.want, "fix: run the worker pods on an image with glibc 2.28 or later") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}

// TestWorkerOldGlibc: a libc.so.6 that defines only an old symbol version
// (made with the C compiler and a version script, as glibc defines its
// own), with the loader present: the versions the binary needs and the
// library are named.
func TestWorkerOldGlibc(t *testing.T) {
	bin, host := dynamicBinary(t)
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to make an old libc.so.6")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	writeFile(t, filepath.Join(root, host.Loader), "")
	src, script := filepath.Join(dir, "libc.c"), filepath.Join(dir, "libc.map")
	writeFile(t, src, "int gnu_get_libc_version_stub(void) { return 0; }\nconst char banner[] = \"GNU C Library (test) stable release version 2.17.\";\n")
	writeFile(t, script, "GLIBC_2.2.5 { global: gnu_get_libc_version_stub; banner; local: *; };\nGLIBC_2.17 { } GLIBC_2.2.5;\n")
	libc := filepath.Join(root, host.Libs[0].Path)
	if err := os.MkdirAll(filepath.Dir(libc), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-nostdlib", "-Wl,--version-script="+script, "-Wl,-soname,libc.so.6", "-o", libc, src).CombinedOutput(); err != nil {
		t.Skipf("gcc could not make the library: %v\n%s", err, out)
	}
	facts, err := Worker(root, bin, noEnv)
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("err %v (facts %s), want a Problem", err, facts)
	}
	for _, w := range []string{"which the image's " + host.Libs[0].Path + " does not define", "GLIBC_2.", "(it is glibc 2.17)"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
	// LD_LIBRARY_PATH is searched first: a good libc there passes.
	good := filepath.Join(root, "opt", "lib")
	data, err := os.ReadFile(host.Libs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(good, "libc.so.6"), string(data))
	if _, err := Worker(root, bin, func(k string) string {
		if k == "LD_LIBRARY_PATH" {
			return "/opt/lib"
		}
		return ""
	}); err != nil {
		t.Errorf("with this machine's libc.so.6 on LD_LIBRARY_PATH: %v", err)
	}
}

// TestWorkerBullseye: this machine's program in the Debian bullseye root
// (glibc 2.31), when it asks for a newer glibc, as a worker-agent built
// against a newer glibc would.
func TestWorkerBullseye(t *testing.T) {
	bin, _ := dynamicBinary(t)
	root := "/var/cache/podmpi/bullseye-rootfs"
	if v := os.Getenv("PODMPI_BULLSEYE_ROOTFS"); v != "" {
		root = v
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "debian_version")); err != nil {
		t.Skip("no bullseye root (sudo scripts/bullseye-rootfs.sh)")
	}
	facts, err := Worker(root, bin, noEnv)
	if facts.Glibc != "2.31" {
		t.Errorf("bullseye's glibc read as %q (facts %s)", facts.Glibc, facts)
	}
	var p *Problem
	if err != nil && (!errors.As(err, &p) || !strings.Contains(err.Error(), "(it is glibc 2.31)")) {
		t.Errorf("err %v", err)
	}
	t.Logf("%s in bullseye: %v", bin, err)
}

// TestWorkerStatic: a static binary has nothing to check.
func TestWorkerStatic(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Skip("the test binary is dynamic (cgo)")
		}
	}
	if _, err := Worker(t.TempDir(), exe, noEnv); err != nil {
		t.Errorf("static binary: %v", err)
	}
}

func TestWorkerNotELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "worker-agent")
	writeFile(t, p, "#!/bin/sh\n")
	_, err := Worker("/", p, noEnv)
	var pr *Problem
	if err == nil || errors.As(err, &pr) || !strings.Contains(err.Error(), "reading "+p) {
		t.Errorf("err %v, want a read error naming %s", err, p)
	}
}

// FuzzWorker: any bytes as the binary or as the image's libc.so.6 give
// facts and an error, never a panic.
func FuzzWorker(f *testing.F) {
	if b, err := os.ReadFile("/bin/true"); err == nil && len(b) < 1<<20 {
		f.Add(b, []byte("GNU C Library (x) stable release version 2.31."))
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"), []byte{})
	f.Fuzz(func(t *testing.T, bin, libc []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "bin")
		writeFile(t, p, string(bin))
		writeFile(t, filepath.Join(dir, "root", "lib64", "libc.so.6"), string(libc))
		_, _ = Worker(filepath.Join(dir, "root"), p, noEnv)
		_ = glibcVersion(filepath.Join(dir, "root", "lib64", "libc.so.6"), []string{string(libc)})
	})
}

func writeFile(t testing.TB, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestExtendPath: an MPI the pod spec's PATH does not name, in a known
// folder or under a variable of the image, is appended; nothing is when
// PATH finds one (podmpi's own mpirun skipped), or when none is there.
func TestExtendPath(t *testing.T) {
	dir := t.TempDir()
	podmpi := filepath.Join(dir, "opt/podmpi/bin")
	venv := filepath.Join(dir, "venv")
	writeFile(t, filepath.Join(podmpi, "mpirun"), "#!/bin/sh\n")
	writeFile(t, filepath.Join(venv, "bin", "mpiexec"), "#!/bin/sh\n")
	writeFile(t, filepath.Join(venv, "bin", "hydra_pmi_proxy"), "#!/bin/sh\n")
	skipPodmpi := func(p string) bool { return filepath.Dir(p) == podmpi }
	env := func(k string) string {
		if k == "VIRTUAL_ENV" {
			return venv
		}
		return ""
	}
	launchers := []string{"mpirun", "mpiexec", "mpiexec.hydra"}
	sys := filepath.Join(dir, "usr/bin") // the system's folders, without an MPI
	if err := os.MkdirAll(sys, 0o755); err != nil {
		t.Fatal(err)
	}
	base := podmpi + ":" + sys

	got, added := ExtendPath(base, env, launchers, skipPodmpi)
	if want := base + ":" + venv + "/bin"; got != want || len(added) != 1 {
		t.Errorf("ExtendPath = %q %v, want %q", got, added, want)
	}
	// The worker's daemons, the same way.
	if got, _ := ExtendPath(sys, env, []string{"orted", "prted", "hydra_pmi_proxy"}, nil); got != sys+":"+venv+"/bin" {
		t.Errorf("daemons: %q", got)
	}
	// Found on PATH already: PATH stands.
	if got, added := ExtendPath(base+":"+venv+"/bin", env, launchers, skipPodmpi); got != base+":"+venv+"/bin" || added != nil {
		t.Errorf("found already: %q %v", got, added)
	}
	// podmpi's own mpirun is the only one and no MPI elsewhere: unchanged.
	if got, added := ExtendPath(base, func(string) string { return "" }, []string{"mpirun"}, skipPodmpi); got != base || added != nil {
		t.Errorf("nothing to add: %q %v", got, added)
	}
	// Not skipping podmpi's own: it counts as found.
	if got, _ := ExtendPath(base, env, launchers, nil); got != base {
		t.Errorf("without skip: %q", got)
	}
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"2.3.3", "2.28", true},
		{"2.28", "2.3.3", false},
		{"2.28", "2.34", true},
		{"2.34", "2.28", false},
		{"2.28", "2.28", false},
		{"2.2.5", "2.3", true},
	} {
		if got := VersionLess(tc.a, tc.b); got != tc.want {
			t.Errorf("VersionLess(%s, %s) = %t, want %t", tc.a, tc.b, got, tc.want)
		}
	}
	if got := Newest([]string{"2.2.5", "2.3.3", "2.17", "2.3.2"}); got != "2.17" {
		t.Errorf("newest = %s, want 2.17", got)
	}
}
