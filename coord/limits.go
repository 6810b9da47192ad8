package coord

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// SchemaVersion is the migration version of the fleetlimit schema this
// library needs (package migrations embeds it).
const SchemaVersion = 17

// The bounds a report must respect. The database enforces the same bounds
// with CHECK constraints and checks in fleetlimit.heartbeat, so a raw SQL
// caller cannot store what Heartbeat would refuse.
const (
	// MaxNameBytes is the longest key, node id, instance, label name or
	// label value, in bytes.
	MaxNameBytes = 200
	// MaxCount bounds LLocal, Inflight, Demand and the operator limits.
	MaxCount = 1_000_000
	// MaxLabels is the most labels a report may carry.
	MaxLabels = 32
	// MinLeaseTTL is the shortest lease a report may ask for.
	MinLeaseTTL = 100 * time.Millisecond
	// MaxLeaseTTL is the longest lease a report may ask for.
	MaxLeaseTTL = time.Hour
	// MaxRequestBound is the longest Report.MaxRequestDuration and
	// Departure.Hold.
	MaxRequestBound = 24 * time.Hour
)

// ValidName reports whether s can name a key or a node: 1 to MaxNameBytes
// bytes of UTF-8 without a NUL byte. Any other name is refused before it
// reaches the database, which could not store it.
func ValidName(s string) bool {
	return len(s) >= 1 && len(s) <= MaxNameBytes && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// Padded reports whether s begins or ends with white space (Unicode's)
// or a byte order mark, or is all white space. Names are matched byte
// for byte, so "openai " and "openai" are two keys, each with its own
// quota: a name read from a file or an environment variable with a
// stray newline or space would start a second fleet beside the first.
// The coordinator stores such names (a key may already have one);
// fleet.New and 'fleetctl keys create' refuse them.
func Padded(s string) bool {
	return s != "" && strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '\uFEFF' }) != s
}
