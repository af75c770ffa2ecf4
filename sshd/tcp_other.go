//go:build !linux

package sshd

import "syscall"

// setQuickAck is a no-op: TCP_QUICKACK is Linux-only.
func setQuickAck(syscall.RawConn) {}
