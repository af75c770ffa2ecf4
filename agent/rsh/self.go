package rsh

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/podmpi/podmpi/agent/sshclient"
)

// The launcher's own pod runs no worker-agent. An MPI that takes the
// launcher's own hostfile entry for another host (Open MPI 5 with
// keep_fqdn_hostnames=true, Hydra with an entry that is not the host name)
// asks podmpi-rsh for a daemon there, and waiting for a worker-agent to
// start would only end after PODMPI_SSH_WAIT with a cause that names
// nobody. The client on the launcher's pod (the one that declares the
// launcher's instance) knows which pod it runs in: a connection refused by
// one of this pod's own addresses ends at once, naming it.

// interfaceAddrs lists this pod's addresses; tests replace it.
var interfaceAddrs = net.InterfaceAddrs

// refusedHere returns the address of this pod that refused f's
// connection, or nil when f is no refused connect or the address is
// another host's.
func refusedHere(f *sshclient.Failure) net.IP {
	if f == nil || f.Phase != sshclient.PhaseTCPRefused || !errors.Is(f.Cause, syscall.ECONNREFUSED) {
		return nil
	}
	var oe *net.OpError
	if !errors.As(f.Cause, &oe) {
		return nil
	}
	ta, ok := oe.Addr.(*net.TCPAddr)
	if !ok || ta.IP == nil {
		return nil
	}
	if ta.IP.IsLoopback() {
		return ta.IP
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ta.IP) {
			return ta.IP
		}
	}
	return nil
}

// launcherPodFailure is the permanent failure of a connection that the
// launcher's own pod (host, its host name) refused at ip.
func launcherPodFailure(f *sshclient.Failure, ip net.IP, host string) *sshclient.Failure {
	return &sshclient.Failure{Host: f.Host, Port: f.Port, Phase: sshclient.PhaseNotWorkerAgent,
		Cause: fmt.Errorf("connection refused by %s, an address of this pod %s: %s is the launcher's own pod, where no worker-agent listens, and mpirun asked for an MPI daemon there over ssh",
			ip, host, f.Host),
		Hint: "the MPI took the launcher's own hostfile entry for another host: under Open MPI 5 unset PRTE_MCA_prte_keep_fqdn_hostnames=true " +
			"(podmpi sets false, as Trainer v2.4 does); with a hostfile of your own, write the launcher's entry as its host name (" + host + "); " +
			"the hostfile the launcher writes does both"}
}
