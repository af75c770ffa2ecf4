package sshd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/podmpi/podmpi/agent/signals"
	"github.com/podmpi/podmpi/agent/stream"
)

const maxLoggedCommand = 256

// A command's output is copied to the channel with a buffer of outputSmall
// while it trickles (an MPI daemon's occasional line) and outputLarge once a
// read fills that (a streaming command): fewer reads of the pipe, fewer
// wakeups of the command per byte, several packets per channel write.
const (
	outputSmall = 4 << 10
	outputLarge = 256 << 10
)

// session is one "session" channel (RFC 4254 §6).
type session struct {
	s    *Server
	st   *connState
	id   string
	ch   ssh.Channel
	conn *ssh.ServerConn

	env      []string // client variables that passed EnvAllowed
	envLeft  int      // bytes (envCost) env requests may still add; see envBudget
	envFull  bool     // an env request was refused for the budget (logged once)
	ptyReq   *ptyRequest
	started  bool
	runDone  chan struct{}
	aborted  chan struct{}
	finished atomic.Bool // exit status sent
	replaced atomic.Bool // ended for a newer launcher instance (launcher.go)
	launcher string      // the instance the connection had declared at the command's start, "" when none
	abortOne sync.Once

	mu        sync.Mutex
	cmd       string   // the command line as logged; "" until started
	pgid      int      // 0 until started
	groupGone bool     // the process group is known to be empty
	master    *os.File // pty master, nil without a pty
}

type ptyRequest struct {
	Term          string
	Columns, Rows uint32
	Width, Height uint32
	Modes         string
}

type windowChange struct {
	Columns, Rows uint32
	Width, Height uint32
}

type exitStatusMsg struct{ Status uint32 }

type exitSignalMsg struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}

func (st *connState) acquireSession(max int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sessions >= max {
		return false
	}
	st.sessions++
	return true
}

func (st *connState) releaseSession() {
	st.mu.Lock()
	st.sessions--
	st.mu.Unlock()
}

func (s *Server) registerSession(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	s.sessions[sess] = struct{}{}
	s.sessWG.Add(1)
	return true
}

func (s *Server) unregisterSession(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
	s.sessWG.Done()
}

// handleSessionChannel replaces gliderlabs' DefaultSessionHandler, which
// accepts agent forwarding and every env request.
func (s *Server) handleSessionChannel(_ *gliderssh.Server, conn *ssh.ServerConn, nc ssh.NewChannel, ctx gliderssh.Context) {
	st := stateOf(ctx)
	if st == nil {
		_ = nc.Reject(ssh.ConnectionFailed, "internal error")
		return
	}
	if !st.acquireSession(s.cfg.MaxSessions) {
		s.m.refusedReq("max_sessions")
		s.log.Warn("ssh session refused: too many sessions on one connection", "conn", st.id, "max_sessions", s.cfg.MaxSessions)
		_ = nc.Reject(ssh.ResourceShortage, fmt.Sprintf("too many sessions on this connection (MaxSessions %d)", s.cfg.MaxSessions))
		return
	}
	defer st.releaseSession()
	sess := &session{s: s, st: st, conn: conn, runDone: make(chan struct{}), aborted: make(chan struct{})}
	// The budget leaves room for the variables the server sets itself.
	sess.envLeft = s.envMax - envTermSSHTTY
	for _, kv := range sessionEnv(nil, s.id, s.cfg.Shell, conn.User(), conn.RemoteAddr(), conn.LocalAddr(), nil, nil) {
		sess.envLeft -= envCost(kv)
	}
	if !s.registerSession(sess) {
		_ = nc.Reject(ssh.ResourceShortage, "worker-agent is shutting down")
		return
	}
	defer s.unregisterSession(sess)
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	sess.ch = ch
	sess.id = st.id + "/s" + strconv.FormatUint(s.nextConn.Add(1), 10)
	sess.serveRequests(reqs)
	// The channel is closed (by the client, or the connection is gone).
	if !sess.finished.Load() {
		sess.abort("client closed the channel or disconnected", s.cfg.KillGrace)
	}
	if sess.started {
		<-sess.runDone
	}
	_ = ch.Close()
}

