package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// status is a chaosnode status line (see chaosnode.Status).
type status struct {
	Time      time.Time `json:"time"`
	Node      string    `json:"node"`
	Share     int       `json:"share"`
	LGlobal   int       `json:"l_global"`
	Inflight  int       `json:"inflight"`
	Fenced    bool      `json:"fenced"`
	Status    string    `json:"status"`
	Joined    bool      `json:"joined"`
	Outage    bool      `json:"outage"`
	Error     string    `json:"error"`
	Stopped   bool      `json:"stopped"`
	StopError string    `json:"stop_error"`
}

// healthy reports whether the node is joined, not fenced, reaching the
// database and has a share.
func (s status) healthy() bool { return s.Joined && !s.Fenced && !s.Outage && s.Share > 0 }

// nodeArgs are the chaosnode flags every node gets, besides -dsn and -id.
type nodeArgs struct {
	bin, key, provider, logDir string
	flags                      []string
}

// nodeProc is one running chaosnode process.
type nodeProc struct {
	id     string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and its output is read
	err    error         // the process's exit, set before exited is closed

	mu    sync.Mutex
	last  status
	final *status
}

var logSeq struct {
	sync.Mutex
	n int
}

// startProc starts a chaosnode with node id id connecting through dsn.
func startProc(a nodeArgs, id, dsn string) (*nodeProc, error) {
	logSeq.Lock()
	logSeq.n++
	logPath := filepath.Join(a.logDir, fmt.Sprintf("%03d-%s.log", logSeq.n, id))
	logSeq.Unlock()
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"-dsn", dsn, "-key", a.key, "-id", id, "-provider", a.provider}, a.flags...)
	cmd := exec.Command(a.bin, args...)
	cmd.Stderr = logFile
	// Killed with the test process, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &nodeProc{id: id, cmd: cmd, exited: make(chan struct{})}
	go func() {
		defer logFile.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var s status
			if json.Unmarshal(sc.Bytes(), &s) != nil {
				continue
			}
			p.mu.Lock()
			if s.Stopped {
				p.final = &s
			} else {
				p.last = s
			}
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// latest returns the last status line.
func (p *nodeProc) latest() status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// stopResult returns the last line, printed after Stop, or nil.
func (p *nodeProc) stopResult() *status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.final
}

func (p *nodeProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the process if it is still running.
func (p *nodeProc) signal(sig syscall.Signal) {
	if p.running() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill kills the process (kill -9) and waits for it to exit.
func (p *nodeProc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// terminate sends SIGTERM and waits up to timeout for the process to exit;
// then it kills it. It returns whether the process exited by itself.
func (p *nodeProc) terminate(timeout time.Duration) bool {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		p.kill()
		return false
	}
}

// exitCode is the process's exit code, -1 when a signal ended it.
func (p *nodeProc) exitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

// waitHealthy waits up to timeout for a status line sent after since that
// is healthy.
func (p *nodeProc) waitHealthy(since time.Time, timeout time.Duration) (status, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s := p.latest()
		if s.Time.After(since) && s.healthy() {
			return s, true
		}
		if time.Now().After(deadline) || !p.running() {
			return s, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slot is one place in the fleet: a node proxy and the process behind it,
// which faults kill and replace. busy is held by the fault acting on it.
type slot struct {
	idx   int
	proxy *tcpProxy
	busy  sync.Mutex

	mu   sync.Mutex
	id   string
	proc *nodeProc
	gen  int
}

func (s *slot) current() (string, *nodeProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.proc
}

// newID returns a node id this slot has not used.
func (s *slot) newID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return "node-" + strconv.Itoa(s.idx+1) + "." + strconv.Itoa(s.gen)
}

// launch starts a process for the slot with node id id.
func (s *slot) launch(a nodeArgs, id string) (*nodeProc, error) {
	dsn := "postgres://postgres@" + s.proxy.addr + "/postgres?sslmode=disable"
	p, err := startProc(a, id, dsn)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.id, s.proc = id, p
	s.mu.Unlock()
	return p, nil
}
