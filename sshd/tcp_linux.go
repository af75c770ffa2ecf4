package sshd

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setQuickAck arms TCP_QUICKACK so the kernel ACKs the next segments at once
// instead of delaying the ACK by up to 40 ms. Linux clears the flag again on
// its own, so it is re-armed after every read during the handshake: the
// OpenSSH client sends SERVICE_REQUEST before it sets TCP_NODELAY, and without
// a prompt ACK Nagle holds it until the delayed-ACK timer fires
// (measured on loopback: ~67 ms -> ~10 ms per OpenSSH connection).
func setQuickAck(rc syscall.RawConn) {
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}
