package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/podmpi/podmpi/agent/launcherid"
)

// instanceLockName is the file in the temp dir that the launcher running
// mpirun in a container holds locked (flock) while it runs.
const instanceLockName = "podmpi-launcher.lock"

// declareInstance makes this launcher declare itself to the worker-agents
// as a new instance of the job's launcher (l.instance; see launcherid):
// a worker then ends the sessions an older, lost instance left running
// there. It returns what releases the claim.
//
// It declares nothing when another launcher of this container is running
// mpirun still (it holds instanceLockName locked): a launcher started by
// hand next to the job's, with kubectl exec, is a newer instance too, and
// would end the running job's daemons on every worker it reaches. Its
// connections are then like any other client's. A restarted container's
// launcher finds the lock free: the lock dies with the process that held
// it, even in a temp dir that outlives the container (an emptyDir). When
// the lock cannot be taken at all (a read-only temp dir), it declares: the
// job's own launcher is the one that runs at the container's start.
func (l *Launcher) declareInstance() (release func()) {
	dir := l.cfg.TempDir
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, instanceLockName)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			l.log.Info("another launcher runs mpirun in this container (it holds the lock file): this one does not declare "+
				"itself to the worker-agents as the job's launcher, so it cannot end that launcher's sessions", "lock", path)
			return func() {}
		}
	}
	if err != nil {
		l.log.Debug("cannot tell whether another launcher runs in this container; declaring this one to the worker-agents",
			"lock", path, "err", err)
	}
	host, _ := os.Hostname()
	l.instance = launcherid.New(l.cfg.KubePodUID, host, l.start)
	l.log.Info("this launcher declares itself to the worker-agents; each ends what an older instance of the job's "+
		"launcher left running there", "instance", l.instance.String())
	return func() {
		if f != nil {
			f.Close()
		}
	}
}
