package cli

import (
	"bytes"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// seedKey gives key "k" one node: l_local 12, 5 in flight, demand 8.
func seedKey(t *testing.T, dsn string) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	defer pool.Close()
	c, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	_, err = c.Heartbeat(t.Context(), coord.Report{Key: "k", NodeID: "node-1", Instance: "i", Seq: 1, LLocal: 12, Inflight: 5, Demand: 8, LeaseTTL: time.Hour})
	require.NoError(t, err)
}

func TestSparkline(t *testing.T) {
	t.Parallel()
	require.Equal(t, " ▁▂▃▄▅▆▇█", sparkline([]float64{0, 1, 2, 3, 4, 5, 6, 7, 8}, 8))
	require.Equal(t, "▁█", sparkline([]float64{0.01, 100}, 8), "small values show, large ones clip")
	require.Equal(t, "  ", sparkline([]float64{0, 5}, 0), "no scale, no bars")
}

func TestShortDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                       "0.0s",
		999 * time.Millisecond:  "0.9s",
		9999 * time.Millisecond: "9.9s",
		10 * time.Second:        "10s",
		59*time.Minute + 59*time.Second + 999*time.Millisecond: "59m59s",
		2*time.Hour + 5*time.Minute + 59*time.Second:           "2h05m",
		-1500 * time.Millisecond:                               "-1.5s",
	} {
		require.Equal(t, want, shortDuration(d), "%v", d)
	}
}

func TestWrittenDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                "0s",
		250 * time.Millisecond:           "250ms",
		1500 * time.Microsecond:          "1.5ms",
		10 * time.Second:                 "10s",
		10 * time.Minute:                 "10m",
		90 * time.Second:                 "1m30s",
		1000 * time.Hour:                 "1000h",
		time.Hour + 30*time.Second:       "1h30s",
		time.Hour + 10*time.Minute:       "1h10m",
		time.Hour + 500*time.Millisecond: "1h0.5s",
		maxStatementTimeout:              "596h31m23.647s",
		-90 * time.Minute:                "-1h30m",
		time.Duration(math.MaxInt64):     "2562047h47m16.854775807s",
	} {
		got := writtenDuration(d)
		require.Equal(t, want, got, "%v", d)
		back, err := time.ParseDuration(got)
		require.NoError(t, err)
		require.Equal(t, d, back, "%q reads back as the duration", got)
	}
}

func TestHistoryKeepsWidth(t *testing.T) {
	t.Parallel()
	h := newHistory(3)
	for i := range 5 {
		h.add(frame{Key: keyView{LGlobal: i, SumInflight: i}, Provider: &providerView{Capacity: float64(10 * i)}})
	}
	require.Equal(t, []float64{2, 3, 4}, h.lGlobal)
	require.Equal(t, []float64{20, 30, 40}, h.capacity)
}

func TestPlainLineAndLiveView(t *testing.T) {
	t.Parallel()
	u := 0.5
	f := frame{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC),
		Key:  keyView{Key: "api", LGlobal: 40, LiveNodes: 2, SumShare: 38, SumInflight: 20, Utilization: &u, Aggregate: "lower_median"},
		Nodes: []nodeView{{NodeID: "n1", Instance: "0123456789abcdef", LLocal: 40, Share: 20, Inflight: 10, Reserve: 20,
			Status: "active", Labels: map[string]string{"b": "2", "a": "1"},
			leaseRemaining: 1500 * time.Millisecond, holdRemaining: 61 * time.Second, heartbeatAge: 200 * time.Millisecond}},
		Provider: &providerView{Capacity: 40, Current: 21, Successes: 100, Rejected: 3},
	}
	require.Equal(t, `2026-01-02T03:04:05.600Z key="api" l_global=40 nodes=2 share=38 inflight=20 util=50.0% capacity=40 provider_inflight=21 ok=100 429=3`, plainLine(f))

	h := newHistory(4)
	h.add(f)
	var b bytes.Buffer
	require.NoError(t, renderLive(&b, "title", f, h))
	s := b.String()
	require.True(t, strings.HasPrefix(s, ansiClear+"title  "))
	require.Contains(t, s, "provider: capacity 40 (hidden from the nodes)  in flight 21  ok 100  429 3")
	require.Contains(t, s, "n1    01234567  40       20     10        0       20       0/0  1.5s   1m01s  0.2s ago   active  no      a=1,b=2")
	require.Contains(t, s, "L_global      █ 40\n")
	require.Contains(t, s, "in-flight     ▄ 20\n")
	require.Contains(t, s, "capacity      █ 40\n")
	require.NotContains(t, s, "refreshing again")

	f.Note = "refreshing again after 2 failed refreshes (since 03:04:01)"
	b.Reset()
	require.NoError(t, renderLive(&b, "title", f, h))
	require.Regexp(t, `^`+regexp.QuoteMeta(ansiClear)+`title  \S+\nrefreshing again after 2 failed refreshes \(since 03:04:01\)\nkey "api"`, b.String(),
		"the note stands under the title")
}

