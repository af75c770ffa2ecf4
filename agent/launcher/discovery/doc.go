// Package discovery finds the worker pods of an MPI job and waits until every
// one of them resolves in DNS.
//
// # Sources
//
// Resolve turns a Spec into a Plan. Exactly one source is used, the first
// configured one in this order of precedence (Plan.Ignored lists the others so
// the caller can log them):
//
//  1. workers-flag: --workers a,b=4,c: names, each optionally "name=slots".
//  2. hostfile: an existing hostfile in any of the three formats that
//     Kubeflow Trainer v2 ("tj-node-0-0.tj slots=2") and mpi-operator
//     ("pi-worker-0.pi.default.svc slots=1" or "pi-worker-0.pi.default.svc:1")
//     write into /etc/mpi/hostfile; see package hostfile.
//  3. srv / service-a: a headless Service (--discovery.service). Wait looks up
//     the SRV records _ssh._tcp.<service> first; while that name has no SRV
//     records it uses the Service's A records instead, naming each IP through
//     its PTR record. A Service given as an SRV name ("_ssh._tcp.tj") uses SRV
//     only. The hosts are found by Wait, so Plan.Hosts is empty.
//  4. template: a name template with "{i}" (0-based) or "{i+1}" (1-based),
//     expanded for i in 0..Expected-1: "tj-node-0-{i}.tj" for Trainer v2,
//     "pi-worker-{i}.pi.default.svc" for mpi-operator.
//
// Host.Slots is 0 where the source gives no count (a bare --workers name, a
// bare hostfile line, template, SRV and A records): discovery never invents
// a count, so that agent/launcher/slots can tell operator-given counts from
// missing ones.
//
// # Waiting
//
// Wait retries with jittered exponential backoff (200ms, x2, capped at 5s,
// each wait scaled by a random factor in [0.5, 1.5), reset when a new host
// resolves) until every host resolves, including the launcher's own name when
// it is in the list (Trainer v2 runLauncherAsNode, mpi-operator
// runLauncherAsWorker). Lookups run at most WaitOptions.Parallel at a time,
// each under its own timeout, and a host that resolved is not looked up again.
// NXDOMAIN and empty answers mean "not yet"; other DNS errors (server
// failure, timeouts) are retried too and reported in TimeoutError.LastErr.
//
// Every progress line names, per missing name, what its last lookup got
// (Progress.Answers, in package awaited's words: NXDOMAIN, no answer from
// the DNS server 10.96.0.10:53, a DNS error), grouped by answer when many
// are missing. A lookup nothing answered (a timeout, a refused port) is not
// an answer about the name: when the DNS server answers none of a round's
// lookups, the line says so (Progress.DNSSilent) with the likely cause, a
// blocked egress to it; the first such lookup is warned about at once
// (WaitOptions.Warn), before the round ends; and the deadline's hint starts
// with it. None of this shortens the wait: a DNS outage may end.
// Resolvers cache negative answers for up to 30s, so a name can resolve a little
// after its pod appears; the deadline (--discovery.timeout, 5m by default)
// bounds the wait, and the resulting *TimeoutError names the missing hosts and
// the likely causes.
//
// DiscoverNow makes one pass without waiting, for `launcher discover-hosts`
// (Horovod's elastic host discovery script).
package discovery
