package pgtemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// stopTimeout bounds how long Stop waits for a fast shutdown before it sends
// SIGQUIT (immediate shutdown).
const stopTimeout = 30 * time.Second

// portAttempts is how many free ports Start tries when Options.Port is 0 and
// another process takes the chosen port first.
const portAttempts = 3

// Cluster is a running throwaway Postgres cluster started by [Start]. Its
// methods are safe for concurrent use.
type Cluster struct {
	dir     string
	dataDir string
	logPath string
	port    int // set once, before the Cluster is returned
	opts    Options
	cred    *syscall.Credential

	// lifecycle serializes StopServer, StartServer, Restart, Promote and
	// Stop.
	lifecycle sync.Mutex

	mu   sync.Mutex
	srv  *server // the server process of the current (or last) run
	down bool    // the server was stopped on purpose by StopServer

	stopOnce sync.Once
	stopErr  error
}

// server is one run of the postgres server process.
type server struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// current returns the server process of the current run and whether it was
// stopped on purpose.
func (c *Cluster) current() (*server, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv, c.down
}

// Start creates a cluster in a new temporary directory under
// [Options.BaseDir], starts its server and returns once the server accepts
// connections. ctx bounds initdb and the wait for the server; it does not
// bound the server's life, which ends at [Cluster.Stop].
//
// Start returns an error wrapping [ErrNotInstalled] when the Postgres binaries
// are missing, and an error naming the field for invalid options. On any
// error nothing is left running and the temporary directory is removed. Start
// is safe for concurrent use; every call makes its own cluster. Starting takes
// about a second (initdb dominates).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cred, err := credential(opts.RunAsUser)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.BaseDir, "pgtemp-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: create temporary directory: %w", err)
	}
	c := newCluster(dir, opts, cred)
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return c, nil
}

// newCluster returns a Cluster in dir, not started.
func newCluster(dir string, opts Options, cred *syscall.Credential) *Cluster {
	return &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		opts:    opts,
		cred:    cred,
	}
}

func (c *Cluster) start(ctx context.Context) error {
	if err := c.chownDir(); err != nil {
		return err
	}
	if err := c.initdb(ctx, c.opts, c.cred); err != nil {
		return err
	}
	return c.listen(ctx)
}

// chownDir hands the cluster's directory to the user that runs the server.
func (c *Cluster) chownDir() error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("pgtemp: hand %s to user %s: %w", c.dir, c.opts.RunAsUser, err)
	}
	return nil
}

// listen starts the server for the first time, on Options.Port or, when it
// is 0, on a free port (retrying with another one if it is taken first).
func (c *Cluster) listen(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		port := c.opts.Port
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		c.port = port
		err := c.startServer(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) || c.opts.Port != 0 || attempt == portAttempts {
			return err
		}
	}
}

func (c *Cluster) initdb(ctx context.Context, opts Options, cred *syscall.Credential) error {
	cmd := exec.CommandContext(ctx, filepath.Join(opts.BinDir, "initdb"),
		"--pgdata="+c.dataDir,
		"--username="+Superuser,
		"--encoding=UTF8",
		"--locale=C",
		"--auth-local=trust",
		"--auth-host=trust",
		"--no-sync",
	)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return fmt.Errorf("pgtemp: initdb: %w\n%s", err, bytes.TrimSpace(out))
	}
	return nil
}

// errPortInUse marks a server that exited because its port was taken.
var errPortInUse = errors.New("pgtemp: port in use")

// startServer starts the server process on c.port and waits until it accepts
// connections.
func (c *Cluster) startServer(ctx context.Context) error {
	opts, cred, port := c.opts, c.cred, c.port
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtemp: open server log: %w", err)
	}
	defer logFile.Close()
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("pgtemp: open server log: %w", err)
	}

	args := []string{
		"-D", c.dataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + c.dir,
	}
	names := make([]string, 0, len(opts.Settings))
	for name := range opts.Settings {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		args = append(args, "-c", name+"="+opts.Settings[name])
	}
	cmd := exec.Command(filepath.Join(opts.BinDir, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtemp: start postgres: %w", err)
	}
	srv := &server{cmd: cmd, exited: make(chan struct{})}
	go func() {
		srv.waitErr = cmd.Wait()
		close(srv.exited)
	}()
	c.mu.Lock()
	c.srv, c.down = srv, false
	c.mu.Unlock()

	if err := c.waitReady(ctx, srv); err != nil {
		select {
		case <-srv.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			<-srv.exited
		}
		c.mu.Lock()
		c.down = true // nothing of this run is left to stop
		c.mu.Unlock()
		tail := c.logTail(logStart)
		if bytes.Contains(tail, []byte("could not bind")) || bytes.Contains(tail, []byte("already in use")) {
			err = errors.Join(err, errPortInUse)
		}
		return fmt.Errorf("%w\n%s", err, tail)
	}
	return nil
}

