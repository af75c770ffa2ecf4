//go:build !linux

package mpirun

import (
	"errors"
	"log/slog"
)

// The launcher runs on Linux; elsewhere Run supervises mpirun without the
// /proc tree walk and without reaping orphans.

type procID struct{ pid int }

func (procID) alive() bool { return false }

func descendants(int) []procID { return nil }

// SetSubreaper is only supported on Linux.
func SetSubreaper() error { return errors.New("prctl(PR_SET_CHILD_SUBREAPER) is Linux-only") }

func isSubreaper() bool { return false }

type reaper struct{}

func startReaper(int, *slog.Logger) *reaper { return &reaper{} }

func (*reaper) stop() int { return 0 }
