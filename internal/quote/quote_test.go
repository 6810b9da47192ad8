package quote

import (
	"strings"
	"testing"
)

func TestShort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"api", `"api"`},
		{strings.Repeat("a", 40), `"` + strings.Repeat("a", 40) + `"`},
		{strings.Repeat("a", 41), `"` + strings.Repeat("a", 40) + `"…`},
		{strings.Repeat("é", 41), `"` + strings.Repeat("é", 40) + `"…`},
		{"a\x00b", `"a\x00b"`},
	} {
		if got := Short(tc.in); got != tc.want {
			t.Errorf("Short(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