// noPTY reports whether the authenticated key's authorized_keys line takes
// the pseudo-terminal away (restrict or no-pty without a later pty).
func (sess *session) noPTY() bool {
	p := sess.conn.Permissions
	return p == nil || p.Extensions[extNoPTY] != ""
}

func (sess *session) refuse(req *ssh.Request, kind, why string) {
	sess.s.m.refusedReq(kind)
	sess.s.log.Info("ssh request refused", "session", sess.id, "request", truncate(req.Type, 64), "reason", why)
	_ = req.Reply(false, nil)
}

func (sess *session) serveRequests(reqs <-chan *ssh.Request) {
	s := sess.s
	for req := range reqs {
		switch req.Type {
		case "env":
			name, value, ok := parseEnvRequest(req.Payload)
			cost := envCost(name + "=" + value)
			switch {
			case sess.started:
				ok = false
			case ok && (len(sess.env) >= maxEnvPerSession || cost > sess.envLeft):
				ok = false
				if !sess.envFull {
					sess.envFull = true
					s.log.Warn("ssh env requests refused: the session's environment would not fit in execve", "session", sess.id,
						"accepted", len(sess.env), "max_vars", maxEnvPerSession, "bytes_left", max(sess.envLeft, 0), "refused_bytes", cost)
				}
			}
			s.log.Debug("ssh env request", "session", sess.id, "name", truncate(name, 64), "accepted", ok)
			if ok {
				sess.env = append(sess.env, name+"="+value)
				sess.envLeft -= cost
			} else {
				s.m.refusedReq("env")
			}
			_ = req.Reply(ok, nil)
		case "pty-req":
			var p ptyRequest
			switch {
			case !s.cfg.AllowPTY:
				sess.refuse(req, "pty", "PTY not allowed (AllowPTY is off)")
			case sess.noPTY():
				sess.refuse(req, "pty", "the key's authorized_keys line has restrict or no-pty")
			case !ptySupported:
				sess.refuse(req, "pty", "PTY allocation is not implemented on this OS")
			case sess.started || sess.ptyReq != nil:
				sess.refuse(req, "pty", "PTY already requested or command already started")
			case ssh.Unmarshal(req.Payload, &p) != nil:
				sess.refuse(req, "pty", "malformed pty-req")
			default:
				sess.ptyReq = &p
				_ = req.Reply(true, nil)
			}
		case "window-change":
			var w windowChange
			ok := ssh.Unmarshal(req.Payload, &w) == nil
			if ok {
				sess.mu.Lock()
				if sess.master != nil {
					ok = setWinsize(sess.master, w.Rows, w.Columns) == nil
				} else if sess.ptyReq != nil && !sess.started {
					sess.ptyReq.Rows, sess.ptyReq.Columns = w.Rows, w.Columns
				} else {
					ok = false
				}
				sess.mu.Unlock()
			}
			_ = req.Reply(ok, nil)
		case "exec", "shell":
			if sess.started {
				_ = req.Reply(false, nil)
				continue
			}
			var cmdline string
			if req.Type == "exec" {
				var p struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &p); err != nil {
					_ = req.Reply(false, nil)
					continue
				}
				cmdline = p.Command
			}
			sess.started = true
			_ = req.Reply(true, nil)
			sess.start(req.Type == "shell", cmdline)
		case "subsystem":
			var p struct{ Name string }
			_ = ssh.Unmarshal(req.Payload, &p)
			sess.refuse(req, "subsystem", "subsystems (sftp, ...) are not supported: "+truncate(p.Name, 64))
		case "x11-req":
			sess.refuse(req, "x11", "X11 forwarding is not supported")
		case "auth-agent-req@openssh.com":
			sess.refuse(req, "agent", "agent forwarding is not supported")
		case "signal":
			var p struct{ Signal string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil {
				_ = req.Reply(false, nil)
				continue
			}
			sig, ok := signals.ParseSSH(p.Signal)
			if ok {
				ok = sess.signal(sig)
			}
			s.log.Info("ssh signal request", "session", sess.id, "signal", truncate(p.Signal, 32), "delivered", ok)
			_ = req.Reply(ok, nil)
		default:
			sess.refuse(req, "other", "unsupported session request")
		}
	}
}

