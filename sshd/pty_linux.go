package sshd

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ptySupported reports whether this build can allocate pseudo-terminals.
const ptySupported = true

// openPTY allocates a pseudo-terminal pair through /dev/ptmx (what
// posix_openpt/grantpt/unlockpt/ptsname do in libc) and sets its size.
func openPTY(rows, cols uint32) (master, tty *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	var n uint32
	var ioErr error
	ctlErr := controlFile(master, func(fd int) {
		if ioErr = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); ioErr != nil {
			ioErr = fmt.Errorf("unlock pty: %w", ioErr)
			return
		}
		if n, ioErr = unix.IoctlGetUint32(fd, unix.TIOCGPTN); ioErr != nil {
			ioErr = fmt.Errorf("get pty number: %w", ioErr)
		}
	})
	if err = firstErr(ctlErr, ioErr); err != nil {
		master.Close()
		return nil, nil, err
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	tty, err = os.OpenFile(name, os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	if err := setWinsize(master, rows, cols); err != nil {
		master.Close()
		tty.Close()
		return nil, nil, err
	}
	return master, tty, nil
}

// setWinsize sets the terminal size (TIOCSWINSZ); 0 means "unknown" and is
// replaced by the classic 24x80.
func setWinsize(master *os.File, rows, cols uint32) error {
	if rows == 0 || rows > 0xffff {
		rows = 24
	}
	if cols == 0 || cols > 0xffff {
		cols = 80
	}
	var ioErr error
	ctlErr := controlFile(master, func(fd int) {
		ioErr = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if err := firstErr(ctlErr, ioErr); err != nil {
		return fmt.Errorf("set pty size %dx%d: %w", rows, cols, err)
	}
	return nil
}

// controlFile runs fn on f's descriptor without switching it to blocking
// mode (f.Fd() would).
func controlFile(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// ptyProcAttr makes the child a session leader with tty as its controlling
// terminal (its stdin, fd 0).
func ptyProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}
