package pgtemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ShutdownMode says how [Cluster.StopServer] stops the server. The first two
// send the signals pg_ctl stop sends for its modes of the same name.
type ShutdownMode int

const (
	// ShutdownFast disconnects every session, checkpoints and exits
	// (SIGINT, like pg_ctl stop -m fast).
	ShutdownFast ShutdownMode = iota
	// ShutdownImmediate exits at once without a checkpoint; the next start
	// runs crash recovery (SIGQUIT, like pg_ctl stop -m immediate).
	ShutdownImmediate
	// ShutdownKill is a crash: SIGKILL to the postmaster and to every
	// process it started (kill -9).
	ShutdownKill
)

// String returns the mode's name.
func (m ShutdownMode) String() string {
	switch m {
	case ShutdownFast:
		return "fast"
	case ShutdownImmediate:
		return "immediate"
	case ShutdownKill:
		return "kill"
	default:
		return fmt.Sprintf("ShutdownMode(%d)", int(m))
	}
}

// StopServer stops the server in the given mode and waits for it to exit,
// keeping the data directory so that [Cluster.StartServer] can start it
// again on the same port. Stopping a server that is already down returns
// nil. [Cluster.Stop] still has to be called to remove the directory.
func (c *Cluster) StopServer(mode ShutdownMode) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	return c.stopServer(mode)
}

func (c *Cluster) stopServer(mode ShutdownMode) error {
	srv, _ := c.current()
	select {
	case <-srv.exited:
		c.markDown()
		return nil
	default:
	}
	pid := srv.cmd.Process.Pid
	var (
		err      error
		children []int
	)
	switch mode {
	case ShutdownFast:
		err = srv.cmd.Process.Signal(syscall.SIGINT)
	case ShutdownImmediate:
		err = srv.cmd.Process.Signal(syscall.SIGQUIT)
	case ShutdownKill:
		children = childPIDs(pid)
		err = srv.cmd.Process.Signal(syscall.SIGKILL)
		for _, child := range children {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	default:
		return fmt.Errorf("pgtemp: stop server: unknown %v", mode)
	}
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgtemp: stop server: signal postgres (pid %d): %w", pid, err)
	}
	select {
	case <-srv.exited:
	case <-time.After(stopTimeout):
		_ = srv.cmd.Process.Signal(syscall.SIGKILL)
		<-srv.exited
		c.markDown()
		return fmt.Errorf("pgtemp: stop server: postgres (pid %d) did not stop within %s (%v); killed it", pid, stopTimeout, mode)
	}
	c.markDown()
	// Wait until the killed postmaster's processes are gone, so that a later
	// start finds no shared memory still attached.
	waitGone(children, 5*time.Second)
	return nil
}

func (c *Cluster) markDown() {
	c.mu.Lock()
	c.down = true
	c.mu.Unlock()
}

// StartServer starts a server stopped by [Cluster.StopServer] again, on the
// same port and data directory, and returns once it accepts connections
// (after crash recovery when it was not stopped cleanly). ctx bounds the
// wait. It returns an error if the server is running.
func (c *Cluster) StartServer(ctx context.Context) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	return c.startAgain(ctx)
}

func (c *Cluster) startAgain(ctx context.Context) error {
	srv, _ := c.current()
	select {
	case <-srv.exited:
	default:
		return fmt.Errorf("pgtemp: start server: postgres (pid %d) is running", srv.cmd.Process.Pid)
	}
	return c.startServer(ctx)
}

// Restart stops the server with a fast shutdown and starts it again on the
// same port, as pg_ctl restart -m fast does, and returns once it accepts
// connections. ctx bounds the start.
func (c *Cluster) Restart(ctx context.Context) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	if err := c.stopServer(ShutdownFast); err != nil {
		return err
	}
	return c.startAgain(ctx)
}

// Running reports whether the server process is running.
func (c *Cluster) Running() bool {
	srv, _ := c.current()
	select {
	case <-srv.exited:
		return false
	default:
		return true
	}
}

// Addr returns the server's address, "127.0.0.1:port".
func (c *Cluster) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
}

// StartReplica creates a streaming replica of the server at source
// ("127.0.0.1:port", which may be a proxy in front of the primary): it runs
// pg_basebackup -R into a new temporary directory, so that the replica's
// primary_conninfo connects to source as [Superuser], and starts it as a hot
// standby listening on 127.0.0.1 at opts.Port (a free port when 0). The
// primary must accept replication connections from 127.0.0.1 (a cluster from
// [Start] does) and have wal_level replica or logical and max_wal_senders
// above 0 (the defaults). opts.Settings should match the primary's; in
// particular max_connections must not be below the primary's. The returned
// Cluster has every method of one from [Start]; [Cluster.Promote] turns it
// into a primary.
func StartReplica(ctx context.Context, source string, opts Options) (*Cluster, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(source)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: start replica: source %q: %w", source, err)
	}
	cred, err := credential(opts.RunAsUser)
	if err != nil {
		return nil, err
	}
	basebackup := filepath.Join(opts.BinDir, "pg_basebackup")
	if !isExecutable(basebackup) {
		return nil, fmt.Errorf("pgtemp: start replica: %s is missing: %w", basebackup, ErrNotInstalled)
	}
	dir, err := os.MkdirTemp(opts.BaseDir, "pgtemp-replica-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: create temporary directory: %w", err)
	}
	c := newCluster(dir, opts, cred)
	start := func() error {
		if err := c.chownDir(); err != nil {
			return err
		}
		if err := c.runTool(ctx, basebackup,
			"--pgdata="+c.dataDir,
			"--host="+host,
			"--port="+port,
			"--username="+Superuser,
			"--no-password",
			"--write-recovery-conf",
			"--wal-method=stream",
			"--checkpoint=fast",
		); err != nil {
			return err
		}
		return c.listen(ctx)
	}
	if err := start(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return c, nil
}

// Promote turns a replica from [StartReplica] into a primary with pg_ctl
// promote, and returns once the promotion has completed and the server
// accepts writes. ctx bounds the wait.
func (c *Cluster) Promote(ctx context.Context) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	pgctl := filepath.Join(c.opts.BinDir, "pg_ctl")
	if !isExecutable(pgctl) {
		return fmt.Errorf("pgtemp: promote: %s is missing: %w", pgctl, ErrNotInstalled)
	}
	timeout := 60 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Second)
	}
	return c.runTool(ctx, pgctl, "promote", "--pgdata="+c.dataDir, "--wait",
		"--timeout="+strconv.Itoa(int(timeout.Seconds())), "--silent")
}

// runTool runs one of the server's command-line tools as the user that runs
// the server.
func (c *Cluster) runTool(ctx context.Context, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return fmt.Errorf("pgtemp: %s %s: %w\n%s", filepath.Base(path), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// childPIDs returns the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentPID(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// parentPID reads a live process's parent from /proc/<pid>/stat; false for a
// process that is gone or a zombie.
func parentPID(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// then come the state and the parent's pid.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 || fields[0] == "Z" || fields[0] == "X" {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}

// waitGone waits until none of pids is alive any more (gone or a zombie), or
// timeout passes.
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if _, alive := parentPID(pid); !alive {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