// signal sends sig to the session's process group while it exists.
func (sess *session) signal(sig syscall.Signal) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.pgid <= 0 || sess.groupGone {
		return false
	}
	return syscall.Kill(-sess.pgid, sig) == nil
}

// abort ends the session because the client went away, a newer launcher
// of the job connected, or the server is shutting down: SIGTERM to the
// process group now, SIGKILL after grace.
func (sess *session) abort(reason string, grace time.Duration) {
	sess.abortOne.Do(func() {
		close(sess.aborted)
		if sess.signal(syscall.SIGTERM) {
			sess.s.log.Info("ssh session aborted; terminating its process group", "session", sess.id,
				"reason", reason, "pgid", sess.pgid, "kill_after", grace)
			time.AfterFunc(grace, func() { sess.signal(syscall.SIGKILL) })
		}
	})
}

// start starts the command; the rest of the session runs in its own goroutine.
func (sess *session) start(shell bool, cmdline string) {
	s := sess.s
	args := []string{s.cfg.Shell, "-c", cmdline}
	if shell {
		args = args[:1]
	}
	cmd := exec.Command(args[0], args[1:]...)
	var extra []string
	if sess.ptyReq != nil && sess.ptyReq.Term != "" {
		extra = append(extra, "TERM="+sess.ptyReq.Term)
	}
	cmd.Dir = s.id.home
	logCmd := truncate(cmdline, maxLoggedCommand)
	if shell {
		logCmd = "(shell)"
	}
	sess.mu.Lock()
	sess.cmd = logCmd
	sess.mu.Unlock()
	rec := s.declared(sess.st)
	if rec != nil {
		sess.launcher = rec.inst.ID
	}
	attrs := []any{"session", sess.id, "user", truncate(sess.conn.User(), 64), "key_fp", sess.conn.Permissions.Extensions[extKeyFP],
		"cmd", logCmd, "pty", sess.ptyReq != nil}

	var childFiles, parentR []*os.File
	var stdinW *os.File
	var err error
	if sess.ptyReq != nil {
		var master, tty *os.File
		master, tty, err = openPTY(sess.ptyReq.Rows, sess.ptyReq.Columns)
		if err == nil {
			extra = append(extra, "SSH_TTY="+tty.Name())
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			cmd.SysProcAttr = ptyProcAttr()
			childFiles = []*os.File{tty}
			parentR = []*os.File{master}
			sess.mu.Lock()
			sess.master = master
			sess.mu.Unlock()
		}
	} else {
		var files [6]*os.File
		for i := 0; i < 6 && err == nil; i += 2 {
			files[i], files[i+1], err = os.Pipe()
		}
		if err == nil {
			cmd.Stdin, stdinW = files[0], files[1]
			parentR = []*os.File{files[2], files[4]}
			growPipe(files[2])
			growPipe(files[4])
			cmd.Stdout, cmd.Stderr = files[3], files[5]
			childFiles = []*os.File{files[0], files[3], files[5]}
		} else {
			for _, f := range files {
				if f != nil {
					f.Close()
				}
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	// The ranks' status endpoint, when the launcher asked for one
	// (rank_endpoint.go): before the client's variables, which win.
	extra = append(extra, s.rankEnv()...)
	cmd.Env = sessionEnv(s.cfg.Env, s.id, s.cfg.Shell, sess.conn.User(), sess.conn.RemoteAddr(), sess.conn.LocalAddr(), extra, sess.env)
	var boostErr error
	if err == nil {
		boostErr, err = startAsOOMVictim(cmd.Start)
	}
	for _, f := range childFiles {
		f.Close()
	}
	if err != nil {
		for _, f := range parentR {
			f.Close()
		}
		if stdinW != nil {
			stdinW.Close()
		}
		code := uint32(126)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			code = 127
		}
		s.m.startFailed()
		s.log.Error("ssh session could not start its command", append(attrs, "shell", s.cfg.Shell, "err", err, "exit_code", code)...)
		defer sess.exited(SessionExit{Session: sess.id, Command: logCmd, ExitCode: int(code)})
		_, _ = fmt.Fprintf(sess.ch.Stderr(), "worker-agent: cannot start %s: %v\r\n", s.cfg.Shell, err)
		_ = sess.ch.CloseWrite()
		_, _ = sess.ch.SendRequest("exit-status", false, ssh.Marshal(exitStatusMsg{code}))
		sess.finished.Store(true)
		_ = sess.ch.Close()
		close(sess.runDone)
		return
	}
	if boostErr != nil {
		s.log.Debug("the session's command keeps worker-agent's OOM score: an OOM kill in the container may take the agent with the rank", append(attrs, "err", boostErr)...)
	}
	sess.mu.Lock()
	sess.pgid = cmd.Process.Pid // Setpgid/Setsid: the group id is the leader's pid
	sess.mu.Unlock()
	s.m.sessionStarted()
	s.sessionStarted(rec, cmdline)
	s.log.Info("ssh session started", append(attrs, "pid", cmd.Process.Pid)...)
	if s.cfg.OnSessionStart != nil {
		s.cfg.OnSessionStart(SessionStart{Session: sess.id, PID: cmd.Process.Pid, Launcher: sess.launcher})
	}
	go sess.wait(cmd, stdinW, parentR, time.Now(), logCmd, attrs)
}

// exited reports the end of the session's command to Config.OnSessionExit.
func (sess *session) exited(e SessionExit) {
	if sess.s.cfg.OnSessionExit == nil {
		return
	}
	select {
	case <-sess.aborted:
		e.Aborted, e.Replaced = true, sess.replaced.Load()
	default:
	}
	e.Launcher = sess.launcher
	sess.s.cfg.OnSessionExit(e)
}

// running reports whether the session's command has started and its exit
// status has not been sent yet.
func (sess *session) running() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.pgid > 0 && !sess.finished.Load()
}

// command is the session's command line as logged; "(not started)" before
// its exec or shell request.
func (sess *session) command() string {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.cmd == "" {
		return "(not started)"
	}
	return sess.cmd
}

// wait streams the session's I/O, waits for the command, sends its exit
// status and cleans up the process group.
func (sess *session) wait(cmd *exec.Cmd, stdinW *os.File, outputs []*os.File, start time.Time, logCmd string, attrs []any) {
	s := sess.s
	defer close(sess.runDone)

	var outWG sync.WaitGroup
	for i, r := range outputs {
		var w io.Writer = sess.ch
		if i == 1 {
			w = sess.ch.Stderr()
		}
		outWG.Add(1)
		go func() {
			defer outWG.Done()
			_ = stream.Copy(w, eioAsEOF{r}, outputSmall, outputLarge)
		}()
	}
	// Client -> command. Ends at the client's EOF or when the channel closes.
	go func() {
		if stdinW != nil {
			_, _ = io.Copy(stdinW, sess.ch)
			stdinW.Close()
			return
		}
		sess.mu.Lock()
		m := sess.master
		sess.mu.Unlock()
		if m != nil {
			_, _ = io.Copy(m, sess.ch)
		}
	}()

	waitErr := cmd.Wait()
	if stdinW != nil {
		stdinW.Close()
	}
	// Drain stdout and stderr to EOF before the exit status. Like OpenSSH, a
	// background job still holding them keeps the session open; an aborted
	// session stops waiting once its group had time to die.
	outDone := make(chan struct{})
	go func() { outWG.Wait(); close(outDone) }()
	select {
	case <-outDone:
	case <-sess.aborted:
		select {
		case <-outDone:
		case <-time.After(s.cfg.KillGrace + 500*time.Millisecond):
			for _, r := range outputs {
				r.Close()
			}
			<-outDone
		}
	}
	for _, r := range outputs {
		r.Close()
	}

	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	dur := time.Since(start)
	_ = sess.ch.CloseWrite()
	var code int
	exit := SessionExit{Session: sess.id, Command: logCmd, PID: cmd.Process.Pid, Duration: dur}
	if ws.Signaled() {
		sig := ws.Signal()
		exit.ExitCode, exit.Signal, exit.CoreDumped = -1, sig, ws.CoreDump()
		_, _ = sess.ch.SendRequest("exit-signal", false, ssh.Marshal(exitSignalMsg{
			Signal: signals.SSHName(sig), CoreDumped: ws.CoreDump(), Error: "", Lang: "",
		}))
		attrs = append(attrs, "signal", signals.Name(sig), "core_dumped", ws.CoreDump())
		code = -1
	} else {
		code = ws.ExitStatus()
		exit.ExitCode = code
		_, _ = sess.ch.SendRequest("exit-status", false, ssh.Marshal(exitStatusMsg{uint32(code)}))
		attrs = append(attrs, "exit_code", code)
	}
	sess.finished.Store(true)
	_ = sess.ch.Close()
	s.m.sessionEnded(dur, exitLabel(code, ws.Signaled()))
	if waitErr != nil && !isExitError(waitErr) {
		attrs = append(attrs, "wait_err", waitErr)
	}
	s.log.Info("ssh session ended", append(attrs, "duration", dur.Round(time.Millisecond))...)
	sess.exited(exit)

	sess.cleanupGroup()
	sess.mu.Lock()
	if sess.master != nil {
		sess.master.Close()
		sess.master = nil
	}
	sess.mu.Unlock()
}

func isExitError(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// cleanupGroup terminates what is left of the session's process group after
// its leader exited (SIGTERM, SIGKILL after KillGrace) and reaps members that
// were re-parented to this process (it is PID 1 in a pod, or a subreaper).
//
// The group id cannot be taken over by an unrelated group while any member
// lives; once it is empty, reuse needs the kernel's cyclic PID allocator to
// wrap around, which the short polling below does not leave time for.
func (sess *session) cleanupGroup() {
	sess.mu.Lock()
	pg := sess.pgid
	sess.mu.Unlock()
	if pg <= 0 {
		return
	}
	empty := func() bool {
		reapGroup(pg)
		if err := syscall.Kill(-pg, 0); errors.Is(err, syscall.ESRCH) {
			sess.mu.Lock()
			sess.groupGone = true
			sess.mu.Unlock()
			return true
		}
		return false
	}
	if empty() {
		return
	}
	sess.s.log.Info("ssh session left processes in its group; terminating them", "session", sess.id, "pgid", pg)
	for _, step := range []struct {
		sig   syscall.Signal
		grace time.Duration
	}{{syscall.SIGTERM, sess.s.cfg.KillGrace}, {syscall.SIGKILL, 2 * time.Second}} {
		sess.signal(step.sig)
		deadline := time.Now().Add(step.grace)
		for time.Now().Before(deadline) {
			if empty() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !empty() {
		sess.s.log.Warn("processes of an ssh session survived SIGKILL (zombies of another parent?)", "session", sess.id, "pgid", pg)
	}
}

// reapGroup collects exited members of process group pg that are children of
// this process. Non-blocking; ECHILD simply ends it.
func reapGroup(pg int) {
	for i := 0; i < 1024; i++ {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pg, &ws, syscall.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return
		}
	}
}

// eioAsEOF turns the EIO a pty master returns once the terminal's last
// holder closed it into a plain EOF.
type eioAsEOF struct{ r io.Reader }

func (e eioAsEOF) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, syscall.EIO) {
		err = io.EOF
	}
	return n, err
}
