package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as a tiny network helper run inside pods (pods share
// the filesystem, so the binary is reachable from every pod):
//
//	HARNESS_HELPER=listen HARNESS_PORTS=7001,7002   accept, write "hello\n", close; print "ready"
//	HARNESS_HELPER=dial HARNESS_ADDR=ip:port HARNESS_TIMEOUT=1s
//	    prints "ok hello" (exit 0), "timeout" (exit 3) or "error <msg>" (exit 4)
//	HARNESS_HELPER=resolve HARNESS_NAME=name HARNESS_TIMEOUT=1s
//	    looks name up with Go's resolver (the pod's resolv.conf) and prints
//	    "ok <addrs>" (exit 0), "timeout" (exit 3) or "error <msg>" (exit 4)
func TestMain(m *testing.M) {
	switch os.Getenv("HARNESS_HELPER") {
	case "":
		os.Exit(m.Run())
	case "listen":
		os.Exit(helperListen())
	case "dial":
		os.Exit(helperDial())
	case "resolve":
		os.Exit(helperResolve())
	default:
		fmt.Fprintln(os.Stderr, "unknown HARNESS_HELPER", os.Getenv("HARNESS_HELPER"))
		os.Exit(2)
	}
}

func helperListen() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	for _, p := range strings.Split(os.Getenv("HARNESS_PORTS"), ",") {
		ln, err := net.Listen("tcp4", "0.0.0.0:"+p)
		if err != nil {
			fmt.Println("listen error:", err)
			return 1
		}
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = conn.Write([]byte("hello\n"))
				_ = conn.Close()
			}
		}()
	}
	fmt.Println("ready")
	select {
	case <-sig:
	case <-time.After(2 * time.Minute): // bounded even if nobody stops it
	}
	return 0
}

func helperDial() int {
	d, err := time.ParseDuration(os.Getenv("HARNESS_TIMEOUT"))
	if err != nil {
		d = time.Second
	}
	conn, err := net.DialTimeout("tcp4", os.Getenv("HARNESS_ADDR"), d)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			fmt.Println("timeout")
			return 3
		}
		fmt.Println("error", err)
		return 4
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 16)
	n, _ := conn.Read(buf)
	fmt.Println("ok", strings.TrimSpace(string(buf[:n])))
	return 0
}

func helperResolve() int {
	d, err := time.ParseDuration(os.Getenv("HARNESS_TIMEOUT"))
	if err != nil {
		d = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r := &net.Resolver{PreferGo: true}
	addrs, err := r.LookupHost(ctx, os.Getenv("HARNESS_NAME"))
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsTimeout {
			fmt.Println("timeout")
			return 3
		}
		fmt.Println("error", err)
		return 4
	}
	fmt.Println("ok", strings.Join(addrs, ","))
	return 0
}