// TestViewsSayLearningAndHeld: a key in learning mode grants each node
// at most what it holds, which leaves shares at 0 with demand; both views
// say why, and the capacity held for nodes that are gone.
func TestViewsSayLearningAndHeld(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 1, 2, 3, 4, 35, 0, time.UTC)
	util := 0.0
	f := frame{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Key: keyView{Key: "api", LGlobal: 22, LiveNodes: 2,
		Utilization: &util, LearningUntil: &until, HeldRows: 1, HeldReserve: 7, Aggregate: "lower_median"}}
	require.Equal(t, `2026-01-02T03:04:05.000Z key="api" l_global=22 nodes=2 share=0 inflight=0 util=0.0% learning_until=2026-01-02T03:04:35.000Z held=7 held_rows=1`,
		plainLine(f))
	var b bytes.Buffer
	require.NoError(t, renderLive(&b, "t", f, newHistory(4)))
	require.Contains(t, b.String(), "learning mode until "+until.Local().Format("15:04:05")+": each node is granted at most what it holds")
	require.Contains(t, b.String(), "held: 7 slots for requests that may still run; 1 row of nodes that are gone (expired, left or evicted) holds capacity (slots, or an evicted instance's rate share)\n")
	f.Key.HeldReserve, f.Key.HeldRows = 0, 2 // rows that hold only a rate share
	b.Reset()
	require.NoError(t, renderLive(&b, "t", f, newHistory(4)))
	require.Contains(t, b.String(), "held: the rate shares of 2 evicted instances, until their leases end\n")
	f.Key.LearningUntil, f.Key.HeldRows = nil, 0
	b.Reset()
	require.NoError(t, renderLive(&b, "t", f, newHistory(4)))
	require.NotContains(t, b.String(), "learning")
	require.NotContains(t, b.String(), "held:")
	require.NotContains(t, plainLine(f), "learning_until")
	require.NotContains(t, plainLine(f), "unchecked")

	// Not checked since a loss: the next heartbeat starts learning mode.
	f.Key.Unchecked = true
	require.True(t, strings.HasSuffix(plainLine(f), " util=0.0% unchecked"), plainLine(f))
	b.Reset()
	require.NoError(t, renderLive(&b, "t", f, newHistory(4)))
	require.Contains(t, b.String(), "unchecked: the database may have lost state since the key was last checked; its next heartbeat starts learning mode")
	require.Equal(t, "unchecked", f.Key.cells(false)[9])
}

func TestLGlobalBeforeTheFirstHeartbeat(t *testing.T) {
	t.Parallel()
	maxLimit := 24
	f := frame{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Key: keyView{Key: "quota", MaxLimit: &maxLimit, Aggregate: "lower_median"}}
	require.Equal(t, `2026-01-02T03:04:05.000Z key="quota" l_global=- nodes=0 share=0 inflight=0 util=-`, plainLine(f))
	var b bytes.Buffer
	h := newHistory(4)
	h.add(f)
	require.NoError(t, renderLive(&b, "t", f, h))
	require.Contains(t, b.String(), `key "quota"  L_global - (min -, max 24, lower_median)`)
	require.Regexp(t, `\nL_global +▁? -\n`, b.String(), "the chart's row too")
	require.Equal(t, "-", lGlobal(0))
	require.Equal(t, "1", lGlobal(1))
}

func TestLabelsAndCells(t *testing.T) {
	t.Parallel()
	require.Equal(t, "-", labelsString(nil))
	require.Equal(t, "a=1,z=2", labelsString(map[string]string{"z": "2", "a": "1"}))
	// Pairs read one way: each of these read x=y=q,r before.
	require.Equal(t, `x="y=q,r"`, labelsString(map[string]string{"x": "y=q,r"}))
	require.Equal(t, `"x=y"="q,r"`, labelsString(map[string]string{"x=y": "q,r"}))
	require.Equal(t, `r=,"x=y"=q`, labelsString(map[string]string{"x=y": "q", "r": ""}))
	require.Equal(t, `q="say \"hi\""`, labelsString(map[string]string{"q": `say "hi"`}))
	require.Equal(t, `a="x \x20y",b="p \x20 \x20q"`, labelsString(map[string]string{"a": "x  y", "b": "p    q"}),
		"quoted once, no gap that reads as a column break")
	require.Equal(t, `"k\t"=" v"`, labelsString(map[string]string{"k\t": " v"}))
	for _, s := range []string{"x  y", "p    q", "a   b"} {
		q := labelsString(map[string]string{"a": s})[len("a="):]
		u, err := strconv.Unquote(q)
		require.NoError(t, err)
		require.Equal(t, s, u, "the quoted value reads back")
		require.NotContains(t, q, "  ")
	}
	require.Equal(t, `"a\tb"`, cell("a\tb"))
	require.Equal(t, `""`, cell(""))
	require.Equal(t, "plain", cell("plain"))
	require.Equal(t, `"api "`, cell("api "))
	require.Equal(t, `" "`, cell(" "))
	require.Equal(t, "mid space", cell("mid space"))
	require.Equal(t, `"two  spaces"`, cell("two  spaces"), "a gap that reads as a column break")
	require.Equal(t, "a b", cell("a b"))
	require.Equal(t, `"x\x1b[31mRED"`, cell("x\x1b[31mRED"), "a terminal escape")
	require.Equal(t, `"a\x01b"`, cell("a\x01b"))
	require.Equal(t, `"a\u00a0b"`, cell("a\u00a0b"), "a space that is not printable")
	require.Equal(t, `"\xff"`, cell("\xff"), "not UTF-8")
	require.Equal(t, "zone=eu-west,café=ü", cell("zone=eu-west,café=ü"), "printable Unicode stays as is")
}

