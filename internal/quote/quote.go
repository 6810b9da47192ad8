// Package quote quotes user input for error messages.
package quote

import (
	"fmt"
	"unicode/utf8"
)

// Short returns s Go-quoted, cut to its first 40 characters and then
// followed by an ellipsis, so that a long or binary value cannot flood an
// error message.
func Short(s string) string {
	q := fmt.Sprintf("%.40q", s)
	if utf8.RuneCountInString(s) > 40 {
		q += "…"
	}
	return q
}
