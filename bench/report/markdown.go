package report

import (
	"fmt"
	"strings"
)

// table renders a Markdown table. Cells containing "|" are escaped.
type table struct {
	header []string
	align  []byte // 'l' or 'r' per column; missing means 'l'
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	b.WriteString("|")
	for _, h := range t.header {
		fmt.Fprintf(&b, " %s |", esc(h))
	}
	b.WriteString("\n|")
	for i := range t.header {
		if i < len(t.align) && t.align[i] == 'r' {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("|")
		for i := range t.header {
			cell := ""
			if i < len(r) {
				cell = r[i]
			}
			fmt.Fprintf(&b, " %s |", esc(cell))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// codeBlock returns cmd as a fenced shell block.
func codeBlock(cmd string) string {
	return "```sh\n" + cmd + "\n```\n"
}

// verdict renders whether a target was met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}
