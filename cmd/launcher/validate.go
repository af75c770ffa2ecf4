package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/podmpi/podmpi/agent/cli"
	"github.com/podmpi/podmpi/agent/launcher/slots"
	"github.com/podmpi/podmpi/hostfile"
	"github.com/podmpi/podmpi/mpi"
)

// Upper bounds of the count flags: far above any real job, low enough that
// a typo (an extra digit, a negative number read as unsigned) is caught
// before it sizes a worker pool or a host list.
const (
	maxWorkers  = 100000
	maxParallel = 4096
)

// validate checks every flag's range once flags and environment twins are
// applied, before anything starts: a value out of range is a usage error
// (exit 64) naming the flag, its twin and the valid range, never a silent
// default.
func (o *options) validate() error {
	var errs []string
	bad := func(flag, got, want string) {
		errs = append(errs, fmt.Sprintf("--%s (or %s) is %s: want %s", flag, cli.EnvName(flag), got, want))
	}
	intIn := func(flag string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(flag, strconv.Itoa(v), fmt.Sprintf("an integer in %d..%d", lo, hi))
		}
	}
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			bad(flag, d.String(), "a duration > 0, e.g. 30s or 5m")
		}
	}
	intIn("workers-expected", o.expected, 0, maxWorkers)
	intIn("discovery.default-slots", o.defaultSlots, 1, hostfile.MaxSlots)
	positive("discovery.timeout", o.discoveryTimeout)
	if n, err := slots.ParseMode(o.slots); err != nil {
		bad("slots", strconv.Quote(o.slots), fmt.Sprintf(`"auto" or an integer in 1..%d`, hostfile.MaxSlots))
	} else if n == 0 {
		o.slots = "auto" // "", "AUTO", " auto " mean auto; the rest of the code compares with "auto"
	}
	intIn("worker.web-port", o.webPort, 1, 65535)
	if _, _, err := mpi.ParseImplementation(o.impl); err != nil {
		bad("mpi.implementation", strconv.Quote(o.impl), "auto, openmpi, openmpi4, openmpi5, mpich or intelmpi")
	}
	intIn("ssh.port", o.sshPort, 1, 65535)
	positive("probe.timeout", o.probeTimeout)
	intIn("probe.parallel", o.probePar, 1, maxParallel)
	intIn("probe.ssh-sample", o.probeSample, 0, maxWorkers)
	if strings.TrimSpace(o.output) == "" {
		bad("hostfile.output", `""`, "the path of the hostfile to write")
	}
	if o.mpirunTimeout < 0 {
		bad("mpirun.timeout", o.mpirunTimeout.String(), "a duration >= 0 (0: no limit)")
	}
	positive("mpirun.kill-grace", o.killGrace)
	if o.webAddr != "" {
		if err := checkListenAddress(o.webAddr); err != nil {
			bad("web.listen-address", strconv.Quote(o.webAddr), "host:port with a port in 0..65535, e.g. :9022, or empty to turn it off ("+err.Error()+")")
		}
	}
	if o.pushURL != "" {
		// The URL may carry credentials: it is not quoted back.
		if u, err := url.Parse(o.pushURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("metrics.push-url", "not an http(s) URL", "http://host:port of a Pushgateway, or empty")
		}
	}
	if len(errs) > 0 {
		return usageError{fmt.Errorf("%s", strings.Join(errs, "\nlauncher: "))}
	}
	return nil
}

// checkListenAddress accepts what net.Listen("tcp", addr) accepts for a
// numeric or named port.
func checkListenAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("port %d out of range", n)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("unknown port %q", port)
	}
	return nil
}
