//go:build !linux

package sshd

import (
	"errors"
	"os"
	"syscall"
)

// ptySupported reports whether this build can allocate pseudo-terminals.
const ptySupported = false

func openPTY(rows, cols uint32) (master, tty *os.File, err error) {
	return nil, nil, errors.New("pty allocation is implemented for Linux only")
}

func setWinsize(master *os.File, rows, cols uint32) error {
	return errors.New("pty allocation is implemented for Linux only")
}

func ptyProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
