// Package layout is podmpi's installed tree, /opt/podmpi in the images
// (make build lays out ./bin and ./libexec the same way):
//
//	bin/launcher        static: the launcher, and every name linked to it
//	bin/podmpi-rsh      static: the ssh-compatible relay
//	bin/worker-agent    -> launcher: checks that the image can run the real
//	                    worker-agent, then runs it
//	bin/ssh             -> podmpi-rsh
//	bin/mpirun, mpiexec, mpiexec.hydra -> launcher
//	libexec/worker-agent  the real worker-agent (cgo: NVML through dlopen),
//	                    which needs glibc
//	sbom/, LICENSE, NOTICE
//
// The tree is found from the running executable (bin/launcher), so that
// it works wherever it was copied: the binaries-only image's init
// container copies it into an emptyDir with `launcher install <dir>`
// (Install), for images that do not carry podmpi.
package layout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The tree's folders and the files this package knows by name.
const (
	BinDir     = "bin"
	LibexecDir = "libexec"
	// WorkerAgent is the worker container's command: bin/worker-agent,
	// a link to the launcher, and libexec/worker-agent, the real one.
	WorkerAgent = "worker-agent"
	// Launcher is the static launcher binary in bin/.
	Launcher = "launcher"
)

// Root is the tree a binary at exe (a path with every symlink resolved,
// as os.Executable gives it) belongs to: the folder above its bin/.
func Root(exe string) (string, error) {
	bin := filepath.Dir(exe)
	if filepath.Base(bin) != BinDir {
		return "", fmt.Errorf("%s is not in a %s/ folder: podmpi's binaries live in <tree>/%s (/opt/podmpi/%s in the images)", exe, BinDir, BinDir, BinDir)
	}
	return filepath.Dir(bin), nil
}

// RunningRoot is Root of this process's executable.
func RunningRoot() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locating this binary: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return Root(exe)
}

// RealWorkerAgent is the real worker-agent of the tree at root.
func RealWorkerAgent(root string) string {
	return filepath.Join(root, LibexecDir, WorkerAgent)
}

// Incomplete says why the tree at root cannot be used ("" when it can): a
// copy that Install began and did not finish (its partial marker is
// there). A tree that was never installed (the images' own /opt/podmpi,
// make build's folder) has no marker at all and is complete.
func Incomplete(root string) string {
	if _, err := os.Lstat(filepath.Join(root, PartialMarker)); err == nil {
		return fmt.Sprintf("%s holds a copy of podmpi that `launcher install` began and did not finish (%s is there, %s is not)",
			root, PartialMarker, Marker)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("%s: %v", filepath.Join(root, PartialMarker), err)
	}
	return ""
}
