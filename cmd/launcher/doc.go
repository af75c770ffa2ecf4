// Command launcher is the entrypoint of the launcher pod of an MPI job.
//
//	launcher [flags] -- mpirun [mpirun flags] program [args]
//	mpirun [mpirun flags] program [args]                 (started as mpirun, mpiexec or mpiexec.hydra)
//	launcher rsh [ssh options] [user@]host command...   (mpirun's ssh program; also as ssh or podmpi-rsh)
//	launcher probe                                      (diagnose only)
//	launcher hostfile                                   (print the hostfile it would write)
//	launcher discover-hosts                             (Horovod --host-discovery-script)
//	launcher install <dir>                              (copy podmpi's tree into <dir>: the init container's command)
//	worker-agent [flags]                                (started as worker-agent: check the image, run the real one)
//	launcher version                                    (also --version)
//
// It discovers the workers (flag, hostfile, headless-service DNS or a name
// template), waits until every name and its own resolves, asks each
// worker-agent for its slots (again and again until --probe.timeout while
// it is not up or still counting its GPUs; a worker whose count stays
// unknown fails the job with exit 72 rather than shrink the world), writes
// the hostfile in the format of the MPI
// found on PATH, probes SSH to every worker naming the cause of each failure,
// and then runs the command with the environment that MPI needs: this binary
// as its ssh program (through a "podmpi-rsh" symlink), fully qualified host
// names kept, the hostfile, default slots, the pod interface when there are
// several, and OpenMPI 4 and 5 variable names. Values the user already set are
// kept and reported.
//
// Every flag has an environment twin; the flag wins over the twin:
//
//	--workers                       PODMPI_WORKERS                       worker names, name or name=slots, comma-separated
//	--hostfile                      PODMPI_HOSTFILE                      existing hostfile (default /etc/mpi/hostfile when present)
//	--discovery.service             PODMPI_DISCOVERY_SERVICE             headless Service: SRV _ssh._tcp.<service>, else A records
//	--discovery.template            PODMPI_DISCOVERY_TEMPLATE            name template with {i}, e.g. tj-node-0-{i}.tj
//	--workers-expected              PODMPI_WORKERS_EXPECTED              workers to wait for (service, template)
//	--self                          PODMPI_SELF                          the launcher's own name (default: hostname)
//	--discovery.default-slots       PODMPI_DISCOVERY_DEFAULT_SLOTS       slots when the source gives none (1; with --slots auto only under --slots.allow-default)
//	--discovery.timeout             PODMPI_DISCOVERY_TIMEOUT             DNS wait deadline (5m)
//	--slots                         PODMPI_SLOTS                         auto or N (auto)
//	--slots.allow-default           PODMPI_SLOTS_ALLOW_DEFAULT           run workers whose count stays unknown with --discovery.default-slots instead of exit 72
//	--worker.web-port               PODMPI_WORKER_WEB_PORT               worker-agent HTTP port for /info (9022)
//	--mpi.implementation            PODMPI_MPI_IMPLEMENTATION            auto, openmpi, openmpi4, openmpi5, intelmpi, mpich (auto)
//	--ssh.auth-dir                  PODMPI_SSH_AUTH_DIR                  dir with id_rsa and id_rsa.pub
//	--ssh.port                      PODMPI_SSH_PORT                      worker SSH port (2222)
//	--ssh.user                      PODMPI_SSH_USER                      user name sent to workers
//	--ssh.insecure-ignore-host-key  PODMPI_SSH_INSECURE_IGNORE_HOST_KEY  skip host-key pinning (insecure)
//	--ssh.wait                      PODMPI_SSH_WAIT                      how long mpirun's ssh client waits for a late worker (2m)
//	--ssh.share-connections         PODMPI_SSH_SHARE_CONNECTIONS         serve mpirun's ssh sessions on the launcher's own connection to each worker (true)
//	--probe.timeout                 PODMPI_PROBE_TIMEOUT                 deadline for every worker's slots and SSH probe, from the end of the DNS wait (2m)
//	--probe.parallel                PODMPI_PROBE_PARALLEL                workers probed at once (64)
//	--probe.ssh-sample              PODMPI_PROBE_SSH_SAMPLE              full SSH probe for at most N workers, banner check for the rest (128; 0: all); also the agents asked for slots when the hostfile counts every worker
//	--probe.skip                    PODMPI_PROBE_SKIP                    skip the probe
//	--hostfile.output               PODMPI_HOSTFILE_OUTPUT               where the hostfile is written ($TMPDIR/podmpi/hostfile)
//	--mpirun.timeout                PODMPI_MPIRUN_TIMEOUT                stop mpirun after this long (0: never)
//	--mpirun.kill-grace             PODMPI_MPIRUN_KILL_GRACE             SIGTERM to SIGKILL grace (10s)
//	--mpirun.no-tree-spawn          PODMPI_MPIRUN_NO_TREE_SPAWN          Open MPI: no tree spawn
//	--diagnosis.timeout             PODMPI_DIAGNOSIS_TIMEOUT             after mpirun fails, deadline of asking every worker-agent what happened (5s)
//	--diagnosis.watch-interval      PODMPI_DIAGNOSIS_WATCH_INTERVAL      how often worker-agents are asked while mpirun runs (5s; 0: never)
//	--diagnosis.launch-grace        PODMPI_DIAGNOSIS_LAUNCH_GRACE        time mpirun gets to exit on its own after a daemon failed to start or a worker was gone (5s)
//	--web.listen-address            PODMPI_WEB_LISTEN_ADDRESS            /metrics address (:9022; empty: off)
//	--metrics.push-url              PODMPI_METRICS_PUSH_URL              Pushgateway URL (PUT at the end, grouped by namespace, job_name, pod)
//	--metrics.push-delete-on-success PODMPI_METRICS_PUSH_DELETE_ON_SUCCESS delete the job's group when it succeeded
//	--metrics.namespace             PODMPI_METRICS_NAMESPACE             namespace label of the push (downward API)
//	--metrics.job-name              PODMPI_METRICS_JOB_NAME              job_name label of the push (default: from the host name)
//	--metrics.pod                   PODMPI_METRICS_POD                   pod label of the push (default: the host name)
//	--termination-log               PODMPI_TERMINATION_LOG               termination message file (/dev/termination-log)
//	--kube.api                      PODMPI_KUBE_API                      auto: Events and pod states through the in-cluster API when a token is mounted; off
//	--kube.pod-name                 PODMPI_KUBE_POD_NAME                 the launcher's own pod (downward API metadata.name; default: found by its address)
//	--kube.pod-uid                  PODMPI_KUBE_POD_UID                  the launcher's own pod uid (downward API metadata.uid), for its Events and its instance
//	--log.format                    PODMPI_LOG_FORMAT                    auto, json or text (auto: JSON in Kubernetes)
//	--log.level                     PODMPI_LOG_LEVEL                     debug, info, warn, error
//	--verbose                       PODMPI_VERBOSE                       -v: the debug level, whatever --log.level says (-v is verbose in every podmpi binary)
//
// The rsh client reads PODMPI_SSH_AUTH_DIR, PODMPI_SSH_PORT, PODMPI_SSH_USER,
// PODMPI_SSH_INSECURE_IGNORE_HOST_KEY, PODMPI_SSH_WAIT and
// PODMPI_SSH_CONNECT_TIMEOUT, which the launcher sets for mpirun's children.
//
// The launcher running mpirun declares itself to every worker-agent it
// connects to, and so does each podmpi-rsh of its mpirun on its pod
// (PODMPI_LAUNCHER_INSTANCE): a random instance id, the pod's uid and host
// name, its start. A worker ends the sessions an older instance of the
// job's launcher left running (a launcher lost with its node, then
// restarted by its Job). `launcher probe` and `launcher hostfile`, and a
// launcher started while another runs mpirun in the same container, declare
// nothing. Its requests for /events carry a proof made with a key derived
// from the job's id_rsa, which worker-agents serve from slots of their own.
//
// By default (--ssh.share-connections) the launcher keeps the connection its
// probe made to each worker and serves the sessions of mpirun's podmpi-rsh on
// it, over the unix socket rsh.sock in its private directory (mode 0700; only
// its own UID is served), named for mpirun in PODMPI_RSH_SOCKET.
//
// make build puts the small relay podmpi-rsh (cmd/launcher/podmpi-rsh) next
// to this binary in bin/ (the images' /opt/podmpi/bin), links ssh to it, and
// links mpirun, mpiexec and mpiexec.hydra to this binary (`launcher names`
// lists the links). Started as ssh or podmpi-rsh this binary is the full
// ssh-compatible client, which the relay runs where no launcher shares.
// Started as mpirun, mpiexec or
// mpiexec.hydra (the Kubeflow SDK's command, a plain mpirun in a script) it
// takes its settings from the PODMPI_* twins above (there are no flags to
// give), runs every phase with the workers of the hostfile the command names
// (or the default one), and then the real program of that name found after
// it on PATH, with the command's hostfile replaced by its own. It runs the
// real program at once when the phases already ran (PODMPI_LAUNCHER_PID is
// set in the command's environment), for --version/--help, when the command
// names its hosts with -H, and when nothing names any worker.
//
// Images without podmpi get it from the binaries-only image's init
// container, whose `launcher install <dir>` copies the tree this binary
// belongs to (/opt/podmpi: bin/, libexec/, sbom/) into an emptyDir the
// launcher and worker containers mount at /opt/podmpi: files with their
// modes, links as links, a marker written last (a copy that stopped half
// way is refused, exit 75), into an empty folder or an earlier install
// only. bin/worker-agent is a link to this binary: started as
// worker-agent it reads the ELF headers of the real one
// (libexec/worker-agent, cgo) and of the image's libraries, and exits 75
// naming what is missing (glibc's loader, a musl image, a glibc older than
// the symbol versions it was linked against), what the image has and the
// fix, on stderr and in the termination message; else it runs it with the
// same arguments. Before its phases the launcher checks its own tree, and
// when PATH finds no MPI launcher besides podmpi's (a pod spec's PATH
// replaces the image's) it appends the folders where the image has one
// (I_MPI_ROOT, OPAL_PREFIX, MPI_HOME, VIRTUAL_ENV or CONDA_PREFIX's bin,
// /usr/local/mpi/bin, /opt/hpcx/ompi/bin, ...: imagecheck.ExtendPath), and
// says so.
//
// Every flag's range is checked before anything starts (exit 64 naming the
// flag). A panic ends in exit 71 with the panic in the termination message;
// started as podmpi-rsh (or ssh, or launcher rsh) it first closes every
// descriptor it inherited above stderr, as ssh(1) does.
//
// When mpirun fails after it started, the launcher asks every worker-agent
// for its account of the pod (/events) and names the root cause first in
// its log, its report and the termination message: an OOM kill with the
// host, the rank and the memory limit, a crashed rank or MPI daemon and its
// signal, a GPU error, a worker that is gone, a daemon podmpi-rsh could not
// start (the records it leaves in PODMPI_RSH_FAILURE_DIR), an MPI setting
// of the environment that overrides podmpi's wiring (warned about at
// start); mpirun's exit code still passes through.
//
// Exit codes: mpirun's own once it runs; 128+N when ended by signal N
// before; otherwise one of package agent/exitcode's table, which `launcher
// --help` lists in full (usage, config, discovery timeout, probe failed,
// command not found, mpirun timeout, internal, slots unknown, launch
// failed, worker gone, image unsupported; 255 when rsh could not run the remote command).
package main