func TestRateCells(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	require.Equal(t, "-", rateWithLimit(nil, nil))
	require.Equal(t, "500", rateWithLimit(n(500), nil))
	require.Equal(t, "400 (max 400)", rateWithLimit(n(400), n(400)))
	require.Equal(t, "- (max 600)", rateWithLimit(nil, n(600)), "before a heartbeat computed the key's rate")
	require.Equal(t, "-", ratePair(0, 0))
	require.Equal(t, "500/-", ratePair(500, 0))
	require.Equal(t, "-", sharePair(0, 0, [2]bool{}), "no rate: no pacing")
	require.Equal(t, "25/0", sharePair(25, 0, [2]bool{true, true}), "a token rate with a 0 share sends nothing")
	require.Equal(t, "25/-", sharePair(25, 0, [2]bool{true, false}), "no token rate: tokens unpaced")
	require.Equal(t, "0/0", sharePair(0, 0, [2]bool{true, true}))

	k := keyView{Key: "k", LGlobal: 10, RPM: n(400), RPMLimit: n(400), SumRPMShare: 300}
	f := frame{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Key: k}
	require.Equal(t, `2026-01-02T03:04:05.000Z key="k" l_global=10 nodes=0 share=0 inflight=0 util=- rpm=400 tpm=- rate_share=300/-`,
		plainLine(f))
	var b bytes.Buffer
	require.NoError(t, renderLive(&b, "t", f, newHistory(10)))
	require.Contains(t, b.String(), "rates per minute: requests 400 (max 400)  tokens -  Σ rate share 300/-\n")
	k.RPM, k.RPMLimit, k.SumRPMShare = nil, nil, 0
	require.NotContains(t, plainLine(frame{Key: k}), "rpm=", "no rate, no rate fields")
}

// TestTableAlignsWideCharacters: columns are as wide as their cells show
// on a terminal. They were counted in runes, so a key in CJK script put
// the cells after it one cell out of line per wide rune.
func TestTableAlignsWideCharacters(t *testing.T) {
	var b strings.Builder
	tb := newTable(&b, "KEY", "L_GLOBAL", "MODE")
	tb.row("ключ-日本", "20", "normal")
	tb.row("api", "8", "learning")
	tb.row("e\u0301t\u00e9", "1", "normal") // a combining accent takes no cell
	require.NoError(t, tb.flush())
	require.Equal(t, ""+
		"KEY        L_GLOBAL  MODE\n"+
		"ключ-日本  20        normal\n"+
		"api        8         learning\n"+
		"e\u0301t\u00e9        1         normal\n", b.String())
	require.Equal(t, 9, displayWidth("ключ-日本"))
	require.Equal(t, 4, displayWidth("ＡＢ"), "fullwidth")
	require.Equal(t, 0, displayWidth("\u200b"), "a zero-width space")
}

// TestShellCommandRoundTrips: a command line shown to the user, run by
// bash, passes each argument as it is, whatever its characters, and one
// that starts with a dash as an argument; nothing a terminal acts on is
// written raw.
func TestShellCommandRoundTrips(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err, "bash runs the quoted lines")
	args := []string{"plain", "a b", "it's", "a\nb", "a\tb\rc", "\x1b[2Jx\ry", "-dash", "--", "$HOME", "`id`", `back\slash`,
		"é ü 中", "zero\u200bwidth", "bad\xffutf8", "", "'", `\x41`, "\\'"}
	for _, a := range args {
		line := shellCommand("undrain", "k", a)
		require.False(t, strings.ContainsFunc(line, func(r rune) bool { return r < ' ' || r == 0x7f }), "%q", line)
		// The line as the user would paste it, with fleetctl replaced by
		// a function that prints its arguments one per NUL.
		out, err := exec.Command(bash, "-c", `fleetctl() { printf '%s\0' "$@"; }; `+line).Output()
		require.NoError(t, err, "%q", line)
		want := []string{"undrain"}
		if strings.HasPrefix(a, "-") {
			want = append(want, "--")
		}
		want = append(want, "k", a)
		require.Equal(t, want, strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"), "%q", line)
	}
	require.Equal(t, "fleetctl drain --wait k w", shellCommand("drain --wait", "k", "w"))
	require.Equal(t, `fleetctl undrain k $'a\nb'`, shellCommand("undrain", "k", "a\nb"))
	require.Equal(t, "fleetctl keys create --max N -- -k", shellCommand("keys create --max N", "-k"))
}
