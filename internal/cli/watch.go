package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	ucli "github.com/urfave/cli/v2"

	"github.com/fleetlimit/fleetlimit/coord"
)

// DefaultWatchInterval is watch's default time between refreshes.
const DefaultWatchInterval = time.Second

// minInterval is the shortest refresh interval watch and demo accept.
const minInterval = 10 * time.Millisecond

func (r *runner) watchCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "watch",
		Usage:     "show KEY's nodes and load, refreshed every --interval",
		ArgsUsage: argsUsage("KEY"),
		Description: `On a terminal, watch redraws in place: the key's summary, its nodes and a
chart of L_global and Σ in-flight over the last refreshes. Otherwise it
prints one line per refresh; with --output json one JSON object per line:
time, the fields of a keys object, and nodes (node objects). --count N
stops after N refreshes; 0 runs until interrupted. A refresh that fails
while the database restarts or fails over is said on stderr and tried
again at the next interval (the run fails if the last of --count N does,
or if every refresh failed for 5 minutes or 10 intervals, whichever is
longer), and the redrawn view says for a minute under its title that it
refreshes again after them; an unknown key, a missing schema or a role without an
operator's rights ends the run at once.`,
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "interval", Value: DefaultWatchInterval, Usage: "time between refreshes"},
			decimalFlagDefault("count", "stop after this many refreshes; 0 runs until interrupted", 0, fmt.Sprintf("0..%d", int64(math.MaxInt64))),
			outputFlag(),
		},
		Action: r.action(func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			args, err := wantArgs(c, "KEY")
			if err != nil {
				return err
			}
			interval, count := c.Duration("interval"), int(decimalValue(c, "count"))
			if interval < minInterval {
				return usageErrorf("invalid value %s for --interval: want >= %s", writtenDuration(interval), writtenDuration(minInterval))
			}
			if count < 0 {
				return usageErrorf("invalid value %d for --count: want >= 0", count)
			}
			key := args[0]
			return r.withPoolAdmin(c, func(ctx context.Context, pool *pgxpool.Pool, admin *coord.Postgres) error {
				v := r.newView(format, fmt.Sprintf("fleetctl watch  every %s  (Ctrl-C quits)", writtenDuration(interval)))
				defer v.close()
				w := r.newWatcher("watch", admin, pool, key, interval)
				w.show = v.show
				refreshes := 0
				return watchLoop(ctx, interval, count, func() error {
					refreshes++
					w.last = count != 0 && refreshes == count
					return w.refresh(ctx)
				})
			})
		}),
	}
}

// refreshBound bounds one refresh of watch, so that a connection that
// hangs (a network dropped without a reset) fails and is opened again: a
// connect timeout and three statements (readFrame runs up to three), each
// at the session's statement_timeout (as poolConfig found it: session)
// as the server applies it (see pgTimeout), and a second. Without a
// statement timeout (0, a value the server rounds to 0, or one it would
// refuse) a statement gets watchHang.
func refreshBound(connect time.Duration, session sessionTimeout) time.Duration {
	statement, ok := pgTimeout(session.value)
	if !ok || statement <= 0 {
		statement = watchHang
	}
	bound := connect
	for _, d := range []time.Duration{statement, statement, statement, time.Second} {
		if bound > math.MaxInt64-d {
			return math.MaxInt64 // the sum overflows: no bound
		}
		bound += d
	}
	return bound
}

// watchHang is how long watch waits for a statement of a session without
// a statement timeout before it takes the connection for hung.
const watchHang = time.Minute

// watchGiveUp is the least time watch goes on refreshing while every
// refresh fails: at least 10 intervals.
const watchGiveUp = 5 * time.Minute

// watcher refreshes watch's view of a key. A refresh that fails for a
// reason a later one may not meet (see passing) — the database
// restarting or failing over, a connection lost or hung — is said on
// stderr (again when its reason changes) and tried again at the next
// interval, until refreshes have failed for giveUp in a row.
type watcher struct {
	admin    coord.Admin
	key      string
	interval time.Duration
	timeout  time.Duration // bounds each refresh
	giveUp   time.Duration
	now      func() time.Time
	show     func(frame) error
	warn     func(msg string)

	failing  int       // refreshes failed in a row
	since    time.Time // when the first of them failed
	lastWarn string
	last     bool      // the refresh is the run's last: a failure is not tried again
	note     string    // the last recovery, shown in the frames for noteFor
	noteAt   time.Time // when it came
}

// noteFor is how long the frames after a recovery say it (frame.Note).
const noteFor = time.Minute

// newWatcher returns command's watcher of key on pool, every interval,
// each refresh bounded by the pool's own timeouts (see refreshBound),
// saying its failures on stderr; the caller sets show.
func (r *runner) newWatcher(command string, admin coord.Admin, pool *pgxpool.Pool, key string, interval time.Duration) *watcher {
	return &watcher{admin: admin, key: key, interval: interval, timeout: refreshBound(pool.Config().ConnConfig.ConnectTimeout, r.timeout),
		giveUp: max(watchGiveUp, 10*interval), now: time.Now,
		warn: func(msg string) { r.progress("fleetctl: %s: %s", command, msg) }}
}

