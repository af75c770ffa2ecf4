// Command worker-agent is the entrypoint of the worker pods of an MPI job
// (Kubeflow Trainer v2, mpi-operator). It replaces OpenSSH's sshd: it serves
// SSH for mpirun's remote daemons (orted, prted, hydra_pmi_proxy,
// hydra_bstrap_proxy) as any UID, including a random OpenShift UID with no
// /etc/passwd entry and no capabilities, authenticating clients with the
// job's mounted authorized_keys and presenting the job's id_rsa as its host
// key. It also serves HTTP:
//
//	/healthz  liveness: 200 while the process runs
//	/readyz   200 only when the SSH listener accepts, the keys are loaded and
//	          GPU detection is done; else 503 with the reasons
//	/info     JSON: hostname, slots, GPUs, MPI daemons on PATH, uid/gid,
//	          auth dir, host key and derived host key fingerprints, SSH
//	          address, version
//	/events   JSON: the account of the pod, the events recorded after
//	          ?after=<seq> and at or after ?since=<RFC 3339 time>: OOM
//	          kills (with the memory limit and usage), rank exits, failed
//	          sessions (their program, not its arguments), GPU Xid and
//	          double-bit ECC errors, launchers replaced; the launcher
//	          reads it while mpirun runs and after a failed job (package
//	          agent/worker/account). 4 requests at once, 4 more for the
//	          job's launcher (requests proven with a key derived from the
//	          job's id_rsa), each answer written within 5s
//	/metrics  Prometheus: podmpi_worker_ssh_* (connections, auth failures by
//	          reason, active sessions, session durations, exit codes),
//	          podmpi_worker_gpus, podmpi_worker_slots, podmpi_worker_ready,
//	          podmpi_worker_build_info, podmpi_worker_oom_kills_total,
//	          podmpi_worker_memory_{limit,usage}_bytes,
//	          podmpi_worker_{session,rank}_exits_total{reason},
//	          podmpi_worker_gpu_errors_total{kind}, go_* and process_*
//
// Usage:
//
//	worker-agent [flags]         serve SSH and HTTP until SIGTERM/SIGINT
//	worker-agent version         print the version (also --version)
//	worker-agent rsh ARGS...     the ssh-compatible client (package agent/rsh);
//	                             also run when invoked as podmpi-rsh
//
// # Flags and environment variables
//
// Every flag has an environment twin; a flag on the command line wins over
// its twin, which wins over the default.
//
//	--ssh.listen-address      PODMPI_SSH_LISTEN_ADDRESS      SSH listen address (default :2222)
//	--ssh.auth-dir            PODMPI_SSH_AUTH_DIR            directory with authorized_keys, id_rsa, id_rsa.pub
//	                                                         (default: first of $HOME/.ssh, /home/mpiuser/.ssh,
//	                                                         /root/.ssh that holds authorized_keys)
//	--ssh.state-dir           PODMPI_SSH_STATE_DIR           writable dir for a generated host key when there is no
//	                                                         id_rsa (default $PODMPI_STATE_DIR, else
//	                                                         $TMPDIR/podmpi-state, /tmp/podmpi-state without TMPDIR)
//	--ssh.shell               PODMPI_SSH_SHELL               shell running each command as SHELL -c COMMAND (default /bin/sh)
//	--ssh.allow-pty           PODMPI_SSH_ALLOW_PTY           grant pseudo-terminals (default false)
//	--ssh.login-grace-time    PODMPI_SSH_LOGIN_GRACE_TIME    accept-to-auth deadline (default 30s)
//	--ssh.max-startups        PODMPI_SSH_MAX_STARTUPS        unauthenticated connections as BEGIN:RATE:FULL: from BEGIN on,
//	                                                         RATE% of new ones refused, rising to all at FULL (default 20:30:100)
//	--ssh.per-source-max-startups PODMPI_SSH_PER_SOURCE_MAX_STARTUPS unauthenticated connections from one IP (default 10)
//	--ssh.max-auth-tries      PODMPI_SSH_MAX_AUTH_TRIES      failed auth attempts per connection (default 6)
//	--ssh.max-sessions        PODMPI_SSH_MAX_SESSIONS        session channels per connection (default 10)
//	--ssh.keepalive-interval  PODMPI_SSH_KEEPALIVE_INTERVAL  keepalive probe interval; after 3 unanswered probes the client
//	                                                         is dropped (default 0: no probes, as OpenSSH's
//	                                                         ClientAliveInterval 0)
//	--ssh.kill-grace          PODMPI_SSH_KILL_GRACE          SIGTERM-to-SIGKILL delay for an abandoned session (default 1s)
//	--web.listen-address      PODMPI_WEB_LISTEN_ADDRESS      HTTP listen address, empty disables (default :9022)
//	--web.max-connections     PODMPI_WEB_MAX_CONNECTIONS     HTTP connections open at once; the oldest idle one is
//	                                                         closed for a new one (default 128)
//	--slots                   PODMPI_SLOTS                   auto, gpu, cpu or N (default auto: one per GPU, else 1)
//	--gpu.detect              PODMPI_GPU_DETECT              auto, nvml or none (default auto)
//	--gpu.detect-timeout      PODMPI_GPU_DETECT_TIMEOUT      deadline of GPU detection (default 2m)
//	--account.cgroup-root     PODMPI_ACCOUNT_CGROUP_ROOT     cgroup mount point the account of the pod reads its memory
//	                                                         cgroup below (default /sys/fs/cgroup)
//	--account.interval        PODMPI_ACCOUNT_INTERVAL        how often the account reads the memory cgroup and the
//	                                                         processes below the agent (default 500ms)
//	--shutdown.grace          PODMPI_SHUTDOWN_GRACE          time sessions get after SIGTERM (default 25s, within
//	                                                         the pod's default 30s terminationGracePeriodSeconds)
//	--log.format              PODMPI_LOG_FORMAT              auto (JSON in Kubernetes), json or text (default auto)
//	--log.level               PODMPI_LOG_LEVEL               debug, info, warn or error (default info)
//	--verbose                 PODMPI_VERBOSE                 -v: the debug level, whatever --log.level says (-v is
//	                                                         verbose in every podmpi binary; the version is --version)
//
// PODMPI_STATE_DIR sets the default of --ssh.state-dir. The rsh client reads
// its own variables (PODMPI_SSH_AUTH_DIR, PODMPI_SSH_PORT, ...; see package
// agent/rsh).
//
// Sessions get the agent's own environment, so the PATH that /info uses to
// find the MPI daemons is the PATH the daemons are started with.
//
// The job's SSH Secret is followed while the agent runs: when the kubelet
// updates it (a rotated key), the next connection is served with the new
// host key and checked against the new authorized_keys, and the log says
// "job key rotated" with the old and new fingerprints.
//
// A launcher lost without closing its connections (its node died, its
// network cut) leaves no orphans once the job's launcher starts again: the
// launcher declares its instance on every connection it and its mpirun's
// podmpi-rsh make, and when a newer instance connects the agent ends the
// older one's sessions (SIGTERM, SIGKILL after --ssh.kill-grace), logs "a
// newer launcher of the job connected" at WARN with both instances and
// records a launcher-replaced event in /events. Clients that declare
// nothing (a person's ssh, tree spawn from a worker) are never ended so.
//
// An over-limit connection (--ssh.max-startups, --ssh.per-source-max-startups)
// gets one text line, "worker-agent: too many unauthenticated connections
// ...", and is closed; the launcher's diagnosis names it.
//
// # Lifecycle
//
// On SIGTERM or SIGINT, /readyz turns 503 first, then the SSH server stops
// accepting, running sessions get SIGTERM and are killed when
// --shutdown.grace runs out, HTTP stops, and the agent exits 0.
//
// # Exit codes
//
// A startup failure prints exactly one line on stderr,
//
//	worker-agent: <what>: <cause>; hint: <fix>
//
// and exits with one of (`worker-agent --help` lists them all, from
// package agent/exitcode's table):
//
//	0   stopped by SIGTERM/SIGINT after a graceful shutdown
//	64  bad flag, argument or environment twin
//	65  key or configuration problem: auth dir missing, key file unreadable,
//	    malformed or world-writable, id_rsa and id_rsa.pub mismatch, GPU
//	    detection failure with --gpu.detect=nvml or --slots=gpu
//	70  cannot listen on the SSH or HTTP address (port busy, no such address)
//	71  internal error
package main
