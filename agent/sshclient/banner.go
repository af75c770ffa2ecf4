package sshclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// maxBanner bounds what Banner reads: RFC 4253 §4.2 allows lines before the
// identification string, each at most 255 bytes.
const maxBanner = 8 << 10

// bannerClientID is sent first, as every SSH client does (RFC 4253 §4.2):
// it also makes an HTTP or TLS listener answer at once instead of waiting
// for a request until the timeout.
const bannerClientID = "SSH-2.0-podmpi-probe\r\n"

// Banner makes the cheap part of Dial: resolve, TCP connect, exchange SSH
// identification strings, and close before the key exchange. It finds dns,
// tcp-refused, tcp-timeout and non-SSH listeners (a sidecar's HTTP or TLS
// answer) at a fraction of a handshake's CPU, but proves nothing about host
// keys, authentication or the remote PATH. It returns the server's
// identification string.
func Banner(ctx context.Context, host string, port int, cfg Config) (string, *Failure) {
	if host == "" || port <= 0 || port > 65535 {
		return "", Classify(host, port, PhaseConfig, fmt.Errorf("invalid address %q port %d", host, port))
	}
	addrs, err := resolve(ctx, host, cfg)
	if err != nil {
		return "", Classify(host, port, PhaseDNS, err)
	}
	conn, err := connect(ctx, addrs, port, cfg.connectTimeout())
	if err != nil {
		return "", Classify(host, port, PhaseTCP, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(cfg.handshakeTimeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	pc := &peekConn{Conn: conn}
	fail := func(err error) (string, *Failure) {
		return "", Classify(host, port, PhaseHandshake, &HandshakeError{Received: pc.received(), Err: err})
	}
	if _, err := io.WriteString(conn, bannerClientID); err != nil {
		return fail(err)
	}
	r := bufio.NewReader(io.LimitReader(pc, maxBanner))
	read := 0
	for {
		line, err := r.ReadString('\n')
		read += len(line)
		switch {
		case strings.HasPrefix(line, "SSH-2.0-"), strings.HasPrefix(line, "SSH-1.99-"):
			return strings.TrimRight(line, "\r\n"), nil
		case strings.HasPrefix(line, "SSH-"):
			return fail(fmt.Errorf("unsupported SSH protocol version %q", strings.TrimSpace(line)))
		case read > 0 && read == len(line) && otherProtocol(line):
			return fail(errors.New("the server answered with another protocol"))
		case errors.Is(err, io.EOF) && read >= maxBanner:
			return fail(fmt.Errorf("no SSH identification in the first %d bytes", maxBanner))
		case err != nil:
			return fail(err)
		}
	}
}

// otherProtocol reports a first line that is certainly not one of the
// lines an SSH server may send before its identification: HTTP or TLS.
func otherProtocol(line string) bool {
	return strings.HasPrefix(line, "HTTP/") || line[0] == 0x15 || line[0] == 0x16
}