// refresh reads and shows one frame; see watchLoop for its error.
func (w *watcher) refresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	f, err := readFrame(rctx, w.admin, w.key)
	cancel()
	if err == nil {
		if w.failing > 0 {
			w.note = fmt.Sprintf("refreshing again after %s", plural(w.failing, "failed refresh", "failed refreshes"))
			w.noteAt = w.now()
			w.warn(w.note)
			w.failing, w.lastWarn = 0, ""
		}
		if w.note != "" && w.now().Sub(w.noteAt) < noteFor {
			f.Note = fmt.Sprintf("%s (since %s)", w.note, w.noteAt.Local().Format("15:04:05"))
		}
		return w.show(f)
	}
	if ctx.Err() != nil || !passing(err) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) && rctx.Err() != nil {
		err = fmt.Errorf("no answer within %s: %w", writtenDuration(w.timeout), err)
	}
	now := w.now()
	if w.failing == 0 {
		w.since = now
	}
	w.failing++
	if now.Sub(w.since) >= w.giveUp {
		return fmt.Errorf("no refresh succeeded for %s (%s): %w", writtenDuration(now.Sub(w.since).Round(time.Second)),
			plural(w.failing, "failed refresh", "failed refreshes"), err)
	}
	// On one line: a connection error spans several, one per host tried.
	reason := strings.Join(strings.Fields(err.Error()), " ")
	if reason != w.lastWarn && !w.last {
		w.warn(fmt.Sprintf("a refresh failed; trying again every %s: %s", writtenDuration(w.interval), reason))
		w.lastWarn = reason
	}
	return errRefresh{err}
}

// watchLoop calls refresh count times (forever when count is 0), interval
// apart, until ctx ends, which is not an error. A refresh that fails with
// errRefresh is counted and the loop goes on, unless it was the last;
// any other error ends the loop.
func watchLoop(ctx context.Context, interval time.Duration, count int, refresh func() error) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for i := 0; count == 0 || i < count; i++ {
		if err := refresh(); err != nil {
			var skip errRefresh
			switch {
			case ctx.Err() != nil:
				return nil
			case !errors.As(err, &skip):
				return err
			case count != 0 && i == count-1:
				return skip.err
			}
		}
		if count != 0 && i == count-1 {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
	return nil
}

// errRefresh is a refresh's error after which watchLoop goes on.
type errRefresh struct{ err error }

func (e errRefresh) Error() string { return e.err.Error() }
func (e errRefresh) Unwrap() error { return e.err }

// passing reports whether a later read may not meet err: every error but
// an unknown key, a schema that is missing or too old, and a database
// that refuses the role (Postgres's error classes 28, 3D, 3F and 42:
// authorization, an unknown database or schema, privileges and undefined
// objects).
func passing(err error) bool {
	if errors.Is(err, coord.ErrUnknownKey) || errors.Is(err, coord.ErrSchema) {
		return false
	}
	if code := sqlState(err); len(code) == 5 {
		switch code[:2] {
		case "28", "3D", "3F", "42":
			return false
		}
	}
	return true
}

// readFrame reads key's summary and nodes.
func readFrame(ctx context.Context, admin coord.Admin, key string) (frame, error) {
	k, err := findKey(ctx, admin, key)
	if err != nil {
		return frame{}, err
	}
	nodes, err := admin.Nodes(ctx, key)
	if err != nil {
		return frame{}, adminError(err, key, "")
	}
	kv := newKeyView(k)
	return frame{Time: time.Now(), Key: kv, Nodes: newNodeViews(kv, nodes)}, nil
}

// view shows a sequence of frames: redrawn in place on a terminal, else
// one line (or JSON object) per frame.
type view struct {
	w       io.Writer
	title   string
	live    bool
	json    bool
	history *history
	started bool
}

func (r *runner) newView(format, title string) *view {
	return &view{
		w:       r.env.Stdout,
		title:   title,
		live:    format == formatTable && r.env.IsTerminal(r.env.Stdout),
		json:    format == formatJSON,
		history: newHistory(chartWidth(r.env.Getenv)),
	}
}

func (v *view) show(f frame) error {
	switch {
	case v.json:
		return writeJSONLine(v.w, watchLine{Time: f.Time.UTC(), keyView: f.Key, Nodes: f.Nodes})
	case v.live:
		if !v.started {
			fmt.Fprint(v.w, ansiHideCursor)
			v.started = true
		}
		v.history.add(f)
		return renderLive(v.w, v.title, f, v.history)
	default:
		_, err := fmt.Fprintln(v.w, plainLine(f))
		return err
	}
}

// close restores the cursor of a live view.
func (v *view) close() {
	if v.started {
		fmt.Fprint(v.w, ansiShowCursor)
	}
}
