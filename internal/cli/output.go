package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	ucli "github.com/urfave/cli/v2"
	"golang.org/x/text/width"
)

// The output formats of read commands.
const (
	formatTable = "table"
	formatJSON  = "json"
)

func outputFlag() ucli.Flag {
	return &ucli.StringFlag{
		Name:    flagOutput,
		Aliases: []string{"o"},
		Value:   formatTable,
		Usage:   "output format: table or json",
	}
}

// outputFormat returns c's --output, or a usage error for anything but
// table or json.
func outputFormat(c *ucli.Context) (string, error) {
	switch f := c.String(flagOutput); strings.ToLower(f) {
	case formatTable, formatJSON:
		return strings.ToLower(f), nil
	default:
		return "", usageErrorf("invalid value %q for --%s: want %s or %s", f, flagOutput, formatTable, formatJSON)
	}
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns separated by at least two spaces; the last
// cell of a row is not padded. Columns are as wide as their widest cell
// shown on a terminal (see displayWidth), so a key named in a script of
// wide characters does not push the cells after it out of line.
type table struct {
	w    io.Writer
	rows [][]string
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) flush() error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r[:max(len(r)-1, 0)] {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], displayWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-displayWidth(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows = nil
	_, err := io.WriteString(t.w, b.String())
	return err
}

// displayWidth is how many terminal cells s takes: two for an East Asian
// wide or fullwidth rune, none for a combining mark or a format
// character, one for any other.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		switch kind := width.LookupRune(r).Kind(); {
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		case kind == width.EastAsianWide, kind == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}

// optInt formats an optional count: "-" for nil.
func optInt(v *int) string {
	if v == nil {
		return "-"
	}
	return strconv.Itoa(*v)
}

// lGlobal formats a key's L_global: "-" for 0, which no heartbeat
// computes (it is at least 1) and which a key shows until its first
// member's heartbeat.
func lGlobal(v int) string {
	if v == 0 {
		return "-"
	}
	return strconv.Itoa(v)
}

// percent formats an optional fraction as a percentage: "-" for nil.
func percent(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

// shortDuration formats d for a table column, truncated (never rounded up)
// so that a lease is never shown longer than it is: "0.4s", "12s",
// "59m59s", "2h05m".
func shortDuration(d time.Duration) string {
	if d < 0 {
		return "-" + shortDuration(-d)
	}
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%d.%ds", d/time.Second, d%time.Second/(100*time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	default:
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
}

// writtenDuration formats d exactly, as one would write it for a duration
// flag: time.Duration's String without its zero minutes and seconds, so
// "1000h", "1h30s", "10m", "1m30s", "250ms" rather than "1000h0m0s" or
// "1h0m30s". time.ParseDuration reads the result back as d.
func writtenDuration(d time.Duration) string {
	s := strings.Replace(d.String(), "h0m", "h", 1)
	if strings.HasSuffix(s, "h0s") || strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// labelsString formats labels as sorted name=value pairs: "region=eu,zone=a",
// or "-" for none, safe for a table cell as it is (see cell). A name or
// value with a '=', ',' or '"' in it is quoted, so that the pairs read one
// way: {"x": "y=q,r"} is x="y=q,r", not x=y=q,r; so is one that cell would
// quote, every second space of a run written \x20, so that no gap in it
// reads as the break between two columns: "a  b" is "a \x20b".
func labelsString(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	part := func(s string) string {
		if s == "" || !strings.ContainsAny(s, `=,"`) && cell(s) == s {
			return s
		}
		return strings.ReplaceAll(strconv.Quote(s), "  ", ` \x20`)
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(part(k))
		b.WriteByte('=')
		b.WriteString(part(labels[k]))
	}
	return b.String()
}

// cell makes a value safe for a table cell and a terminal: a value with a
// character that is not printable — tabs and newlines, which would break
// the columns, escape sequences, which a terminal would obey (a node id
// or label is whatever a node's process sent) — or with bytes that are
// not UTF-8 is shown quoted, with those escaped; so is a value that is
// empty or starts or ends with white space, so that "api " and "api"
// differ, and one with two spaces in a row, which would read as the gap
// between two columns.
func cell(s string) string {
	if s == "" || strings.TrimSpace(s) != s || strings.Contains(s, "  ") || !utf8.ValidString(s) ||
		strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// writeJSONLine writes v as compact JSON on one line.
func writeJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// shellCommand returns the fleetctl command line command (a command with
// its flags: "drain --wait") run on args, for the user to copy: each
// argument quoted (see quoteArg), after "--" when one of them would read
// as a flag.
func shellCommand(command string, args ...string) string {
	var b strings.Builder
	b.WriteString("fleetctl " + command)
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") }) {
		b.WriteString(" --")
	}
	for _, a := range args {
		b.WriteString(" " + quoteArg(a))
	}
	return b.String()
}

// quoteArg quotes s for a shell command line shown to the user: as is when
// it is plain; in single quotes when every character prints; else in
// ANSI-C quotes ($'…', as bash, zsh and ksh read them), with what a
// terminal would act on (a newline, an escape) written as an escape, so
// the line shows the argument and names it exactly.
func quoteArg(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/@+=,-", r)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	printable := func(r rune) bool { return r != utf8.RuneError && unicode.IsPrint(r) }
	if !strings.ContainsFunc(s, func(r rune) bool { return !printable(r) }) {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\\' || r == '\'':
			b.WriteString(`\` + string(r))
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case !printable(r):
			for _, c := range []byte(s[i : i+size]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('\'')
	return b.String()
}
