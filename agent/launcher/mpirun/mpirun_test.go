package mpirun

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podmpi/podmpi/mpi"
)

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDetectFakePrograms(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	ompi5 := writeScript(t, dir, "mpirun", `echo "mpirun (Open MPI) 5.0.7"; echo; echo "Report bugs"`)
	if impl, v, err := Detect(ctx, ompi5); err != nil || impl != mpi.OpenMPI5 || v != "5.0.7" {
		t.Errorf("Detect(ompi5 fake) = %q, %q, %v", impl, v, err)
	}

	// Intel's mpirun answers only -V in this fake; --version is an error.
	intel := writeScript(t, dir, "intel-mpirun", `if [ "$1" = "-V" ]; then echo "Intel(R) MPI Library for Linux* OS, Version 2021.13 Build 20240701 (id: 8f9b6da)"; exit 0; fi; echo "unknown option $1" >&2; exit 1`)
	if impl, v, err := Detect(ctx, intel); err != nil || impl != mpi.IntelMPI || v != "2021.13" {
		t.Errorf("Detect(intel fake) = %q, %q, %v", impl, v, err)
	}

	// Unrecognised output, but the name says mpi.MPICH.
	hydra := writeScript(t, dir, "mpiexec.hydra", `echo "something else"; exit 0`)
	if impl, v, err := Detect(ctx, hydra); err != nil || impl != mpi.MPICH || v != "" {
		t.Errorf("Detect(name hint) = %q, %q, %v", impl, v, err)
	}

	// Unrecognised output and an uninformative name: a helpful error.
	junk := writeScript(t, dir, "mpirun-junk", `echo "GNU bash, version 5"; exit 0`)
	if _, _, err := Detect(ctx, junk); err == nil || !strings.Contains(err.Error(), "--mpi.implementation") {
		t.Errorf("Detect(junk) err = %v; want a hint naming --mpi.implementation", err)
	}

	if _, _, err := Detect(ctx, "podmpi-no-such-mpirun"); err == nil || !strings.Contains(err.Error(), "not on PATH") {
		t.Errorf("Detect(missing) err = %v", err)
	}

	// A hanging program is bounded by ctx (and DetectTimeout); its
	// background child holding the pipe does not block Detect either.
	hang := writeScript(t, dir, "mpirun-hang", "sleep 30 & sleep 30\n")
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, _, err := Detect(cctx, hang); err == nil {
		t.Error("Detect(hang) succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Detect(hang) took %s", d)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, dir, "mpirun", `echo "mpirun (Open MPI) 5.0.7"`)
	t.Setenv("PATH", dir+":/usr/bin:/bin")
	ctx := context.Background()

	if impl, _, err := Resolve(ctx, "mpich", "mpirun"); err != nil || impl != mpi.MPICH {
		t.Errorf("explicit: %q %v", impl, err)
	}
	if impl, v, err := Resolve(ctx, "auto", "mpirun"); err != nil || impl != mpi.OpenMPI5 || v != "5.0.7" {
		t.Errorf("auto: %q %q %v", impl, v, err)
	}
	// The user's command is bash -c "mpirun ...": mpirun from PATH is asked.
	if impl, _, err := Resolve(ctx, "auto", "bash"); err != nil || impl != mpi.OpenMPI5 {
		t.Errorf("auto via bash: %q %v", impl, err)
	}
	if impl, _, err := Resolve(ctx, "openmpi", "mpirun"); err != nil || impl != mpi.OpenMPI5 {
		t.Errorf("openmpi refined: %q %v", impl, err)
	}
	writeScript(t, dir, "mpirun", `echo "HYDRA build details:"; echo " Version: 4.0.2"`)
	if impl, _, err := Resolve(ctx, "openmpi", "mpirun"); err != nil || impl != mpi.OpenMPI4 {
		t.Errorf("openmpi with a Hydra mpirun: %q %v; want mpi.OpenMPI4 (the user said Open MPI)", impl, err)
	}
	if _, _, err := Resolve(ctx, "bogus", "mpirun"); err == nil {
		t.Error("bogus spec accepted")
	}
	t.Setenv("PATH", t.TempDir())
	if _, _, err := Resolve(ctx, "auto", "mpirun"); err == nil {
		t.Error("auto without mpirun succeeded")
	}
}

// TestDetectRealMPI runs the MPIs installed on this machine (Debian's
// openmpi-bin 4.1.4 and mpich 4.0.2) when present.
func TestDetectRealMPI(t *testing.T) {
	for _, c := range []struct {
		prog string
		impl mpi.Implementation
	}{
		{"mpirun.openmpi", mpi.OpenMPI4},
		{"mpiexec.hydra", mpi.MPICH},
	} {
		t.Run(c.prog, func(t *testing.T) {
			if _, err := exec.LookPath(c.prog); err != nil {
				t.Skipf("%s not installed", c.prog)
			}
			impl, v, err := Detect(context.Background(), c.prog)
			if err != nil || impl != c.impl || v == "" {
				t.Errorf("Detect(%s) = %q, %q, %v; want %q with a version", c.prog, impl, v, err, c.impl)
			}
			t.Logf("%s: %s %s", c.prog, impl, v)
		})
	}
}

// TestInstalledHint: the daemons beside the program, after its symlinks,
// name its MPI; none, or those of two MPIs, name nothing.
func TestInstalledHint(t *testing.T) {
	dir, links := t.TempDir(), t.TempDir()
	prog := writeScript(t, dir, "orterun", "")
	writeScript(t, dir, "orted", "")
	alt := filepath.Join(links, "mpirun")
	if err := os.Symlink(prog, alt); err != nil {
		t.Fatal(err)
	}
	if impl, ok := InstalledHint(alt); !ok || impl != mpi.OpenMPI4 {
		t.Errorf("through a symlink: %q, %t", impl, ok)
	}
	if err := os.WriteFile(filepath.Join(dir, "hydra_pmi_proxy"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if impl, ok := InstalledHint(prog); !ok || impl != mpi.OpenMPI4 {
		t.Errorf("a daemon that is not executable counts: %q, %t", impl, ok)
	}
	if err := os.Chmod(filepath.Join(dir, "hydra_pmi_proxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if impl, ok := InstalledHint(prog); ok {
		t.Errorf("two MPIs' daemons: %q", impl)
	}
	intel := t.TempDir()
	writeScript(t, intel, "hydra_bstrap_proxy", "")
	writeScript(t, intel, "hydra_pmi_proxy", "")
	if impl, ok := InstalledHint(filepath.Join(intel, "mpiexec")); !ok || impl != mpi.IntelMPI {
		t.Errorf("intel: %q, %t", impl, ok)
	}
	if impl, ok := InstalledHint(filepath.Join(t.TempDir(), "mpirun")); ok {
		t.Errorf("nothing beside it: %q", impl)
	}
}