// waitReady polls until the server accepts a connection, the server exits or
// ctx ends. An error that no wait cures — a connection setting the server
// rejects, or that cannot be parsed, such as a PG* environment variable
// meant for another database — ends it at once.
func (c *Cluster) waitReady(ctx context.Context, srv *server) error {
	dsn := c.DSN("postgres")
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgconn.Connect(attemptCtx, dsn)
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		// An error no wait cures fails at once, but only once this server
		// says it accepts connections: before that, what answered may be
		// another process that holds the port (the server then exits, and
		// its log says the port is in use), or a server too busy to fork.
		if !startingUp(err) && ctx.Err() == nil && c.accepting(srv) {
			return fmt.Errorf("pgtemp: connecting to the new server failed, and waiting will not help (check the PG* environment variables, which complete the cluster's connection string): %w", err)
		}
		select {
		case <-srv.exited:
			return fmt.Errorf("pgtemp: postgres exited before accepting connections: %v", srv.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: waiting for postgres to accept connections: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// accepting reports whether srv has written, in its postmaster.pid, that
// it accepts connections (status "ready", or "standby" for a hot standby).
func (c *Cluster) accepting(srv *server) bool {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(srv.cmd.Process.Pid) {
		return false
	}
	switch strings.TrimSpace(lines[7]) {
	case "ready", "standby":
		return true
	}
	return false
}

// startingUp reports whether err, from a connection attempt, may be the
// server not accepting connections yet: nothing listens on the port, the
// server says it is starting up, or the attempt timed out.
func startingUp(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P03" // cannot_connect_now: starting up
	}
	var parseErr *pgconn.ParseConfigError
	if errors.As(err, &parseErr) {
		return false
	}
	var netErr net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// logTail returns the last lines the server logged since offset.
func (c *Cluster) logTail(offset int64) []byte {
	b, err := os.ReadFile(c.logPath)
	if err != nil || offset > int64(len(b)) {
		return nil
	}
	b = bytes.TrimSpace(b[offset:])
	const maxTail = 4096
	if len(b) > maxTail {
		b = b[len(b)-maxTail:]
	}
	return b
}

// DSN returns a URL that connects to database dbname as [Superuser] over TCP
// on 127.0.0.1 without TLS or password, to this server whichever role it has
// (target_session_attrs=any, so that a PGTARGETSESSIONATTRS set for another
// database does not turn it away). Every new cluster has the database
// "postgres".
func (c *Cluster) DSN(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable&target_session_attrs=any",
	}
	return u.String()
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's temporary directory. It holds the data directory
// "data", the server log "postgres.log" and the server's unix socket.
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the path of the server's log file.
func (c *Cluster) LogPath() string { return c.logPath }

// Stop shuts the server down (a fast shutdown: open sessions are
// disconnected), waits for it to exit and removes the temporary directory. If
// the server has not exited after 30s it is sent SIGQUIT. A server stopped on
// purpose with [Cluster.StopServer] is not an error. Stop is idempotent:
// later calls return the first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.lifecycle.Lock()
		defer c.lifecycle.Unlock()
		c.stopErr = c.stop()
	})
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	srv, down := c.current()
	select {
	case <-srv.exited:
		if !down {
			errs = append(errs, fmt.Errorf("pgtemp: postgres had already exited: %v", srv.waitErr))
		}
	default:
		if err := srv.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("pgtemp: signal postgres (pid %d): %w", srv.cmd.Process.Pid, err))
		}
		select {
		case <-srv.exited:
		case <-time.After(stopTimeout):
			errs = append(errs, fmt.Errorf("pgtemp: postgres (pid %d) did not stop within %s; sending SIGQUIT", srv.cmd.Process.Pid, stopTimeout))
			_ = srv.cmd.Process.Signal(syscall.SIGQUIT)
			<-srv.exited
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("pgtemp: remove %s: %w", c.dir, err))
	}
	return errors.Join(errs...)
}

// credential returns the credential to run Postgres with: nil when the
// calling process is not root, else runAsUser's.
func credential(runAsUser string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(runAsUser)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: running as root, and Postgres refuses root: need user %q to run it: %w", runAsUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: user %q has uid %q: %w", runAsUser, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: user %q has gid %q: %w", runAsUser, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("pgtemp: Options.RunAsUser %q is root; Postgres refuses to run as root", runAsUser)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtemp: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("pgtemp: find a free port: %w", err)
	}
	return port, nil
}
