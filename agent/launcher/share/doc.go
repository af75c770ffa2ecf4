// Package share is the launcher's side of connection sharing: what lets
// every podmpi-rsh that mpirun starts run its remote command on the SSH
// connection the launcher already holds to that worker, as OpenSSH's
// ControlMaster shares one connection among its clients.
//
// Server listens on a unix socket in the launcher's private directory and
// takes each relay's request (package agent/rsh/relay: its command line, the
// variables the client reads, and its stdin, stdout and stderr as
// descriptors); it runs the client's whole logic for it (rsh.Served) and
// sends back the exit status. Pool holds the connections: the probe's,
// handed over when it ends, and those dialed on first use, each serving
// many sessions, each session in a channel of its own. The relays' streams
// are held so that a session cut short never leaves a copier blocked on
// them (stdio).
//
// Only the launcher imports it: a worker's client (Open MPI's tree spawn)
// has no launcher to share with and connects on its own (package rsh).
package share
